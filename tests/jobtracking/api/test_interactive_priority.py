"""The interactive priority goes before every other client's work: a client needs the
permission to set it, on every path that takes a priority (single create, quick or not; bulk
items; requeue)."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from jobtracking.models import ExtractionJob
from tests.jobtracking.api.conftest import assert_problem
from tests.jobtracking.api.test_jobs_create import URL, body

pytestmark = pytest.mark.django_db
REFUSED = "The interactive priority needs the permission to set it"


def refusal(response) -> str:
    return str(assert_problem(response, 400, "validation_error")["errors"])


def test_a_client_without_the_permission_cannot_create_interactive_jobs(other_api, extractor):
    assert REFUSED in refusal(other_api.post(URL, body(priority="interactive"), format="json"))
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    form = {"extractor": "sandbox", "file_id": "f", "file": upload, "priority": "interactive"}
    assert REFUSED in refusal(other_api.post(URL, form))
    assert not ExtractionJob.objects.exists()
    assert other_api.post(URL, body(priority="normal"), format="json").status_code == 201


def test_a_bulk_item_asking_for_interactive_fails_alone(other_api, extractor):
    items = [body(file_id="b-1"), body(file_id="b-2", priority="interactive")]
    response = other_api.post(URL + "bulk/", {"jobs": items}, format="json")
    assert REFUSED in str(response.json())
    assert not ExtractionJob.objects.filter(priority=0).exists()


def test_a_requeue_cannot_raise_a_job_to_interactive_without_it(other_api, extractor):
    job = other_api.post(URL, body(), format="json").json()
    assert other_api.post(f"{URL}{job['id']}/cancel/", {}, format="json").status_code == 200
    url = f"{URL}{job['id']}/requeue/"
    assert REFUSED in refusal(other_api.post(url, {"priority": "interactive"}, format="json"))
    assert other_api.post(url, {"priority": "bulk"}, format="json").status_code == 200


def test_the_permission_lets_a_client_set_it(api, extractor):
    response = api.post(URL, body(priority="interactive"), format="json")
    assert response.status_code == 201 and response.json()["priority"] == "interactive"
