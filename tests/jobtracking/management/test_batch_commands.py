"""requeue_jobs --batch and cancel_jobs --batch: the selection narrowed to one batch's jobs."""

import io
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from jobtracking.models import Batch, ExtractionJob, JobStatusChange
from tests.factories import BatchFactory, ExtractionJobFactory, ExtractorFactory

pytestmark = pytest.mark.django_db


def run(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def two_batches():
    """A closed, completed batch with a job of each kind, the same kinds in another batch, and
    outside any batch."""
    sandbox, azure = ExtractorFactory(slug="sandbox"), ExtractorFactory(slug="azure")
    ours = BatchFactory(closed=True, completed_at=timezone.now())
    theirs = BatchFactory(closed=True)
    jobs = {}
    for owner, batch in (("ours", ours), ("theirs", theirs), ("none", None)):
        jobs[f"{owner}_failed_sandbox"] = ExtractionJobFactory(
            batch=batch, extractor=sandbox, failed=True
        )
        jobs[f"{owner}_failed_azure"] = ExtractionJobFactory(
            batch=batch, extractor=azure, failed=True
        )
        jobs[f"{owner}_succeeded"] = ExtractionJobFactory(
            batch=batch, extractor=sandbox, succeeded=True
        )
        jobs[f"{owner}_processing"] = ExtractionJobFactory(
            batch=batch, extractor=sandbox, processing=True
        )
    return ours, jobs


def moved(jobs: dict, to: str) -> set[str]:
    """The names of the jobs that moved to status `to` since they were made."""
    now = dict(ExtractionJob.objects.values_list("pk", "status_id"))
    return {name for name, job in jobs.items() if job.status_id != to == now[job.pk]}


def test_requeue_jobs_batch_requeues_only_that_batchs_jobs(two_batches):
    batch, jobs = two_batches
    out = run("requeue_jobs", "--batch", str(batch.pk), "--reason", "vendor fixed")
    assert moved(jobs, "pending") == {"ours_failed_sandbox", "ours_failed_azure"}
    assert "2 changed, 2 skipped (1 processing is still active; 1 succeeded needs --force)" in out
    assert set(
        JobStatusChange.objects.filter(to_status="pending").values_list("reason", "actor_type")
    ) == {("vendor fixed", "command")}
    # Its jobs run again: the batch is no longer completed, and will complete again.
    assert Batch.objects.get(pk=batch.pk).completed_at is None


def test_requeue_jobs_batch_combines_with_the_other_filters(two_batches):
    batch, jobs = two_batches
    run("requeue_jobs", "--batch", str(batch.pk), "--extractor", "azure", "--status", "failed")
    assert moved(jobs, "pending") == {"ours_failed_azure"}


def test_requeue_jobs_batch_dry_run_counts_and_changes_nothing(two_batches):
    batch, jobs = two_batches
    out = run("requeue_jobs", "--batch", str(batch.pk), "--force", "--dry-run")
    assert "Dry run: 3 job(s) would be requeued." in out
    assert "Would be 1 skipped (1 processing is still active)." in out
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert listed == {
        str(jobs[f"ours_{name}"].pk) for name in ("failed_sandbox", "failed_azure", "succeeded")
    }
    assert not moved(jobs, "pending")
    assert not JobStatusChange.objects.exists()


def test_cancel_jobs_batch_cancels_only_that_batchs_active_jobs(two_batches):
    batch, jobs = two_batches
    out = run("cancel_jobs", "--batch", str(batch.pk), "--reason", "request withdrawn")
    assert moved(jobs, "cancelled") == {"ours_processing"}
    assert "1 changed, 3 skipped (2 failed has already ended; 1 succeeded has already ended)" in out
    assert JobStatusChange.objects.get(to_status="cancelled").reason == "request withdrawn"


@pytest.mark.parametrize("command", ["requeue_jobs", "cancel_jobs"])
def test_bulk_commands_refuse_an_unknown_or_malformed_batch(two_batches, command):
    unknown = uuid.uuid4()
    with pytest.raises(CommandError, match=f"No batch {unknown}"):
        run(command, "--batch", str(unknown))
    with pytest.raises(CommandError, match="--batch is not a batch id: 'R-17'"):
        run(command, "--batch", "R-17", "--dry-run")
    assert not JobStatusChange.objects.exists()
