"""The migration that adds `requeued_at` fills it for jobs requeued before it existed."""

import importlib

import pytest
from django.apps import apps

from jobtracking.models import ExtractionJob, JobStatusChange
from jobtracking.services import SYSTEM, job_requeue
from tests.factories import ExtractionJobFactory

pytestmark = pytest.mark.django_db

backfill = importlib.import_module("jobtracking.migrations.0016_job_requeued_at").backfill


def test_backfill_takes_the_latest_requeue_of_the_current_attempt():
    twice = ExtractionJobFactory(failed=True)
    job_requeue(job_id=twice.pk, actor=SYSTEM)
    ExtractionJob.objects.filter(pk=twice.pk).update(status="failed")
    job_requeue(job_id=twice.pk, actor=SYSTEM)
    never = ExtractionJobFactory(failed=True)
    ExtractionJob.objects.update(requeued_at=None)  # as before the column existed

    backfill(apps, None)

    second = JobStatusChange.objects.get(job=twice, attempt=3, to_status="pending")
    assert ExtractionJob.objects.get(pk=twice.pk).requeued_at == second.changed_at
    assert ExtractionJob.objects.get(pk=never.pk).requeued_at is None
