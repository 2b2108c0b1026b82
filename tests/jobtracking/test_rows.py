"""Rows as JSON for the one-statement inserts (`jobtracking.rows`)."""

import json

import pytest
from django.core.files.base import ContentFile
from django.utils import timezone

from jobtracking.models import ExtractionJob, JobStatusChange
from jobtracking.rows import insert_fields, instance, json_rows
from tests.factories import ExtractorFactory, UserFactory, api_job

pytestmark = pytest.mark.django_db


def test_a_row_holds_each_column_as_the_database_stores_it(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path
    extractor = ExtractorFactory()
    now = timezone.now()
    job = instance(
        ExtractionJob,
        extractor_id=extractor.pk,
        status_id="pending",
        file_id="f",
        priority=2,
        created_at=now,
    )
    job.upload.save("a.pdf", ContentFile(b"%PDF-1.7"), save=False)
    (row,) = json.loads(json_rows([job], insert_fields(ExtractionJob)))
    assert row["id"] == str(job.pk) and row["extractor_id"] == extractor.pk
    assert row["created_at"] == now.isoformat() and row["priority"] == 2
    assert row["upload"] == job.upload.name and row["upload"].endswith(".pdf")
    assert (row["options"], row["attempt"], row["file_size"]) == ({}, 1, None)
    assert row["updated_at"] >= now.isoformat()  # auto_now: set when the row is written


@pytest.mark.parametrize("metadata", [{"n": 10**30}, {"nested": {"n": -(2**70)}}])
def test_integers_beyond_64_bits_in_json_fields_are_stored_as_given(metadata):
    job = api_job(metadata=metadata)
    assert ExtractionJob.objects.get(pk=job.pk).metadata == metadata


def test_instance_builds_with_the_fields_defaults_and_refuses_unknown_fields():
    user = UserFactory()
    change = instance(JobStatusChange, to_status_id="pending", attempt=1, actor_id=user.pk)
    assert (change.details, change.reason, change.actor) == ({}, "", user)
    with pytest.raises(TypeError, match="no fields \\['actor'\\]"):
        instance(JobStatusChange, actor=user)
