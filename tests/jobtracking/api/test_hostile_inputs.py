"""Inputs that used to end in a 500: each is now a 4xx problem and creates nothing."""

import json

import pytest

from jobtracking.infra.storable import MAX_DEPTH
from jobtracking.models import ExtractionJob
from tests.factories import ExtractionJobFactory
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


def body(**overrides) -> dict:
    return {
        "extractor": "sandbox",
        "file_id": "hostile",
        "source_url": "https://files.example.org/a.pdf",
        **overrides,
    }


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def post_raw(api, text: str):
    return api.generic("POST", URL, text, content_type="application/json")


@pytest.mark.parametrize("size", [10**30, 2**63])
def test_a_file_size_beyond_bigint_is_a_validation_error(api, extractor, size):
    problem = assert_problem(
        api.post(URL, body(file_size=size), format="json"), 400, "validation_error"
    )
    assert "file_size" in problem["errors"]
    assert not ExtractionJob.objects.exists()


def test_a_file_size_beyond_bigint_fails_its_item_not_the_bulk_batch(api, extractor):
    items = [body(file_id="ok"), body(file_id="huge", file_size=2**63)]
    response = api.post(URL + "bulk/", {"jobs": items}, format="json")
    assert response.status_code == 200
    assert (response.json()["created"], response.json()["failed"]) == (1, 1)


@pytest.mark.parametrize("missing", ["file_id", "extractor", "source_url"])
def test_a_required_field_missing_fails_its_item_not_the_bulk_batch(api, extractor, missing):
    incomplete = {name: value for name, value in body(file_id="gap").items() if name != missing}
    response = api.post(URL + "bulk/", {"jobs": [body(file_id="ok"), incomplete]}, format="json")
    assert response.status_code == 200
    results = response.json()["results"]
    assert [item["status"] for item in results] == ["created", "error"]
    assert missing in results[1]["error"]["errors"]


def test_json_nested_a_thousand_levels_is_refused_in_a_json_body(api, extractor):
    text = json.dumps(body())[:-1] + ', "metadata": ' + "[" * 1000 + "]" * 1000 + "}"
    assert_problem(post_raw(api, text), 400, "parse_error")


@pytest.mark.parametrize("field", ["metadata", "options"])
def test_json_nested_too_deeply_is_refused_as_a_field_error(api, extractor, field):
    problem = assert_problem(
        api.post(URL, body(**{field: nested(MAX_DEPTH)}), format="json"), 400, "validation_error"
    )
    deepest = ".".join([field, *["a"] * MAX_DEPTH])
    assert problem["errors"] == {deepest: [f"Must nest at most {MAX_DEPTH} levels deep."]}
    assert api.post(URL, body(**{field: nested(MAX_DEPTH - 1)}), format="json").status_code == 201


def test_json_nested_too_deeply_is_refused_in_multipart_and_bulk(api, extractor):
    form = {**body(file_id="m"), "metadata": "[" * 1000 + "]" * 1000}
    assert_problem(api.post(URL, form), 400, "validation_error")
    items = [body(metadata=nested(MAX_DEPTH))]
    assert api.post(URL + "bulk/", {"jobs": items}, format="json").json()["failed"] == 1


def test_a_lone_surrogate_in_metadata_is_a_validation_error(api, extractor):
    text = json.dumps(body())[:-1] + ', "metadata": {"note": "\\ud800"}}'
    problem = assert_problem(post_raw(api, text), 400, "validation_error")
    assert problem["errors"] == {
        "metadata.note": ["Must be valid Unicode text (no lone surrogates)."]
    }
    assert not ExtractionJob.objects.exists()


@pytest.mark.parametrize("field", ["options", "metadata"])
def test_options_and_metadata_over_their_cap_are_refused_by_name(api, extractor, settings, field):
    setattr(settings, f"JOBS_{field.upper()}_MAX_BYTES", 20)
    problem = assert_problem(
        api.post(URL, body(**{field: {"note": "x" * 30}}), format="json"), 400, "validation_error"
    )
    assert problem["errors"] == {field: ["Must be at most 20 bytes as JSON."]}
    assert api.post(URL, body(**{field: {"n": 1}}), format="json").status_code == 201


def test_not_a_number_is_not_json_in_a_multipart_field(api, extractor):
    problem = assert_problem(
        api.post(URL, {**body(file_id="nan"), "metadata": '{"x": NaN}'}), 400, "validation_error"
    )
    assert problem["errors"] == {"metadata": ["Must be valid JSON."]}


@pytest.mark.parametrize("path", ["/api/v1/extractors/%00/", "/api/v1/statuses/%00/"])
def test_a_null_byte_in_a_reference_lookup_is_not_found(api, path):
    assert api.get(path).status_code == 404


@pytest.mark.parametrize("digit", ["\u0663", "\uff13"])  # Arabic-Indic and full-width three
def test_non_ascii_digits_are_not_numbers(api, owner, digit):
    assert_problem(api.get(f"/api/v1/stats/?window_hours={digit}"), 400, "validation_error")
    job = ExtractionJobFactory(requested_by=owner, succeeded=True)
    assert_problem(api.get(f"{URL}{job.pk}/result/?attempt={digit}"), 400, "validation_error")
