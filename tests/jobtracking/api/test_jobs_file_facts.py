"""Through the API, a job describes its file without being told: a URL job is named after its
path (single and bulk creates alike), an upload gets its SHA-256 and a wrong declared one is
refused."""

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from jobtracking.models import ExtractionJob
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


def url_item(file_id: str, path: str) -> dict:
    return {
        "extractor": "sandbox",
        "file_id": file_id,
        "source_url": f"https://files.example.org{path}",
    }


def test_create_names_a_url_job_after_its_path(api, extractor):
    response = api.post(URL, url_item("f-1", "/grants/7/budget.csv"), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["file_name"] == "budget.csv"


def test_bulk_create_names_each_url_job_after_its_path(api, extractor):
    items = [url_item("f-1", "/a/budget.csv"), url_item("f-2", "/b/Annual%20report.pdf")]
    response = api.post(URL + "bulk/", {"jobs": items}, format="json")
    assert response.status_code == 200, response.content
    names = dict(ExtractionJob.objects.values_list("file_id", "file_name"))
    assert names == {"f-1": "budget.csv", "f-2": "Annual report.pdf"}


def test_create_upload_gets_its_sha256(api, extractor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    assert response.status_code == 201, response.content
    assert response.json()["file_sha256"] == hashlib.sha256(b"Total: 5\n").hexdigest()


def test_create_upload_with_a_wrong_declared_sha256_is_refused(api, extractor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    response = api.post(
        URL, {"extractor": "sandbox", "file_id": "f", "file": upload, "file_sha256": "0" * 64}
    )
    assert_problem(response, 400, "validation_error")
    assert not ExtractionJob.objects.exists()


def test_a_new_url_job_says_its_facts_are_not_known_yet_and_why(api, extractor):
    response = api.post(URL, url_item("f-1", "/grants/7/budget.csv"), format="json")
    assert response.json()["file_facts"] == {
        "origin": None,
        "note": "Not known yet: they are learnt from the extractor when the job succeeds, if it "
        "reports them.",
    }


def test_an_uploads_facts_say_the_service_measured_them(api, extractor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    assert response.json()["file_facts"]["origin"] == "upload"
