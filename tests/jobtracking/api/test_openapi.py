"""The OpenAPI document explains itself: what each operation is for, grouped by resource, with
examples a client can copy, and request schemas that match what each media type carries."""

import pytest

from jobtracking.representation import jobs_path
from jobtracking.services import SYSTEM, job_transition
from tests.factories import ExtractionJobFactory

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
            "batches",
            "events",
            "extractors",
            "statuses",
            "stats",
            "usage",
            "health",
            "webhooks",
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


def same_shape(example, real, where: str = "") -> None:
    """The same keys all the way down, and values of the same JSON types."""
    assert type(example) is type(real), where
    if isinstance(real, dict):
        assert example.keys() == real.keys(), where
        for name in real:
            same_shape(example[name], real[name], f"{where}.{name}")


def test_the_job_example_has_a_real_jobs_shape(schema, api, owner, extractor):
    from jobtracking.api.docs import JOB_EXAMPLE

    job = ExtractionJobFactory(
        processing=True,
        extractor=extractor,
        requested_by=owner,
        file_size=184320,
        options={"pages": "1-3"},
        metadata={"grant_id": 4711},
    )
    same_shape(JOB_EXAMPLE, api.get(f"/api/v1/jobs/{job.pk}/").json())
    retrieve = schema["paths"]["/api/v1/jobs/{id}/"]["get"]["responses"]["200"]
    assert retrieve["content"]["application/json"]["examples"]["AJob"]["value"] == JOB_EXAMPLE


def test_the_event_example_has_a_real_events_shape(schema, api, owner, extractor):
    from jobtracking.api.docs import EVENT_EXAMPLE, EVENT_JOBS_PATH

    job = ExtractionJobFactory(
        submitted=True,
        extractor=extractor,
        requested_by=owner,
        file_size=184320,
        options={"pages": "1-3"},
        metadata={"grant_id": 4711},
    )
    job_transition(job_id=job.pk, to_status="processing", actor=SYSTEM)
    (real,) = api.get("/api/v1/events/").json()["results"]
    same_shape(EVENT_EXAMPLE, real)
    assert EVENT_JOBS_PATH == jobs_path()
    assert real["payload"]["links"]["self"] == f"{jobs_path()}{job.pk}/"
    feed = schema["paths"]["/api/v1/events/"]["get"]["responses"]["200"]["content"]
    assert feed["application/json"]["examples"]["AnEvent"]["value"]["results"] == [EVENT_EXAMPLE]
    payload = schema["components"]["schemas"]["JobEvent"]["properties"]["payload"]
    assert payload["allOf"] == [{"$ref": "#/components/schemas/EventPayload"}]
    # A job (job.* events) or a batch (batch.* events).
    assert schema["components"]["schemas"]["EventPayload"]["oneOf"] == [
        {"$ref": "#/components/schemas/ExtractionJob"},
        {"$ref": "#/components/schemas/Batch"},
    ]


def test_cancel_and_requeue_document_one_json_body(schema):
    # One schema under several media types made generated clients send multipart as a form.
    for action in ("cancel", "requeue"):
        body = schema["paths"][f"/api/v1/jobs/{{id}}/{action}/"]["post"]["requestBody"]
        assert list(body["content"]) == ["application/json"], action


def test_create_documents_the_replay_header_on_200_only(schema):
    responses = schema["paths"]["/api/v1/jobs/"]["post"]["responses"]
    header = responses["200"]["headers"]["Idempotent-Replayed"]
    assert header["schema"]["enum"] == ["true"]
    assert "Idempotent-Replayed" not in responses["201"].get("headers", {})
