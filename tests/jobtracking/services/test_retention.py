"""uploads_sweep and the sweep_uploads command: files no job references go, once they are old
enough that no creation can still be in flight. And a batch goes with its last job."""

import io
import os
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import Schedule

from jobtracking.models import Batch, JobEvent, WebhookDelivery
from jobtracking.services.batch_completion import batch_events_write
from jobtracking.services.retention import jobs_purge, uploads_sweep
from tests.factories import BatchFactory, ExtractionJobFactory, WebhookSubscriptionFactory

pytestmark = pytest.mark.django_db
TWO_HOURS = 2 * 3600


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def stored(media, name: str, age_seconds: float) -> str:
    path = media / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"%PDF-1.7")
    then = time.time() - age_seconds
    os.utime(path, (then, then))
    return name


@pytest.fixture
def uploads(media):
    """An old file a job references, an old orphan, and a young orphan (a creation in flight)."""
    referenced = stored(media, "uploads/2026/01/02/kept.pdf", TWO_HOURS)
    ExtractionJobFactory(source_url="", upload=referenced)
    return {
        "referenced": referenced,
        "orphan": stored(media, "uploads/2026/01/02/orphan.pdf", TWO_HOURS),
        "young": stored(media, "uploads/2026/01/03/young.pdf", 60),
    }


def test_uploads_sweep_deletes_only_old_unreferenced_files(media, uploads):
    assert uploads_sweep() == [uploads["orphan"]]
    assert not (media / uploads["orphan"]).exists()
    assert (media / uploads["referenced"]).exists() and (media / uploads["young"]).exists()
    assert uploads_sweep() == []


def test_uploads_sweep_without_an_uploads_folder_does_nothing(media):
    assert uploads_sweep() == []


def test_sweep_uploads_command_dry_run_deletes_nothing(media, uploads):
    out = io.StringIO()
    call_command("sweep_uploads", "--dry-run", stdout=out)
    assert f"Would delete {uploads['orphan']}" in out.getvalue()
    assert "Would delete 1 unreferenced upload file(s)." in out.getvalue()
    assert (media / uploads["orphan"]).exists()


def test_sweep_uploads_command_reports_what_it_deleted(media, uploads):
    out = io.StringIO()
    call_command("sweep_uploads", stdout=out)
    assert out.getvalue().splitlines() == [
        f"Deleted {uploads['orphan']}",
        "Deleted 1 unreferenced upload file(s).",
    ]
    assert not (media / uploads["orphan"]).exists()


def test_setup_schedules_sweeps_uploads_daily():
    call_command("setup_schedules", stdout=io.StringIO())
    schedule = Schedule.objects.get(func="jobtracking.services.retention.uploads_sweep")
    assert (schedule.schedule_type, schedule.minutes) == (Schedule.MINUTES, 60 * 24)


def test_a_batch_is_purged_with_its_last_job_and_not_before(settings):
    settings.JOBS_RETENTION_DAYS = {"succeeded": 1}
    old = timezone.now() - timedelta(days=2)
    batch = BatchFactory(closed=True)
    WebhookSubscriptionFactory(created_by=batch.requested_by)
    batch_events_write([batch], "batch.created")
    first = ExtractionJobFactory(batch=batch, succeeded=True, completed_at=old)
    last = ExtractionJobFactory(batch=batch, succeeded=True, completed_at=timezone.now())
    assert jobs_purge(ids=[first.pk]) == 1
    assert Batch.objects.filter(pk=batch.pk).exists()
    last.completed_at = old
    last.save()
    assert jobs_purge(ids=[last.pk]) == 1
    assert not Batch.objects.filter(pk=batch.pk).exists()
    assert not JobEvent.objects.filter(batch_id=batch.pk).exists()
    assert not WebhookDelivery.objects.exists()
