"""django-q2 tasks. Each takes a job id, calls the extractor outside any transaction, and records
the outcome through the services. Redelivery is harmless: a task that finds its claim taken or
its job moved on logs and returns. Retries are ours (job counters and due_at), never the broker's.
"""

import logging
import socket
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from extraction.clients.base import (
    ExtractionOutput,
    ExtractorClient,
    PollResult,
    RemoteStatus,
    SubmitRequest,
)
from extraction.errors import (
    ErrorCode,
    ExtractorError,
    PermanentExtractorError,
    TransientExtractorError,
)
from extraction.registry import get_client
from jobtracking import states
from jobtracking.errors import InFlightLimitError, JobMovedOnError
from jobtracking.logs import job_log_context, log_context
from jobtracking.models import ExtractionJob, ServiceHeartbeat
from jobtracking.retention import jobs_purge, purgeable_jobs
from jobtracking.schedule import next_delay
from jobtracking.services import (
    job_consume_claim,
    job_defer,
    job_fail,
    job_hand_back_expired_lease,
    job_mark_cancelled_by_extractor,
    job_mark_processing,
    job_mark_submitted,
    job_mark_succeeded,
    job_record_poll,
    job_record_poll_error,
    job_retry_submission,
    job_take_lease,
    job_time_out,
)
from jobtracking.webhooks import deliver

logger = logging.getLogger(__name__)


def process_job(job_id: str) -> None:
    """Do whatever the job needs next: submit it, resubmit after an expired lease, poll it, or
    time it out. Runs only for the copy of the task that wins the job's claim."""
    if not job_consume_claim(job_id=job_id):
        logger.info("job %s: claim already taken, nothing to do", job_id)
        return
    job = ExtractionJob.objects.select_related("extractor").filter(pk=job_id).first()
    if job is None or job.is_terminal:
        return
    with job_log_context(job, job.status_id):
        _process(job)


def _process(job: ExtractionJob) -> None:
    if job.deadline_at and job.deadline_at <= timezone.now():
        _ignore_moved_on(job_time_out, job_id=job.pk)
        return
    if job.status_id == states.SUBMITTING:
        if job.lease_expires_at and job.lease_expires_at > timezone.now():
            return  # another worker holds a live lease; its due_at brings the job back if it dies
        job = _ignore_moved_on(job_hand_back_expired_lease, job_id=job.pk)
        if job is None:
            return
    if job.status_id == states.PENDING:
        submit(job)
    else:
        poll(job)


def _ignore_moved_on(service, **kwargs):
    try:
        return service(**kwargs)
    except JobMovedOnError as error:
        logger.info("%s: %s", service.__name__, error.message)
        return None


def _submit_request(job: ExtractionJob) -> SubmitRequest:
    content = None
    if not job.source_url:
        with job.upload.open("rb") as upload:
            content = upload.read()
    return SubmitRequest(
        file_name=job.file_name,
        content_type=job.content_type,
        source_url=job.source_url,
        content=content,
        options=job.options,
        # The same key for every try of one attempt: an extractor that honours keys returns the
        # same external job after a lost lease instead of extracting the file twice.
        idempotency_key=f"{job.pk}:{job.attempt}",
    )


def submit(job: ExtractionJob) -> None:
    """Take the lease, send the file, and record the outcome."""
    try:
        job = job_take_lease(job_id=job.pk)
    except JobMovedOnError:
        return
    except InFlightLimitError:
        job_defer(
            job_id=job.pk,
            status=states.PENDING,
            delay=timedelta(seconds=settings.JOBS_IN_FLIGHT_RETRY_SECONDS),
        )
        return
    token = job.submit_attempts
    extractor = job.extractor
    try:
        request = _submit_request(job)
    except OSError as error:
        _ignore_moved_on(
            job_fail,
            job_id=job.pk,
            expected_from={states.SUBMITTING},
            code=ErrorCode.SOURCE_UNAVAILABLE,
            message=f"Cannot read the uploaded file: {type(error).__name__}",
            lease_token=token,
        )
        return
    client = get_client(extractor)
    try:
        submission = client.submit(request)
    except TransientExtractorError as error:
        logger.warning("submission failed, will retry: %s", error.message)
        delay = next_delay(
            token - 1,
            initial=extractor.poll_initial_interval,
            cap=extractor.poll_max_interval,
            retry_after=error.retry_after,
        )
        _ignore_moved_on(
            job_retry_submission,
            job_id=job.pk,
            lease_token=token,
            max_attempts=extractor.max_submit_attempts,
            error=error.message,
            http_status=error.http_status,
            delay=delay,
        )
        return
    except PermanentExtractorError as error:
        _fail(job, error, expected_from={states.SUBMITTING}, lease_token=token)
        return
    first_poll_in = next_delay(
        0,
        initial=extractor.poll_initial_interval,
        cap=extractor.poll_max_interval,
        retry_after=submission.retry_after,
    )
    logger.info("submitted as %s (request %s)", submission.external_id, submission.request_id)
    try:
        job_mark_submitted(
            job_id=job.pk,
            lease_token=token,
            external_job_id=submission.external_id,
            external_url=submission.poll_url,
            request_id=submission.request_id,
            first_poll_in=first_poll_in,
            remote_ttl=client.result_ttl,
        )
    except JobMovedOnError as error:
        # Cancelled (or taken over) while we were submitting: drop the extractor's copy.
        logger.info("job %s moved on during submission (%s)", job.pk, error.message)
        if ExtractionJob.objects.filter(pk=job.pk, status__in=states.TERMINAL).exists():
            _cancel_quietly(client, submission.poll_url, job.pk)


def poll(job: ExtractionJob) -> None:
    """Ask the extractor how the job is doing and record the answer."""
    extractor = job.extractor
    client = get_client(extractor)
    try:
        result = client.poll(job.external_url)
        output = _output_if_done(client, job, result)
    except TransientExtractorError as error:
        logger.warning("poll failed, will retry: %s", error.message)
        job_record_poll_error(
            job=job,
            error=error.message,
            http_status=error.http_status,
            next_poll_in=next_delay(
                job.poll_error_count + 1,
                initial=extractor.poll_initial_interval,
                cap=extractor.poll_max_interval,
                retry_after=error.retry_after,
            ),
        )
        return
    except PermanentExtractorError as error:
        _fail(job, error, expected_from={job.status_id})
        return

    logger.info("polled: %s (progress %s)", result.raw_status, result.progress)
    next_poll_in = next_delay(
        job.poll_count + 1,
        initial=extractor.poll_initial_interval,
        cap=extractor.poll_max_interval,
        retry_after=result.retry_after,
    )
    outcome = result.status
    if outcome is RemoteStatus.SUCCEEDED:
        _ignore_moved_on(
            job_mark_succeeded,
            job_id=job.pk,
            raw_status=result.raw_status,
            payload=output.payload,
            page_count=output.page_count,
            model_version=output.model_version,
        )
    elif outcome is RemoteStatus.FAILED:
        remote = ": ".join(part for part in (result.error_code, result.error_message) if part)
        _ignore_moved_on(
            job_fail,
            job_id=job.pk,
            expected_from={job.status_id},
            code=ErrorCode.EXTRACTION_FAILED,
            message=remote or f"The extractor reported {result.raw_status}",
            details={"external_status": result.raw_status, "remote_code": result.error_code},
        )
    elif outcome is RemoteStatus.CANCELED:
        _ignore_moved_on(
            job_mark_cancelled_by_extractor,
            job_id=job.pk,
            expected_from={job.status_id},
            raw_status=result.raw_status,
        )
    elif outcome is RemoteStatus.RUNNING and job.status_id == states.SUBMITTED:
        _ignore_moved_on(
            job_mark_processing,
            job_id=job.pk,
            raw_status=result.raw_status,
            progress=result.progress,
            next_poll_in=next_poll_in,
        )
    else:
        job_record_poll(
            job=job,
            raw_status=result.raw_status,
            progress=result.progress,
            next_poll_in=next_poll_in,
        )


def _output_if_done(
    client: ExtractorClient, job: ExtractionJob, result: PollResult
) -> ExtractionOutput | None:
    if result.status is not RemoteStatus.SUCCEEDED:
        return None
    return result.output or client.fetch_result(job.external_url)


def _fail(
    job: ExtractionJob,
    error: PermanentExtractorError,
    *,
    expected_from: set[str],
    lease_token: int | None = None,
) -> None:
    _ignore_moved_on(
        job_fail,
        job_id=job.pk,
        expected_from=expected_from,
        code=error.code,
        message=error.message,
        details={"http_status": error.http_status, "remote_code": error.remote_code},
        lease_token=lease_token,
    )


def _cancel_quietly(client: ExtractorClient, poll_url: str, job_id) -> None:
    try:
        client.cancel(poll_url)
    except ExtractorError as error:
        logger.warning("job %s: cancel at the extractor failed: %s", job_id, error.message)


def cancel_at_extractor(job_id: str) -> None:
    """Best effort: ask the extractor to drop a job we cancelled or timed out."""
    job = ExtractionJob.objects.select_related("extractor").filter(pk=job_id).first()
    if job is None or not job.external_url or not job.is_terminal:
        return
    with job_log_context(job, "cancel_at_extractor"):
        _cancel_quietly(get_client(job.extractor), job.external_url, job.pk)


def reap_stuck_jobs() -> dict[str, int]:
    """Safety net (a django-q2 schedule and `manage.py reap_stuck_jobs`): time out overdue jobs,
    hand back jobs whose submission lease expired (their worker died), and make every active job
    without a due_at due now. The dispatcher then acts on them."""
    now = timezone.now()
    active = ExtractionJob.objects.filter(status__in=states.ACTIVE)
    overdue = list(active.filter(deadline_at__lte=now).values_list("pk", flat=True))
    timed_out = sum(_ignore_moved_on(job_time_out, job_id=pk) is not None for pk in overdue)
    expired = list(
        active.filter(status=states.SUBMITTING, lease_expires_at__lte=now).values_list(
            "pk", flat=True
        )
    )
    handed_back = sum(
        _ignore_moved_on(job_hand_back_expired_lease, job_id=pk) is not None for pk in expired
    )
    repaired = active.filter(due_at__isnull=True).update(due_at=now)
    return {"timed_out": timed_out, "handed_back": handed_back, "repaired": repaired}


def deliver_webhook(delivery_id: int) -> None:
    """One attempt at one webhook delivery; the outcome schedules the next one."""
    with log_context(event="webhook_delivery"):
        logger.info("webhook delivery %s: %s", delivery_id, deliver(delivery_id))


def purge_expired_jobs() -> int:
    """Scheduled daily: delete jobs past retention, a batch at a time."""
    purged = 0
    while ids := list(purgeable_jobs().order_by("pk").values_list("pk", flat=True)[:1000]):
        purged += jobs_purge(ids=ids)
    return purged


def beat(kind: str, name: str | None = None, **details) -> None:
    """Record that a long-running process is alive (read by /readyz)."""
    ServiceHeartbeat.objects.update_or_create(
        name=name or f"{kind}@{socket.gethostname()}",
        defaults={"kind": kind, "beat_at": timezone.now(), "details": details},
    )


def cluster_heartbeat() -> None:
    """Scheduled every minute: proves the django-q2 cluster runs tasks."""
    beat("cluster")
