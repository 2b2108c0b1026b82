"""An event's payload (the pull feed's `payload`, a webhook body's `data`) is the job as
`GET /api/v1/jobs/<id>/` shows it: one representation, with the API's paths as links (a worker
has no request to take an absolute address from)."""

from urllib.parse import urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from jobtracking.models import JobEvent
from jobtracking.representation import DATETIME_FIELDS
from jobtracking.services import SYSTEM, job_transition

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


def as_paths(job: dict) -> dict:
    """The API's job with its links as the paths an event carries (a job without a batch has
    no batch link)."""
    links = {name: url and urlsplit(url).path for name, url in job["links"].items()}
    return {**job, "links": links}


def moments(job: dict) -> list[str]:
    return [job[name] for name in DATETIME_FIELDS if job[name] is not None]


def create(api) -> dict:
    body = {"extractor": "sandbox", "file_id": "f-1", "source_url": "https://files.example.org/f"}
    response = api.post(URL, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_an_events_payload_is_the_job_as_get_shows_it(api, extractor):
    job_id = create(api)["id"]

    def submitted(job):
        job.external_job_id, job.submit_attempts = "ext-1", 1

    def failed(job):
        job.error_code, job.error_message = "extraction_failed", "The document is corrupt."

    for status, prepare in [
        ("submitting", None),
        ("submitted", submitted),
        ("processing", None),
        ("failed", failed),
    ]:
        job_transition(job_id=job_id, to_status=status, actor=SYSTEM, prepare=prepare)
    shown = api.get(f"{URL}{job_id}/").json()
    event = JobEvent.objects.filter(job_id=job_id).latest("id")
    assert event.type == "job.failed"
    assert event.payload == as_paths(shown)
    assert shown["error"] == {
        "code": "extraction_failed",
        "message": "The document is corrupt.",
        "requeue_may_help": False,
    }
    assert shown["links"]["self"] == f"http://testserver{URL}{job_id}/"
    assert event.payload["links"]["self"] == f"{URL}{job_id}/"
    assert len(moments(shown)) == 6 and all(text.endswith("Z") for text in moments(shown))
    feed = api.get("/api/v1/events/?type=job.failed").json()["results"]
    assert [item["payload"] for item in feed] == [event.payload]
    assert feed[0]["created_at"].endswith("Z")


def test_a_created_events_payload_is_the_create_response(api, extractor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f-2", "file": upload})
    assert response.status_code == 201, response.content
    created = response.json()
    payload = JobEvent.objects.get(job_id=created["id"], type="job.created").payload
    assert payload == as_paths(created)
    assert payload["has_upload"] is True and payload["requested_by"] == "owner"
