"""What a new job knows of its file without being told: a name (from its URL or upload) and,
for an upload, its SHA-256."""

import hashlib

import pytest
from django.core.files.base import ContentFile

from jobtracking.errors import JobValidationError
from jobtracking.models import ExtractionJob, JobEvent
from jobtracking.services import NewJob, job_create, job_create_many

pytestmark = pytest.mark.django_db

BODY = b"year,amount\n2026,1200\n"


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path


def url_job(extractor, file_id: str, url: str, **kwargs) -> NewJob:
    return NewJob(extractor=extractor, file_id=file_id, source_url=url, **kwargs)


def upload_job(extractor, file_id: str = "up-1", **kwargs) -> NewJob:
    return NewJob(
        extractor=extractor, file_id=file_id, upload=ContentFile(BODY, name="budget.csv"), **kwargs
    )


def test_job_create_names_a_url_job_after_its_path(extractor, api_actor):
    job = job_create(
        url_job(extractor, "f-1", "https://files.example.org/g/7/Q3%20budget.csv?sig=x"),
        actor=api_actor,
    )
    assert ExtractionJob.objects.get(pk=job.pk).file_name == "Q3 budget.csv"
    assert JobEvent.objects.get(job=job).payload["file_name"] == "Q3 budget.csv"


def test_job_create_many_names_each_url_job_and_keeps_a_given_name(extractor, api_actor):
    outcomes = job_create_many(
        [
            url_job(extractor, "f-1", "https://files.example.org/a/budget.csv"),
            url_job(extractor, "f-2", "https://files.example.org/a/b.pdf", file_name="Own.pdf"),
            url_job(extractor, "f-3", "https://files.example.org/"),
        ],
        actor=api_actor,
    )
    names = {
        job.file_id: job.file_name
        for job in ExtractionJob.objects.filter(pk__in=[o.job.pk for o in outcomes])
    }
    assert names == {"f-1": "budget.csv", "f-2": "Own.pdf", "f-3": ""}


def test_job_create_stores_an_uploads_sha256_and_name(extractor, api_actor):
    job = job_create(upload_job(extractor), actor=api_actor)
    job.refresh_from_db()
    assert job.file_sha256 == hashlib.sha256(BODY).hexdigest()
    assert job.file_name == "budget.csv"
    assert job.upload.read() == BODY


def test_job_create_accepts_an_upload_whose_declared_digest_is_right(extractor, api_actor):
    digest = hashlib.sha256(BODY).hexdigest()
    job = job_create(upload_job(extractor, file_sha256=digest), actor=api_actor)
    assert ExtractionJob.objects.get(pk=job.pk).file_sha256 == digest


def test_job_create_refuses_an_upload_whose_declared_digest_is_wrong(
    extractor, api_actor, tmp_path
):
    with pytest.raises(JobValidationError) as caught:
        job_create(upload_job(extractor, file_sha256="0" * 64), actor=api_actor)
    assert hashlib.sha256(BODY).hexdigest() in caught.value.fields["file_sha256"]
    assert not ExtractionJob.objects.exists()
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]  # the file is gone


def test_job_create_many_refuses_only_the_item_whose_digest_is_wrong(
    extractor, api_actor, tmp_path
):
    wrong, right = job_create_many(
        [upload_job(extractor, "up-1", file_sha256="0" * 64), upload_job(extractor, "up-2")],
        actor=api_actor,
    )
    assert isinstance(wrong.error, JobValidationError) and wrong.job is None
    assert right.error is None
    (stored,) = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert ExtractionJob.objects.get().upload.name.endswith(stored.name)
