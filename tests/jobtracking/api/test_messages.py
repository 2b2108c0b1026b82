"""Validation messages read as English: each validator of the write endpoints and the job
filters, provoked through the API, and the counting that DRF got wrong."""

import pytest
from rest_framework import serializers

from jobtracking.api.messages import counted
from jobtracking.api.serializers import StrictSerializer
from tests.factories import api_job
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"
NEW_JOB = {"extractor": "sandbox", "file_id": "f", "source_url": "https://files.example.org/a"}


def errors(response) -> dict:
    return assert_problem(response, 400, "validation_error")["errors"]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"file_id": "x" * 256}, "file_id", "Must be at most 255 characters."),
        ({"file_id": {}}, "file_id", "Must be a string."),
        ({"file_size": -1}, "file_size", "Must be at least 0."),
        ({"file_size": 2**63}, "file_size", f"Must be at most {2**63 - 1}."),
        ({"file_size": 1.5}, "file_size", "Must be a whole number."),
        (
            {"file_sha256": "ABC"},
            "file_sha256",
            "Must be a SHA-256 digest: 64 lowercase hexadecimal digits.",
        ),
        (
            {"file": "budget.pdf"},
            "file",
            "Must be a file, sent in a multipart/form-data body (JSON cannot carry one).",
        ),
    ],
)
def test_create_field_messages_read_as_english(api, extractor, fields, field, message):
    assert errors(api.post(URL, NEW_JOB | fields, format="json")) == {field: [message]}


@pytest.mark.parametrize("path", ["", "bulk/"])
def test_a_body_that_is_not_an_object_is_named_so(api, path):
    assert errors(api.post(URL + path, [NEW_JOB], format="json")) == {
        "non_field_errors": ["The body must be a JSON object of this request's fields."]
    }


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([], "Send at least 1 job."),
        ([NEW_JOB] * 501, "At most 500 jobs a request: send the rest in another."),
        ({"0": NEW_JOB}, "Must be a JSON array of jobs."),
    ],
)
def test_bulk_list_messages_count_jobs(api, jobs, message):
    assert errors(api.post(URL + "bulk/", {"jobs": jobs}, format="json")) == {"jobs": [message]}


@pytest.mark.parametrize(
    ("action", "fields", "field", "message"),
    [
        ("cancel", {"reason": "x" * 1001}, "reason", "Must be at most 1000 characters."),
        ("cancel", {"reason": ["a"]}, "reason", "Must be a string."),
        ("requeue", {"force": "maybe"}, "force", "Must be true or false."),
    ],
)
def test_action_messages_read_as_english(api, owner, extractor, action, fields, field, message):
    job = api_job(extractor, user=owner)
    response = api.post(f"{URL}{job.pk}/{action}/", fields, format="json")
    assert errors(response) == {field: [message]}
    job.refresh_from_db()
    assert job.status_id == "pending"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("priority=urgent", "Unknown value 'urgent'; use interactive, normal, bulk."),
        (
            "status=pending&status=done",
            "Unknown value 'done'; use pending, held, submitting, submitted, processing, "
            "succeeded, failed, timed_out, cancelled.",
        ),
    ],
)
def test_filter_choices_are_named_when_a_value_is_refused(api, query, message):
    name = query.split("=")[0]
    assert errors(api.get(f"{URL}?{query}")) == {name: [message]}


def test_counted_pluralises():
    assert [counted(n, "job") for n in (0, 1, 2)] == ["0 jobs", "1 job", "2 jobs"]


def test_any_input_serializers_list_counts_its_elements():
    """A list added later gets the same English, "element" unless it names its items."""

    class Tags(StrictSerializer):
        tags = serializers.ListField(child=serializers.CharField(max_length=1), min_length=2)

    one = Tags(data={"tags": ["a"]})
    assert not one.is_valid() and one.errors == {"tags": ["Send at least 2 elements."]}
    long = Tags(data={"tags": ["ab", "c"]})
    assert not long.is_valid() and long.errors == {"tags": {0: ["Must be at most 1 character."]}}
    assert Tags(data={"tags": ["a", "b"]}).is_valid()
