"""django-q2 tasks. The engine's task takes a batch of job ids (the dispatcher groups due jobs by
extractor), makes their extractor calls concurrently outside any transaction, and records the
outcomes through the services: one transaction before the calls, one after. Redelivery is
harmless: a copy of a task that finds its claims taken does nothing, and a job that moved on
meanwhile is dropped from its batch. Retries are ours (job counters and due_at), never the
broker's.
"""

import dataclasses
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from extraction.clients.base import (
    ExtractionOutput,
    ExtractorClient,
    PollResult,
    RemoteStatus,
    Submission,
    SubmitRequest,
    client_text,
)
from extraction.errors import (
    ErrorCode,
    ExtractorError,
    PermanentExtractorError,
    SourceError,
    TransientExtractorError,
)
from extraction.registry import billable_pages, get_client
from extraction.sources import checked_source, fetch_source
from jobtracking import states
from jobtracking.engine.schedule import next_delay
from jobtracking.errors import JobMovedOnError
from jobtracking.infra import tracing
from jobtracking.infra.compute_slots import compute_slot
from jobtracking.infra.logs import job_log_context
from jobtracking.infra.storable import TooDeepError, safe_text, text_problem
from jobtracking.models import ExtractionJob, ExtractorHealth
from jobtracking.services import Move, job_hand_back_expired_lease, job_time_out
from jobtracking.services.archive import ArchiveRun
from jobtracking.services.audit_checkpoints import audit_checkpoint_create
from jobtracking.services.batch_completion import batches_complete_due
from jobtracking.services.circuits import Tally, circuits_report
from jobtracking.services.engine import (
    CONNECTION_ERRORS,
    Planned,
    Result,
    StartedBatch,
    defer_move,
    fail_move,
    jobs_record,
    jobs_start,
    poll_error_move,
    poll_move,
    reserve_fetch_slots,
    submit_hold_move,
    submit_retry_move,
    submitted_move,
    succeeded_move,
)
from jobtracking.services.extractor_health import extractor_release
from jobtracking.services.housekeeping import heartbeat_record, jobs_due_repair
from jobtracking.services.retention import jobs_purge, purgeable_jobs

logger = logging.getLogger(__name__)


@dataclass
class Call:
    """One extractor call's outcome: its value, or the error it raised."""

    value: Any = None
    error: ExtractorError | OSError | None = None


def _call_at(at: datetime, action: Callable[[], Any], job: ExtractionJob, step: str) -> Call:
    """Wait for the call's rate slot, then make it, as the span of this step of the job's
    life (its HTTP call carries the span's traceparent). Whatever goes wrong in it is this
    call's outcome, never its batch's: an exception we did not expect is an answer we cannot
    use."""
    wait = (at - timezone.now()).total_seconds()
    if wait > 0:
        time.sleep(wait)
    with tracing.job_span(job, step) as span:
        call = _call(action)
        if span.is_recording():
            tracing.record_outcome(span, *_outcome(call))
    return call


def _call(action: Callable[[], Any]) -> Call:
    try:
        return Call(value=_storable_answer(action()))
    except ExtractorError as error:
        return Call(error=_storable_error(error))
    except OSError as error:
        return Call(error=error)
    except Exception as error:
        logger.exception("extractor call failed unexpectedly")
        return Call(error=_invalid_answer(f"{type(error).__name__} while reading its answer"))


def _outcome(call: Call) -> tuple[str, str]:
    """A call's outcome for its span: the extractor's answer, and the error code it gives the
    job, if any."""
    error, value = call.error, call.value
    if isinstance(error, PermanentExtractorError):
        return "failed", error.code
    if isinstance(error, TransientExtractorError):
        return "transient_error", ""
    if isinstance(error, OSError):
        return "failed", ErrorCode.SOURCE_UNAVAILABLE
    if isinstance(value, PollResult):
        failed = value.status is RemoteStatus.FAILED
        return str(value.status), ErrorCode.EXTRACTION_FAILED if failed else ""
    return "accepted" if isinstance(value, Submission) else "ok", ""


def _invalid_answer(why: str) -> PermanentExtractorError:
    return PermanentExtractorError(
        f"The extractor's answer cannot be used: {why}", code=ErrorCode.INVALID_EXTRACTOR_ANSWER
    )


def _storable_answer(value: Any) -> Any:
    """An extractor's answer as it may be recorded (`jobtracking.infra.storable`): what we act on
    again (its job id, its poll location, its status word) must be storable as sent, else the
    answer is this job's failure (`invalid_extractor_answer`); its free text is made safe. A
    result is made safe with its output (`Result.from_output`)."""
    if isinstance(value, Submission):
        if text_problem(value.external_id + value.poll_url):
            raise _invalid_answer("its job id or location holds characters we cannot store")
        for field, given in (
            ("external_job_id", value.external_id),
            ("external_url", value.poll_url),
        ):
            if len(given) > (longest := ExtractionJob._meta.get_field(field).max_length):
                raise _invalid_answer(f"its {field} is longer than {longest} characters")
        return dataclasses.replace(value, request_id=safe_text(value.request_id))
    if isinstance(value, PollResult):
        if text_problem(value.raw_status):
            raise _invalid_answer("its status word holds characters we cannot store")
        return dataclasses.replace(
            value,
            error_code=safe_text(value.error_code),
            error_message=safe_text(value.error_message),
            request_id=safe_text(value.request_id),
        )
    return value


def _storable_error(error: ExtractorError) -> ExtractorError:
    error.message = safe_text(error.message)
    if isinstance(error, PermanentExtractorError):
        error.remote_code = safe_text(error.remote_code)
    return error


def process_jobs(job_ids: list[str]) -> None:
    """Do whatever each job of the batch needs next: submit it (again, after an expired lease),
    poll it (and fetch its result), or time it out. Acts only on the jobs whose claim this copy
    of the task wins.

    Traced as a span of its own trace, linked to each job's trace (jobs of many clients' requests
    share a batch: no one of them is its parent); each job's steps are spans of the job's trace.
    The batch's SQL statements make no span (they were most of a batch's spans): the task's span
    says how long its transactions and its calls took."""
    with (
        tracing.span("jobs.process", attributes={"jobs.count": len(job_ids)}) as span,
        tracing.untraced(),
    ):
        _process_jobs(job_ids, span)


def _process_jobs(job_ids: list[str], span) -> None:
    clock = time.perf_counter()
    # The transactions hold the machine's compute slots; the extractor calls never do.
    with compute_slot():
        started = _start(job_ids)
    planned = started.submits + started.polls
    tracing.link_jobs(p.job for p in planned)
    if not planned:
        # Claims taken by another copy, or every job timed out, deferred or left to its lease.
        logger.info("batch of %d: no extractor call to make", len(job_ids))
        return
    timings = [time.perf_counter() - clock]
    moves, results = [], {}
    pool = _call_pool()
    submits = [
        pool.submit(_call_at, p.at, lambda job=p.job: _submit(job), p.job, "submit")
        for p in started.submits
    ]
    polls = [
        pool.submit(_call_at, p.at, lambda job=p.job: _poll(job), p.job, "poll")
        for p in started.polls
    ]
    submitted = [(p.job, call.result()) for p, call in zip(started.submits, submits, strict=True)]
    polled = [(p.job, call.result()) for p, call in zip(started.polls, polls, strict=True)]
    fetched = _fetch_results(pool, polled)
    calls = [(_submit_origin(job), job, call) for job, call in submitted]
    calls += [(str(job.pk), job, call) for job, call in polled]
    calls += [(str(job.pk), job, fetched[job.pk]) for job, _ in polled if job.pk in fetched]
    timings.append(time.perf_counter() - clock - timings[0])
    with compute_slot():
        holding = _report_to_circuits(calls, started.health)
        for job, call in submitted:
            moves.append(_one(job, _submitted, job, call, holding.get(job.extractor_id)))
        for job, call in polled:
            move, result = _one(
                job, _polled, job, call, fetched.get(job.pk), holding.get(job.extractor_id)
            )
            moves.append(move)
            if result is not None:
                results[job.pk] = result
        jobs = {p.job.pk: p.job for p in planned}
        outcome = jobs_record(
            moves=moves,
            results=results,
            unrecordable=lambda move, error: _unrecordable(jobs[move.job_id], move, error),
        )
    try:
        _cancel_dropped_submissions(started.submits, outcome.refused, submits)
    except Exception:
        logger.exception("cancelling dropped submissions failed")
    timings.append(time.perf_counter() - clock - sum(timings))
    counts = (len(started.submits), len(started.polls), len(outcome.refused))
    logger.info(
        "batch of %d: %d submitted, %d polled, %d dropped; start %.0f ms, calls %.0f ms, "
        "record %.0f ms",
        len(job_ids),
        *counts,
        *(1000 * seconds for seconds in timings),
    )
    if span.is_recording():
        names = ("submitted", "polled", "dropped", "start_ms", "calls_ms", "record_ms")
        values = (*counts, *(round(1000 * seconds, 1) for seconds in timings))
        span.set_attributes(dict(zip((f"jobs.{n}" for n in names), values, strict=True)))


def _start(job_ids: list[str]) -> StartedBatch:
    """`jobs_start` for the batch; should it fail (and not for the database's sake), for each
    job alone, so that one job's fault holds back only that job (until its claim lease)."""
    try:
        return jobs_start(job_ids=job_ids)
    except CONNECTION_ERRORS:
        raise
    except Exception:
        logger.exception("starting a batch of %d failed", len(job_ids))
    started = StartedBatch()
    for job_id in job_ids if len(job_ids) > 1 else ():
        try:
            alone = jobs_start(job_ids=[job_id])
        except CONNECTION_ERRORS:
            raise
        except Exception:
            logger.exception("job %s cannot be started", job_id)
            continue
        started.submits += alone.submits
        started.polls += alone.polls
        started.health |= alone.health
    return started


def _one(job: ExtractionJob, build: Callable, *args) -> Any:
    """`build(*args)`: one job's move (and result) from its calls. Should building it raise, that
    is the job's failure, never its batch's."""
    try:
        return build(*args)
    except Exception as error:
        logger.exception("job %s: its answer cannot be recorded", job.pk)
        move = _unrecordable(job, None, error)
        return (move, None) if build is _polled else move


def _unrecordable(job: ExtractionJob, move: Move | None, error: Exception) -> Move:
    """The failure of a job whose outcome (`move`) cannot be built or recorded: its extractor
    answered with what we cannot use or store."""
    code = ErrorCode.INVALID_EXTRACTOR_ANSWER
    if move is not None and move.to_status == states.SUCCEEDED:
        code = ErrorCode.INVALID_RESULT
    submitting = job.status_id == states.SUBMITTING
    return fail_move(
        job.pk,
        expected_from={job.status_id},
        code=code,
        message=f"{ErrorCode(code).label}: {type(error).__name__}",
        details={"error": safe_text(str(error))[:1000]},
        lease_token=job.submit_attempts if submitting else None,
    )


def _submit_origin(job: ExtractionJob) -> str:
    """Whose doing a failed submission may be, for the extractor's circuit
    (`jobtracking.services.circuits`): a URL job's client, whatever the URL (the extractor may
    be waiting on the client's source: one that trickles times the submission out); an upload's
    client and document (one the extractor chokes on)."""
    client = f"client:{job.requested_by_id}"
    if job.source_url:
        return client
    return f"{client}:{job.file_sha256 or job.pk}"


def _is_outage_fault(error) -> bool:
    """A fault that says the extractor may be down. A 429 is not: it says we call too fast,
    which the rate limits and Retry-After handle."""
    return isinstance(error, TransientExtractorError) and error.http_status != 429


def _report_to_circuits(
    calls: list[tuple[str, ExtractionJob, Call]], health: dict[int, ExtractorHealth | None]
) -> dict[int, datetime]:
    """Each extractor's calls on its circuit, with their origins; returns, for each extractor
    whose circuit is now open or paused, when its held jobs are due. Should the report fail, the
    batch is recorded as if the circuits were closed."""
    tallies = defaultdict(Tally)
    for origin, job, call in calls:
        if _is_outage_fault(call.error):
            tallies[job.extractor_id].failed(origin, call.error.message)
        elif not isinstance(call.error, OSError | SourceError):  # no extractor call was made
            tallies[job.extractor_id].successes += 1
    try:
        return circuits_report(ExtractorHealth, tallies, health, extractor_release)
    except Exception:
        logger.exception("reporting to the extractors' circuits failed")
        return {}


@functools.cache
def _call_pool() -> ThreadPoolExecutor:
    """This worker process's threads for extractor calls, made on first use (after the fork) and
    kept: starting threads per batch cost more than the calls. A batch's calls all go at once."""
    return ThreadPoolExecutor(
        max_workers=settings.JOBS_TASK_BATCH_SIZE, thread_name_prefix="extractor"
    )


def process_job(job_id: str) -> None:
    """One job: a batch of one. Also runs tasks enqueued before the engine took batches."""
    process_jobs([job_id])


def backoff(job: ExtractionJob, step: int, retry_after: float | None) -> timedelta:
    """The wait before action `step` of a series (submissions or polls) of this job, on its
    extractor's schedule; never past the job's deadline (a `Retry-After` of days ends it then)."""
    extractor = job.extractor
    delay = next_delay(
        step,
        initial=extractor.poll_initial_interval,
        cap=extractor.poll_max_interval,
        retry_after=retry_after,
    )
    if job.deadline_at is None:
        return delay
    return max(timedelta(0), min(delay, job.deadline_at - timezone.now()))


def _client(job: ExtractionJob) -> ExtractorClient:
    return get_client(job.extractor)


def _poll(job: ExtractionJob) -> PollResult:
    return _client(job).poll(job.external_url)


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


def _submit(job: ExtractionJob) -> Submission:
    """Submit the job. A URL job's source is checked again at every submission (requeues too:
    the name may resolve elsewhere by now)."""
    client = _client(job)
    if job.source_url and not client.reports_document:
        return _submit_fetched(client, job)
    if job.source_url:
        checked_source(job.source_url)
    return client.submit(_submit_request(job))


def _submit_fetched(client: ExtractorClient, job: ExtractionJob) -> Submission:
    """For an extractor that does not report the document it extracted: the service fetches
    the source itself (through the URL guard) and submits those bytes, so what it hashed is
    what is extracted; the submission carries their facts for the job's record."""
    with fetch_source(
        job.source_url,
        max_bytes=settings.JOBS_UPLOAD_MAX_BYTES,
        timeout=settings.JOBS_SOURCE_FETCH_TIMEOUT_SECONDS,
    ) as fetched:
        request = dataclasses.replace(
            _submit_request(job),
            source_url="",
            content=fetched.file,
            content_type=fetched.facts.content_type,
        )
        submission = client.submit(request)
    return dataclasses.replace(submission, document=fetched.facts)


def _submitted(job: ExtractionJob, call: Call, held_until: datetime | None) -> Move:
    """The move that records a submission's outcome. The lease token is the number of the
    submission attempt, taken with the lease. `held_until`: the extractor's circuit is open."""
    token, extractor = job.submit_attempts, job.extractor
    error = call.error
    with job_log_context(job, job.status_id):
        if isinstance(error, OSError):
            return fail_move(
                job.pk,
                expected_from={states.SUBMITTING},
                code=ErrorCode.SOURCE_UNAVAILABLE,
                message=f"Cannot read the uploaded file: {type(error).__name__}",
                lease_token=token,
            )
        if held_until and _is_outage_fault(error):
            return submit_hold_move(
                job.pk,
                lease_token=token,
                error=error.message,
                http_status=error.http_status,
                until=held_until,
            )
        if isinstance(error, TransientExtractorError):
            logger.warning("submission failed, will retry: %s", error.message)
            delay = backoff(job, token - 1, error.retry_after)
            move = submit_retry_move(
                job.pk,
                lease_token=token,
                max_attempts=extractor.max_submit_attempts,
                error=client_text(error.message),
                http_status=error.http_status,
                delay=delay,
            )
            return _audit_full_error(move, error)
        if isinstance(error, PermanentExtractorError):
            return _fail(job, error, expected_from={states.SUBMITTING}, lease_token=token)
        submission = call.value
        request = f" (request {submission.request_id})" if submission.request_id else ""
        logger.info("submitted as %s%s", submission.external_id, request)
        return submitted_move(
            job.pk,
            lease_token=token,
            external_job_id=submission.external_id,
            external_url=submission.poll_url,
            request_id=submission.request_id,
            first_poll_in=backoff(job, 0, submission.retry_after),
            remote_ttl=_client(job).result_ttl,
            document=submission.document,
        )


def _fetch_results(pool: ThreadPoolExecutor, polled: list[tuple[ExtractionJob, Call]]):
    """Fetch the results of finished jobs whose protocol does not hand them over with the poll;
    the fetches count against the extractor's poll rate."""
    done = [
        job
        for job, call in polled
        if isinstance(call.value, PollResult)
        and call.value.status is RemoteStatus.SUCCEEDED
        and call.value.output is None
    ]
    if not done:
        return {}
    slots = reserve_fetch_slots(done[0].extractor, len(done))
    calls = [
        pool.submit(
            _call_at,
            at,
            lambda job=job: _client(job).fetch_result(job.external_url),
            job,
            "fetch_result",
        )
        for job, at in zip(done, slots, strict=True)
    ]
    return {job.pk: call.result() for job, call in zip(done, calls, strict=True)}


def _polled(
    job: ExtractionJob, call: Call, fetch: Call | None, held_until: datetime | None
) -> tuple[Move, Result | None]:
    """The move that records a poll's answer (and the result, for a finished job).
    `held_until`: the extractor's circuit is open."""
    error = call.error or (fetch.error if fetch else None)
    with job_log_context(job, job.status_id):
        if held_until and _is_outage_fault(error):
            return defer_move(job, held_until), None
        if isinstance(error, TransientExtractorError):
            logger.warning("poll failed, will retry: %s", error.message)
            next_poll_in = backoff(job, job.poll_error_count + 1, error.retry_after)
            move = poll_error_move(
                job,
                error=client_text(error.message),
                http_status=error.http_status,
                next_poll_in=next_poll_in,
            )
            return _audit_full_error(move, error), None
        if isinstance(error, PermanentExtractorError):
            return _fail(job, error, expected_from={job.status_id}), None
        result: PollResult = call.value
        logger.info("polled: %s (progress %s)", result.raw_status, result.progress)
        outcome = result.status
        if outcome is RemoteStatus.SUCCEEDED:
            output: ExtractionOutput = result.output or fetch.value
            pages = billable_pages(job.extractor.adapter, output.payload, job.content_type)
            try:
                done = Result.from_output(output, pages)
            except TooDeepError as error:
                move = fail_move(
                    job.pk,
                    expected_from={job.status_id},
                    code=ErrorCode.INVALID_RESULT,
                    message=f"The extractor's result cannot be stored: {error}",
                    remote=(result.raw_status, 100),
                    billed_pages=pages,
                )
                return move, None
            move = succeeded_move(
                job.pk, seen_status=job.status_id, raw_status=result.raw_status, result=done
            )
            return move, done
        if outcome is RemoteStatus.FAILED:
            remote = ": ".join(part for part in (result.error_code, result.error_message) if part)
            move = fail_move(
                job.pk,
                expected_from={job.status_id},
                code=ErrorCode.EXTRACTION_FAILED,
                message=remote or f"The extractor reported {result.raw_status}",
                details={"external_status": result.raw_status, "remote_code": result.error_code},
                remote=(result.raw_status, result.progress or 0),
                billed_pages=result.billed_pages,
            )
            return move, None
        to_status = None
        if outcome is RemoteStatus.CANCELED:
            to_status = states.CANCELLED
        elif outcome is RemoteStatus.RUNNING and job.status_id == states.SUBMITTED:
            to_status = states.PROCESSING
        move = poll_move(
            job.pk,
            seen_status=job.status_id,
            to_status=to_status,
            raw_status=result.raw_status,
            progress=result.progress,
            next_poll_in=backoff(job, job.poll_count + 1, result.retry_after),
            billed_pages=result.billed_pages,
        )
        return move, None


def _fail(
    job: ExtractionJob,
    error: PermanentExtractorError,
    *,
    expected_from: set[str],
    lease_token: int | None = None,
) -> Move:
    return fail_move(
        job.pk,
        expected_from=expected_from,
        code=error.code,
        message=client_text(error.message),
        details={
            "http_status": error.http_status,
            "remote_code": error.remote_code,
            "error": error.message,
        },
        lease_token=lease_token,
    )


def _audit_full_error(move: Move, error: ExtractorError) -> Move:
    """`move`, its audit row keeping the error's full text for staff."""
    if move.details is None:  # no audit row
        return move
    return dataclasses.replace(move, details={**move.details, "error": error.message})


def _cancel_dropped_submissions(
    submits: list[Planned], refused: dict[UUID, Exception], calls: list
) -> None:
    """A job cancelled (or taken over) while it was being submitted: drop the extractor's copy
    if the job has ended meanwhile."""
    accepted = {
        p.job.pk: call.result().value.poll_url
        for p, call in zip(submits, calls, strict=True)
        if p.job.pk in refused and call.result().error is None
    }
    if not accepted:
        return
    ended = ExtractionJob.objects.filter(pk__in=accepted, status__in=states.TERMINAL)
    for job in ended.select_related("extractor"):
        logger.info("job %s moved on during submission (%s)", job.pk, refused[job.pk].message)
        _cancel_quietly(job, accepted[job.pk])


def _cancel_quietly(job: ExtractionJob, poll_url: str) -> None:
    with tracing.job_span(job, "cancel") as span:
        try:
            _client(job).cancel(poll_url)
        except ExtractorError as error:
            logger.warning("job %s: cancel at the extractor failed: %s", job.pk, error.message)
            tracing.record_outcome(span, "cancel_failed")
        else:
            tracing.record_outcome(span, "cancelled")


def _ignore_moved_on(service, **kwargs):
    try:
        return service(**kwargs)
    except JobMovedOnError as error:
        logger.info("%s: %s", service.__name__, error.message)
        return None


def cancel_at_extractor(job_id: str) -> None:
    """Best effort: ask the extractor to drop a job we cancelled or timed out."""
    job = ExtractionJob.objects.select_related("extractor").filter(pk=job_id).first()
    if job is None or not job.external_url or not job.is_terminal:
        return
    with job_log_context(job, "cancel_at_extractor"):
        _cancel_quietly(job, job.external_url)


def reap_stuck_jobs() -> dict[str, int]:
    """Safety net (a django-q2 schedule and `manage.py reap_stuck_jobs`): time out overdue jobs
    of the statuses a deadline reaps (`states.REAPED_AT_DEADLINE`), hand back jobs whose
    submission lease expired (their worker died), and make every dispatched job without a due_at
    due now. The dispatcher then acts on them; a job in another active status (one that waits
    for a person) is left as it is. Also completes the batches whose completion a dead process
    left unrecorded (`batches_complete_due`)."""
    now = timezone.now()
    reaped = ExtractionJob.objects.filter(status__in=sorted(states.REAPED_AT_DEADLINE))
    overdue = list(reaped.filter(deadline_at__lte=now).values_list("pk", flat=True))
    timed_out = sum(_ignore_moved_on(job_time_out, job_id=pk) is not None for pk in overdue)
    expired = list(
        ExtractionJob.objects.filter(
            status=states.SUBMITTING, lease_expires_at__lte=now
        ).values_list("pk", flat=True)
    )
    handed_back = sum(
        _ignore_moved_on(job_hand_back_expired_lease, job_id=pk) is not None for pk in expired
    )
    repaired = jobs_due_repair(now)
    return {
        "timed_out": timed_out,
        "handed_back": handed_back,
        "repaired": repaired,
        "batches_completed": batches_complete_due(),
    }


def purge_expired_jobs() -> int:
    """Scheduled daily: archive, then delete, jobs past retention, a batch at a time (one
    archive run)."""
    purged = 0
    with ArchiveRun() as run:
        while ids := list(purgeable_jobs().order_by("pk").values_list("pk", flat=True)[:1000]):
            purged += jobs_purge(ids=ids, run=run)
    return purged


def audit_checkpoint() -> int | None:
    """Scheduled every ten minutes: sign the heads of the audit chains that moved; the new
    checkpoint's number, or None (nothing moved, or no key). Redelivery writes nothing twice."""
    checkpoint = audit_checkpoint_create()
    return checkpoint.number if checkpoint else None


def cluster_heartbeat() -> None:
    """Scheduled every minute: proves the django-q2 cluster runs tasks."""
    heartbeat_record("cluster")
