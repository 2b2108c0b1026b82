"""A body the API does not read is refused with what to send instead; above all JSON that
arrived form-encoded, as `curl -d '{…}'` sends it without a Content-Type header."""

import json
from urllib.parse import urlencode

import pytest

from jobtracking.models import ExtractionJob
from tests.factories import api_job
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"
FORM = "application/x-www-form-urlencoded"
NEW_JOB = {
    "extractor": "sandbox",
    "file_id": "f-1",
    "source_url": "https://files.example.org/a.pdf?page=1&copy=2",  # & and = as a form has
}


@pytest.fixture
def job(extractor, owner):
    return api_job(extractor, "held", user=owner)


def write_requests(job):
    return {
        "create": (URL, NEW_JOB),
        "bulk": (URL + "bulk/", {"jobs": [NEW_JOB]}),
        "cancel": (f"{URL}{job.pk}/cancel/", {"reason": "not needed"}),
        "requeue": (f"{URL}{job.pk}/requeue/", {"force": True}),
    }


@pytest.mark.parametrize("action", ["create", "bulk", "cancel", "requeue"])
def test_json_sent_as_a_form_is_refused_with_the_header_to_send(api, job, action):
    url, data = write_requests(job)[action]
    response = api.post(url, json.dumps(data), content_type=FORM)
    problem = assert_problem(response, 415, "unsupported_media_type")
    assert "`Content-Type: application/json`" in problem["detail"]
    assert "errors" not in problem  # not an unknown field named by the whole text
    assert list(ExtractionJob.objects.values_list("file_id", "status")) == [("held", "pending")]


def test_a_form_still_reads_as_a_form(api, job):
    # A real form still reads (the browsable API posts them).
    form = api.post(f"{URL}{job.pk}/cancel/", urlencode({"reason": "{not json"}), content_type=FORM)
    assert form.status_code == 200, form.content
    assert job.status_changes.latest("changed_at").reason == "{not json"


def test_a_body_without_a_type_is_told_what_to_send(api, extractor):
    response = api.generic("POST", URL, json.dumps(NEW_JOB), content_type="")
    problem = assert_problem(response, 415, "unsupported_media_type")
    assert problem["detail"] == (
        "No Content-Type given: send JSON with the header `Content-Type: application/json` "
        "(or use multipart/form-data or application/x-www-form-urlencoded)."
    )
    assert not ExtractionJob.objects.exists()


def test_an_unread_type_names_the_types_read(api, extractor):
    problem = assert_problem(
        api.post(URL + "bulk/", "<jobs/>", content_type="application/xml"),
        415,
        "unsupported_media_type",
    )
    assert problem["detail"] == (
        '"application/xml" bodies are not read here: send JSON with the header '
        "`Content-Type: application/json`."
    )
