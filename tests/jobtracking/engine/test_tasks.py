"""The job engine's tasks against the real sandbox extractor, one step at a time."""

import hashlib
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.utils import timezone

from extraction.registry import get_client
from jobtracking import states
from jobtracking.engine.tasks import _submit_request, process_job, process_jobs, reap_stuck_jobs
from jobtracking.models import ExtractionJob, ExtractionResult, JobEvent, JobStatusChange
from jobtracking.services import Actor, NewJob, job_cancel, job_create
from jobtracking.services.engine import jobs_start
from tests.factories import ExtractionJobFactory

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).resolve().parents[3] / "extraction" / "sandbox" / "samples"


def new_job(extractor, name="budget.csv", **kwargs) -> ExtractionJob:
    new = NewJob(
        extractor=extractor,
        file_id=kwargs.pop("file_id", name),
        file_name=name,
        upload=ContentFile((SAMPLES / name).read_bytes(), name=name),
        **kwargs,
    )
    return job_create(new, actor=Actor("api"))


def step(job: ExtractionJob) -> ExtractionJob:
    """Act as the dispatcher would once the job is due: wait for due_at, claim, run the task."""
    job.refresh_from_db()
    if job.due_at and job.due_at > timezone.now() and job.claimed_at is None:
        time.sleep((job.due_at - timezone.now()).total_seconds())
    ExtractionJob.objects.filter(pk=job.pk).update(claimed_at=timezone.now())
    process_job(str(job.pk))
    job.refresh_from_db()
    return job


def run_to_end(job: ExtractionJob, max_steps: int = 60) -> ExtractionJob:
    for _ in range(max_steps):
        job = step(job)
        if job.is_terminal:
            return job
    raise AssertionError(f"job still {job.status_id} after {max_steps} steps")


def history(job) -> list[tuple[str | None, str]]:
    return list(JobStatusChange.objects.filter(job=job).values_list("from_status", "to_status"))


@pytest.mark.parametrize(
    ("name", "pages", "text"),
    [
        ("financial-statement.pdf", 3, "Total revenue: 1,234,500"),
        ("grant-report.txt", 2, "Volunteer hours: 3,215"),
        ("budget.csv", 1, "Total budget: 652475"),
    ],
)
def test_process_job_takes_each_sample_to_succeeded_with_its_text(
    sandbox, sandbox_extractor, name, pages, text
):
    sandbox.configure(latency_min=0.3, latency_max=0.3)
    job = run_to_end(new_job(sandbox_extractor, name))

    assert job.status_id == states.SUCCEEDED
    assert (job.progress, job.external_status, job.error_code) == (100, "succeeded", "")
    assert job.external_job_id and job.external_url.endswith(job.external_job_id)
    result = ExtractionResult.objects.get(job=job, attempt=1)
    assert result.page_count == pages
    assert text in " ".join(page["text"] for page in result.payload["pages"])
    assert len(result.content_sha256) == 64 and result.size_bytes > 0
    assert history(job)[:3] == [
        (None, "pending"),
        ("pending", "submitting"),
        ("submitting", "submitted"),
    ]
    assert history(job)[-1][1] == "succeeded"
    events = list(JobEvent.objects.filter(job=job).values_list("type", flat=True))
    assert events[:2] == ["job.created", "job.submitted"] and events[-1] == "job.succeeded"
    assert sandbox.stats()["created_by_key"] == {f"{job.pk}:1": 1}


def test_a_url_job_records_the_document_the_extractor_fetched(
    sandbox, sandbox_extractor, httpserver, settings
):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    content = (SAMPLES / "budget.csv").read_bytes()
    httpserver.expect_request("/files/budget.csv").respond_with_data(
        content, content_type="text/csv; charset=utf-8"
    )
    new = NewJob(
        extractor=sandbox_extractor,
        file_id="url-budget",
        source_url=httpserver.url_for("/files/budget.csv"),
    )
    job = job_create(new, actor=Actor("api"))
    assert (job.content_type, job.file_size, job.file_sha256) == ("", None, "")

    job = run_to_end(job)

    assert job.status_id == states.SUCCEEDED
    digest = hashlib.sha256(content).hexdigest()
    assert (job.content_type, job.file_size, job.file_sha256) == ("text/csv", len(content), digest)
    assert len(httpserver.log) == 1  # fetched by the extractor, not by the service as well
    assert job.file_facts_origin == "extractor"


def test_process_job_polls_no_sooner_than_retry_after(sandbox, sandbox_extractor):
    sandbox.configure(latency_min=1.2, latency_max=1.2, poll_retry_after=0.5)
    job = step(new_job(sandbox_extractor))
    job = step(job)  # first poll
    assert job.due_at >= timezone.now() + timedelta(seconds=0.3)
    job = run_to_end(job)
    assert job.status_id == states.SUCCEEDED
    stats = sandbox.stats()
    assert stats["early_polls"] == []
    assert len(stats["polls"][job.external_job_id]) >= 2


def test_transient_submit_fault_retries_later_then_fails_past_the_budget(
    sandbox, sandbox_extractor
):
    sandbox.configure(transient_rate=1.0)
    sandbox_extractor.max_submit_attempts = 3
    sandbox_extractor.save()
    job = step(new_job(sandbox_extractor))
    assert (job.status_id, job.submit_attempts) == ("pending", 1)
    assert job.due_at > timezone.now() and job.lease_expires_at is None
    job = run_to_end(job)
    assert (job.status_id, job.error_code, job.submit_attempts) == (
        "failed",
        "extractor_unavailable",
        3,
    )
    assert history(job).count(("submitting", "pending")) == 2


def test_throttled_submission_waits_for_retry_after(sandbox, sandbox_extractor):
    sandbox.configure(throttle_rate=1.0, throttle_retry_after=3)
    job = step(new_job(sandbox_extractor))
    assert job.status_id == "pending"
    assert job.due_at >= timezone.now() + timedelta(seconds=2.5)
    change = JobStatusChange.objects.filter(job=job).last()
    assert change.details["http_status"] == 429


def test_transient_poll_faults_recover_and_reset_the_error_count(sandbox, sandbox_extractor):
    sandbox.configure(latency_min=0.5, latency_max=0.5)
    job = step(new_job(sandbox_extractor))
    sandbox.configure(transient_rate=1.0)
    job = step(step(job))
    assert (job.status_id, job.poll_error_count) == ("submitted", 2)
    sandbox.configure(transient_rate=0.0)
    job = run_to_end(job)
    assert (job.status_id, job.poll_error_count) == ("succeeded", 0)


def test_poll_errors_past_the_budget_fail_the_job(sandbox, sandbox_extractor):
    sandbox_extractor.max_poll_errors = 2
    sandbox_extractor.save()
    sandbox.configure(latency_min=5, latency_max=5)
    job = step(new_job(sandbox_extractor))
    sandbox.configure(transient_rate=1.0)
    job = run_to_end(job)
    assert (job.status_id, job.error_code) == ("failed", "extractor_unavailable")


def test_permanent_extraction_failure_keeps_the_extractors_code(sandbox, sandbox_extractor):
    sandbox.configure(permanent_failure_rate=1.0)
    job = run_to_end(new_job(sandbox_extractor))
    assert (job.status_id, job.error_code) == ("failed", "extraction_failed")
    assert job.error_message.startswith("extraction_failed:")
    assert JobEvent.objects.filter(job=job, type="job.failed").exists()


def test_lost_external_job_fails_the_job(sandbox, sandbox_extractor):
    sandbox.configure(lost_rate=1.0)
    job = run_to_end(new_job(sandbox_extractor))
    assert (job.status_id, job.error_code) == ("failed", "external_job_lost")


def test_unsupported_file_is_rejected_by_extractor(sandbox, sandbox_extractor):
    job = job_create(
        NewJob(
            extractor=sandbox_extractor,
            file_id="bin",
            file_name="photo.bin",
            upload=ContentFile(bytes(range(256)) * 8, name="photo.bin"),
        ),
        actor=Actor("api"),
    )
    job = run_to_end(job)
    assert (job.status_id, job.error_code) == ("failed", "rejected_by_extractor")


def test_wrong_api_key_fails_with_extractor_auth(sandbox, sandbox_extractor, monkeypatch):
    sandbox.configure(api_key="the-right-key")
    monkeypatch.setenv(sandbox_extractor.api_key_env, "a-wrong-key")
    job = run_to_end(new_job(sandbox_extractor))
    assert (job.status_id, job.error_code) == ("failed", "extractor_auth")
    assert "a-wrong-key" not in job.error_message


def test_missing_upload_fails_with_source_unavailable(sandbox_extractor):
    job = ExtractionJobFactory(
        extractor=sandbox_extractor,
        source_url="",
        upload="uploads/gone.pdf",
        claimed_at=timezone.now(),
    )
    job = step(job)
    assert (job.status_id, job.error_code) == ("failed", "source_unavailable")


def test_deadline_times_out_and_cancels_at_the_extractor(
    sandbox, sandbox_extractor, django_capture_on_commit_callbacks
):
    sandbox.configure(latency_min=30, latency_max=30)
    job = step(new_job(sandbox_extractor))
    ExtractionJob.objects.filter(pk=job.pk).update(deadline_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        job = step(job)
    assert (job.status_id, job.error_code) == ("timed_out", "deadline_exceeded")
    assert sandbox.stats()["requests"]["DELETE"] == 1


def test_cancel_of_a_submitted_job_cancels_it_at_the_extractor(
    sandbox, sandbox_extractor, django_capture_on_commit_callbacks
):
    sandbox.configure(latency_min=30, latency_max=30)
    job = step(new_job(sandbox_extractor))
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, actor=Actor("api"), reason="no longer needed")
    remote = get_client(sandbox_extractor).poll(job.external_url)
    assert remote.raw_status == "canceled"


def test_a_duplicate_task_for_one_claim_does_nothing(sandbox, sandbox_extractor):
    job = new_job(sandbox_extractor)
    ExtractionJob.objects.filter(pk=job.pk).update(claimed_at=timezone.now())
    process_job(str(job.pk))
    process_job(str(job.pk))  # redelivered copy
    job.refresh_from_db()
    assert job.status_id == "submitted"
    assert sandbox.stats()["posts_by_key"] == {f"{job.pk}:1": 1}


def test_an_expired_lease_is_handed_back_and_resubmitted_with_the_same_key(
    sandbox, sandbox_extractor
):
    job = new_job(sandbox_extractor)
    # A worker took the lease, submitted, and died before recording the answer.
    ExtractionJob.objects.filter(pk=job.pk).update(claimed_at=timezone.now())
    (leased,) = jobs_start(job_ids=[job.pk]).submits
    get_client(sandbox_extractor).submit(_submit_request(leased.job))
    ExtractionJob.objects.filter(pk=job.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1), due_at=timezone.now()
    )
    job = run_to_end(job)
    assert job.status_id == "succeeded"
    stats = sandbox.stats()
    assert stats["posts_by_key"] == {f"{job.pk}:1": 2}
    assert stats["created_by_key"] == {f"{job.pk}:1": 1}
    handback = JobStatusChange.objects.get(job=job, from_status="submitting", to_status="pending")
    assert handback.details["resubmission"] is True


def test_a_live_lease_is_left_alone(sandbox_extractor):
    job = ExtractionJobFactory(
        extractor=sandbox_extractor, submitting=True, claimed_at=timezone.now()
    )
    job = step(job)
    assert job.status_id == "submitting"
    assert JobStatusChange.objects.filter(job=job).count() == 0


def test_max_in_flight_defers_submission(sandbox, sandbox_extractor):
    sandbox_extractor.max_in_flight = 1
    sandbox_extractor.save()
    ExtractionJobFactory(extractor=sandbox_extractor, processing=True)
    job = step(new_job(sandbox_extractor))
    assert (job.status_id, job.submit_attempts) == ("pending", 0)
    assert job.due_at > timezone.now()
    assert sandbox.stats()["posts_by_key"] == {}


def test_large_results_are_stored_as_files(sandbox, sandbox_extractor, settings, tmp_path):
    settings.JOBS_RESULT_INLINE_MAX_BYTES = 100
    settings.MEDIA_ROOT = tmp_path
    job = run_to_end(new_job(sandbox_extractor, "financial-statement.pdf"))
    result = ExtractionResult.objects.get(job=job)
    assert result.payload is None
    with result.payload_file.open("rb") as stored:
        data = stored.read()
    assert len(data) == result.size_bytes
    assert hashlib.sha256(data).hexdigest() == result.content_sha256


def test_reap_times_out_overdue_jobs_hands_back_leases_and_repairs_missing_due_times():
    overdue = ExtractionJobFactory(
        processing=True, deadline_at=timezone.now() - timedelta(seconds=1)
    )
    undue = ExtractionJobFactory(submitted=True, due_at=None)
    orphan = ExtractionJobFactory(
        submitting=True, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    live = ExtractionJobFactory(submitting=True)
    outcome = reap_stuck_jobs()
    for job in (overdue, undue, orphan, live):
        job.refresh_from_db()
    assert outcome == {"timed_out": 1, "handed_back": 1, "repaired": 1, "batches_completed": 0}
    assert (overdue.status_id, overdue.error_code) == ("timed_out", "deadline_exceeded")
    assert undue.due_at is not None and undue.status_id == "submitted"
    assert (orphan.status_id, live.status_id) == ("pending", "submitting")
    assert JobStatusChange.objects.get(job=orphan).details["resubmission"] is True


def test_a_full_batch_of_calls_reuses_its_connections(sandbox, sandbox_extractor, caplog, settings):
    """Every call of a batch goes at once; the session keeps a connection for each, so none is
    discarded ("Connection pool is full") and reopened."""
    # Slow answers: every call of the batch is in flight at once.
    sandbox.configure(latency_min=5, latency_max=5, slow_rate=1.0, slow_seconds=0.5)
    jobs = [
        new_job(sandbox_extractor, file_id=f"pool-{n}")
        for n in range(settings.JOBS_TASK_BATCH_SIZE)
    ]
    ids = [job.pk for job in jobs]
    for _ in range(2):  # submissions, then polls
        ExtractionJob.objects.filter(pk__in=ids).update(
            claimed_at=timezone.now(), due_at=timezone.now()
        )
        process_jobs([str(pk) for pk in ids])
    assert set(ExtractionJob.objects.filter(pk__in=ids).values_list("poll_count", flat=True)) == {1}
    assert "Connection pool is full" not in caplog.text
