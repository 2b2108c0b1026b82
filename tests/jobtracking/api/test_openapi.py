"""The OpenAPI document explains itself: what each operation is for, grouped by resource, with
examples a client can copy, and request schemas that match what each media type carries."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(api):
    response = api.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def test_every_operation_has_a_summary_a_description_and_a_resource_tag(schema):
    descriptions = {}
    for name, operation in operations(schema):
        assert operation.get("summary"), name
        assert len(operation.get("description", "")) > 20, name
        assert operation["tags"][0] in {
            "jobs",
            "events",
            "extractors",
            "statuses",
            "stats",
            "health",
        }, name
        descriptions[name] = operation["description"]
    # List, create and retrieve each say what they do.
    jobs = [
        descriptions[n]
        for n in ("GET /api/v1/jobs/", "POST /api/v1/jobs/", "GET /api/v1/jobs/{id}/")
    ]
    assert len(set(jobs)) == 3


def test_create_documents_json_without_the_file_and_multipart_with_it(schema):
    body = schema["paths"]["/api/v1/jobs/"]["post"]["requestBody"]["content"]
    components = schema["components"]["schemas"]

    def properties(media_type):
        name = body[media_type]["schema"]["$ref"].rsplit("/", 1)[-1]
        return components[name]["properties"]

    assert "file" not in properties("application/json")
    assert properties("multipart/form-data")["file"]["format"] == "binary"
    assert properties("application/json")["options"]["type"] == "object"
    assert properties("application/json")["metadata"]["type"] == "object"
    url_example = body["application/json"]["examples"]["CreateByURL"]["value"]
    assert url_example["source_url"].startswith("https://") and "file" not in url_example
    assert "CreateByUpload" in body["multipart/form-data"]["examples"]
    # Requests and responses are separate schemas: the job's output fields are not inputs.
    assert "poll_count" not in properties("application/json")
    assert "poll_count" in components["ExtractionJob"]["properties"]


def test_every_problem_code_has_an_example(schema):
    from jobtracking.api.problems import PROBLEMS

    create = schema["paths"]["/api/v1/jobs/"]["post"]["responses"]
    conflict = create["409"]["content"]["application/problem+json"]["examples"]
    assert conflict["active_job_exists"]["value"]["job_id"]
    assert conflict["force_required"]["value"]["type"] == "/api/problems/force_required"
    documented = set()
    for _, operation in operations(schema):
        for response in operation["responses"].values():
            problem = response.get("content", {}).get("application/problem+json", {})
            documented |= set(problem.get("examples", {}))
    assert documented >= set(PROBLEMS) - {"server_error", "not_acceptable", "bad_request"}


def test_bulk_has_request_and_response_examples(schema):
    bulk = schema["paths"]["/api/v1/jobs/bulk/"]["post"]
    request = bulk["requestBody"]["content"]["application/json"]["examples"]
    response = bulk["responses"]["200"]["content"]["application/json"]["examples"]
    assert len(next(iter(request.values()))["value"]["jobs"]) == 2
    results = next(iter(response.values()))["value"]["results"]
    assert [r["status"] for r in results] == ["created", "error"]
