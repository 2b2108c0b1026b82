"""Every write to a job's state. Nothing else assigns `ExtractionJob.status`.

Each change is one transaction: lock the job row, check the move against `states.TRANSITIONS`,
write the job, one `JobStatusChange` (audit) and one `JobEvent` (outbox), and register side effects
to run only after commit. The row lock closes the race between two actors (two workers, or a worker
and a cancel): the second one sees the first one's status and is refused.
"""

import getpass
import hashlib
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files import File
from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from extraction.errors import ErrorCode
from extraction.models import Extractor
from jobtracking import states
from jobtracking.errors import (
    ActiveJobExistsError,
    ApplicationError,
    ExtractorDisabledError,
    ForceRequiredError,
    IdempotencyKeyReusedError,
    InFlightLimitError,
    InvalidTransitionError,
    JobMovedOnError,
    JobNotFoundError,
    JobValidationError,
)
from jobtracking.events import job_event_payload
from jobtracking.models import (
    ActorType,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
)
from jobtracking.queue import enqueue_cancel_at_extractor, enqueue_process
from jobtracking.webhooks import deliveries_fan_out


@dataclass(frozen=True)
class Actor:
    """Who causes a change: recorded on every audit row."""

    type: ActorType
    user: AbstractBaseUser | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def system(cls) -> "Actor":
        return cls(ActorType.SYSTEM)

    @classmethod
    def command(cls, user: AbstractBaseUser | None = None) -> "Actor":
        return cls(ActorType.COMMAND, user, {"os_user": getpass.getuser()})


def _record(
    job: ExtractionJob,
    *,
    from_status: str | None,
    actor: Actor,
    reason: str,
    details: dict[str, Any] | None,
) -> None:
    """Write the audit row and, for client-facing moves, the outbox row."""
    JobStatusChange.objects.create(
        job=job,
        from_status_id=from_status,
        to_status_id=job.status_id,
        attempt=job.attempt,
        changed_at=job.updated_at,
        actor_type=actor.type,
        actor=actor.user,
        reason=reason,
        details={**actor.details, **(details or {})},
    )
    event_type = states.event_type(from_status, job.status_id)
    if event_type:
        event = JobEvent.objects.create(
            job=job, type=event_type, payload=job_event_payload(job), created_at=job.updated_at
        )
        deliveries_fan_out([event])


def _claimed(now) -> dict[str, Any]:
    """Fields of a job handed to a task right now: the dispatcher leaves it alone for a lease,
    after which it is due again in case the task was lost."""
    return {
        "claimed_at": now,
        "due_at": now + timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS),
    }


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _validate_new_job(
    *, extractor: Extractor, file_id: str, source_url: str, upload: File | None, options, metadata
) -> None:
    if not extractor.enabled:
        raise ExtractorDisabledError(f"Extractor {extractor.slug} is disabled.")
    problems = {}
    if not file_id.strip():
        problems["file_id"] = "This field is required."
    if bool(source_url) == bool(upload):
        problems["source"] = "Give exactly one of source_url and an uploaded file."
    for name, value, cap in (
        ("options", options, settings.JOBS_OPTIONS_MAX_BYTES),
        ("metadata", metadata, settings.JOBS_METADATA_MAX_BYTES),
    ):
        if not isinstance(value, dict):
            problems[name] = "Must be a JSON object."
        elif _json_size(value) > cap:
            problems[name] = f"Must be at most {cap} bytes as JSON."
    if problems:
        raise JobValidationError(problems)


def _active_job_error(extractor: Extractor, file_id: str) -> ActiveJobExistsError | None:
    active = (
        ExtractionJob.objects.filter(extractor=extractor, file_id=file_id, status__in=states.ACTIVE)
        .only("id", "status")
        .first()
    )
    if active is None:
        return None
    return ActiveJobExistsError(
        f"Job {active.id} is already {active.status_id} for file {file_id} on {extractor.slug}.",
        job_id=str(active.id),
    )


def job_create(
    *,
    extractor: Extractor,
    file_id: str,
    actor: Actor,
    source_url: str = "",
    upload: File | None = None,
    file_name: str = "",
    content_type: str = "",
    file_size: int | None = None,
    file_sha256: str = "",
    options: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    request_fingerprint: str = "",
    reason: str = "",
) -> ExtractionJob:
    """Create a `pending` job due now, with its `job.created` audit row and event.

    Refuses a disabled extractor, bad input, and a second active job for the same
    (extractor, file_id) — the last one enforced by the database's partial unique index, so it
    holds under concurrency. Runs in its own transaction (a savepoint inside a caller's).
    """
    options = {} if options is None else options
    metadata = {} if metadata is None else metadata
    _validate_new_job(
        extractor=extractor,
        file_id=file_id,
        source_url=source_url,
        upload=upload,
        options=options,
        metadata=metadata,
    )
    now = timezone.now()
    job = ExtractionJob(
        extractor=extractor,
        status_id=states.PENDING,
        file_id=file_id,
        file_name=file_name,
        content_type=content_type,
        file_size=file_size,
        file_sha256=file_sha256,
        source_url=source_url,
        options=options,
        metadata=metadata,
        requested_by=actor.user,
        idempotency_key=idempotency_key,
        request_fingerprint=request_fingerprint,
        created_at=now,
        deadline_at=now + extractor.max_duration,
        **_claimed(now),
    )
    if upload is not None:
        job.upload.save(upload.name or file_name or "upload", upload, save=False)
    try:
        with transaction.atomic():
            job.save(force_insert=True)
            _record(job, from_status=None, actor=actor, reason=reason, details=None)
            transaction.on_commit(partial(enqueue_process, job.id))
    except IntegrityError:
        if error := _active_job_error(extractor, file_id):
            raise error from None
        raise
    return job


def _replayed_job(
    user: AbstractBaseUser | None, idempotency_key: str, fingerprint: str
) -> ExtractionJob | None:
    job = ExtractionJob.objects.filter(requested_by=user, idempotency_key=idempotency_key).first()
    if job is not None and job.request_fingerprint != fingerprint:
        raise IdempotencyKeyReusedError(
            f"Idempotency-Key {idempotency_key!r} was used for a different request (job {job.id}).",
            job_id=str(job.id),
        )
    return job


def job_create_idempotent(
    *, idempotency_key: str, request_fingerprint: str, actor: Actor, **fields: Any
) -> tuple[ExtractionJob, bool]:
    """`job_create` keyed by the client's Idempotency-Key: the same key with the same request
    returns the original job (created=False); with a different request it is refused
    (`IdempotencyKeyReusedError`). Concurrent twins are settled by the unique constraint."""
    if existing := _replayed_job(actor.user, idempotency_key, request_fingerprint):
        return existing, False
    try:
        job = job_create(
            actor=actor,
            idempotency_key=idempotency_key,
            request_fingerprint=request_fingerprint,
            **fields,
        )
    except IntegrityError:
        if existing := _replayed_job(actor.user, idempotency_key, request_fingerprint):
            return existing, False
        raise
    return job, True


@dataclass(frozen=True)
class BulkOutcome:
    index: int
    job: ExtractionJob | None = None
    error: ApplicationError | None = None


def job_create_many(*, items: list[dict[str, Any]], actor: Actor) -> list[BulkOutcome]:
    """Create many validated jobs (each a dict of `job_create` fields with a URL source) in one
    transaction and a handful of queries: one read of conflicting active jobs, then one insert
    each for jobs, audit rows and events. Items that conflict with an active job (stored or
    earlier in the batch) get an `ActiveJobExistsError` outcome; the others are created. The
    dispatcher picks the new jobs up (they are due now) within about a second."""
    now = timezone.now()
    keys = {(item["extractor"].pk, item["file_id"]) for item in items}
    active = {
        (extractor_id, file_id): job_id
        for extractor_id, file_id, job_id in ExtractionJob.objects.filter(
            status__in=states.ACTIVE,
            extractor_id__in={k[0] for k in keys},
            file_id__in={k[1] for k in keys},
        ).values_list("extractor_id", "file_id", "id")
        if (extractor_id, file_id) in keys
    }
    outcomes, jobs = [], []
    for index, item in enumerate(items):
        key = (item["extractor"].pk, item["file_id"])
        if key in active:
            outcomes.append(
                BulkOutcome(
                    index,
                    error=ActiveJobExistsError(
                        f"Job {active[key]} is already active for file {item['file_id']} "
                        f"on {item['extractor'].slug}.",
                        job_id=str(active[key]),
                    ),
                )
            )
            continue
        job = ExtractionJob(
            status_id=states.PENDING,
            requested_by=actor.user,
            created_at=now,
            updated_at=now,
            due_at=now,
            deadline_at=now + item["extractor"].max_duration,
            **item,
        )
        active[key] = job.id
        jobs.append(job)
        outcomes.append(BulkOutcome(index, job=job))
    try:
        with transaction.atomic():
            _insert_created(jobs, actor=actor, now=now)
    except IntegrityError:
        # A concurrent request made one of these files active meanwhile: one savepoint each.
        return [_create_one(index, item, actor) for index, item in enumerate(items)]
    return outcomes


def _create_one(index: int, item: dict[str, Any], actor: Actor) -> BulkOutcome:
    try:
        return BulkOutcome(index, job=job_create(actor=actor, reason="Bulk create", **item))
    except ApplicationError as error:
        return BulkOutcome(index, error=error)


def _insert_created(jobs: list[ExtractionJob], *, actor: Actor, now) -> None:
    ExtractionJob.objects.bulk_create(jobs)
    JobStatusChange.objects.bulk_create(
        JobStatusChange(
            job=job,
            to_status_id=states.PENDING,
            attempt=1,
            changed_at=now,
            actor_type=actor.type,
            actor=actor.user,
            reason="Bulk create",
            details=actor.details,
        )
        for job in jobs
    )
    events = JobEvent.objects.bulk_create(
        JobEvent(job=job, type=states.EVENT_CREATED, payload=job_event_payload(job), created_at=now)
        for job in jobs
    )
    deliveries_fan_out(events)


def job_transition(
    *,
    job_id: UUID | str,
    to_status: str,
    actor: Actor,
    reason: str = "",
    details: dict[str, Any] | None = None,
    expected_from: Collection[str] | None = None,
    force: bool = False,
    prepare: Callable[[ExtractionJob], None] | None = None,
    on_commit: Callable[[], None] | None = None,
) -> ExtractionJob:
    """Move one job to `to_status`: the single writer of job status.

    Locks the row, then checks: `expected_from` (the caller's view of the job; if the job has
    moved on since, raises `JobMovedOnError` so a redelivered task can drop its work) and the
    transition table (`InvalidTransitionError`, or `ForceRequiredError` for a succeeded job
    without `force`). `prepare` mutates the locked job (counters, external ids, errors) before
    it is saved. Terminal statuses clear `due_at` and the lease and stamp `completed_at`.
    `on_commit` runs only once the transaction has committed.
    """
    with transaction.atomic():
        try:
            job = (
                ExtractionJob.objects.select_for_update().select_related("extractor").get(pk=job_id)
            )
        except (ExtractionJob.DoesNotExist, ValidationError):
            raise JobNotFoundError(f"No job {job_id}.") from None
        from_status = job.status_id
        if expected_from is not None and from_status not in expected_from:
            raise JobMovedOnError(
                f"Job {job.id} is {from_status}, not {'/'.join(sorted(expected_from))}.",
                current_status=from_status,
            )
        if not states.is_allowed(from_status, to_status, force=force):
            error = (
                ForceRequiredError
                if states.is_allowed(from_status, to_status, force=True)
                else InvalidTransitionError
            )
            raise error(
                f"Job {job.id} cannot go from {from_status} to {to_status}.",
                current_status=from_status,
            )

        now = timezone.now()
        job.status_id = to_status
        if prepare is not None:
            prepare(job)
        if to_status in states.TERMINAL:
            job.due_at = job.claimed_at = job.lease_expires_at = None
            job.completed_at = now
        elif to_status == states.SUBMITTED:
            job.submitted_at = job.submitted_at or now
        elif to_status == states.PROCESSING:
            job.started_at = job.started_at or now
        job.updated_at = now
        if from_status in states.TERMINAL:
            # Back to active: the partial unique index may find another active job for the file.
            try:
                with transaction.atomic():
                    job.save()
            except IntegrityError:
                if error := _active_job_error(job.extractor, job.file_id):
                    raise error from None
                raise
        else:
            job.save()
        _record(job, from_status=from_status, actor=actor, reason=reason, details=details)
        if on_commit is not None:
            transaction.on_commit(on_commit)
    return job


def _reset_for_new_attempt(job: ExtractionJob) -> None:
    now = timezone.now()
    job.attempt += 1
    job.submit_attempts = job.poll_count = job.poll_error_count = 0
    job.external_job_id = job.external_url = job.external_status = job.external_request_id = ""
    job.progress = 0
    job.remote_expires_at = job.lease_expires_at = None
    job.error_code = job.error_message = ""
    job.submitted_at = job.started_at = job.completed_at = None
    job.deadline_at = now + job.extractor.max_duration
    for name, value in _claimed(now).items():
        setattr(job, name, value)


def job_requeue(
    *, job_id: UUID | str, actor: Actor, reason: str = "", force: bool = False
) -> ExtractionJob:
    """Send a terminal job back to `pending` as a new attempt (attempt + 1, counters and
    external ids reset, a fresh deadline). A `succeeded` job needs `force`. Earlier attempts'
    history and results stay. Refused while another active job exists for the same file."""

    def prepare(job: ExtractionJob) -> None:
        if not job.extractor.enabled:
            raise ExtractorDisabledError(f"Extractor {job.extractor.slug} is disabled.")
        _reset_for_new_attempt(job)

    return job_transition(
        job_id=job_id,
        to_status=states.PENDING,
        actor=actor,
        reason=reason,
        force=force,
        prepare=prepare,
        on_commit=partial(enqueue_process, job_id),
    )


def _cancel_remote_on_commit(job: ExtractionJob) -> None:
    """Ask the extractor to drop the job too (best effort) once our change has committed."""
    if job.external_url:
        transaction.on_commit(partial(enqueue_cancel_at_extractor, job.id))


def job_cancel(*, job_id: UUID | str, actor: Actor, reason: str = "") -> ExtractionJob:
    """Cancel an active job, and the extractor's copy of it (best effort, after commit).
    Refused (`InvalidTransitionError`) once the job is terminal."""
    with transaction.atomic():
        job = job_transition(job_id=job_id, to_status=states.CANCELLED, actor=actor, reason=reason)
        _cancel_remote_on_commit(job)
    return job


# The worker's moves. Each runs after an extractor call (never around one) and names the status
# the worker last saw, so a job that was cancelled or taken over meanwhile refuses the change.

SYSTEM = Actor.system()
IN_FLIGHT = (states.SUBMITTING, states.SUBMITTED, states.PROCESSING)


def job_consume_claim(*, job_id: UUID | str) -> bool:
    """Take the claim a dispatch (or creation) put on the job. Exactly one copy of a task
    wins it; a redelivered copy finds no claim and must do nothing."""
    return (
        ExtractionJob.objects.filter(pk=job_id, claimed_at__isnull=False).update(claimed_at=None)
        == 1
    )


def job_defer(*, job_id: UUID | str, status: str, delay: timedelta) -> None:
    """Look at the job again after `delay` (no status change, so no audit row)."""
    ExtractionJob.objects.filter(pk=job_id, status=status).update(
        due_at=timezone.now() + delay, updated_at=timezone.now()
    )


def _check_lease(job: ExtractionJob, lease_token: int) -> None:
    # The lease token is the submit attempt number that took the lease: if the lease expired and
    # another worker took a new one, this worker's result is no longer wanted.
    if job.submit_attempts != lease_token:
        raise JobMovedOnError(f"Job {job.id} lease {lease_token} was taken over.")


def job_take_lease(*, job_id: UUID | str) -> ExtractionJob:
    """pending → submitting: the worker may now call the extractor. The lease (and `due_at`)
    end after the extractor's request timeout plus a margin; then the job is handed back.
    Raises `InFlightLimitError` when the extractor's `max_in_flight` is reached."""

    def prepare(job: ExtractionJob) -> None:
        extractor = job.extractor
        if extractor.max_in_flight:
            # Lock the extractor row so that concurrent workers count one at a time.
            Extractor.objects.select_for_update().filter(pk=extractor.pk).first()
            running = ExtractionJob.objects.filter(extractor=extractor, status__in=IN_FLIGHT)
            if running.count() >= extractor.max_in_flight:
                raise InFlightLimitError(
                    f"{extractor.slug} has {extractor.max_in_flight} in flight."
                )
        now = timezone.now()
        job.submit_attempts += 1
        job.lease_expires_at = job.due_at = (
            now
            + extractor.request_timeout
            + timedelta(seconds=settings.JOBS_SUBMIT_LEASE_MARGIN_SECONDS)
        )

    return job_transition(
        job_id=job_id,
        to_status=states.SUBMITTING,
        actor=SYSTEM,
        expected_from={states.PENDING},
        prepare=prepare,
    )


def job_hand_back_expired_lease(*, job_id: UUID | str) -> ExtractionJob:
    """submitting → pending after the lease expired (the worker died or hung). The next
    submission reuses the idempotency key of this attempt; the history says so."""

    def prepare(job: ExtractionJob) -> None:
        if job.lease_expires_at and job.lease_expires_at > timezone.now():
            raise JobMovedOnError(f"Job {job.id} still holds a live lease.")
        job.lease_expires_at = None
        job.due_at = timezone.now()

    return job_transition(
        job_id=job_id,
        to_status=states.PENDING,
        actor=SYSTEM,
        reason="Submission lease expired; the job will be submitted again with the same "
        "idempotency key.",
        details={"resubmission": True},
        expected_from={states.SUBMITTING},
        prepare=prepare,
    )


def job_mark_submitted(
    *,
    job_id: UUID | str,
    lease_token: int,
    external_job_id: str,
    external_url: str,
    request_id: str,
    first_poll_in: timedelta,
    remote_ttl: timedelta | None,
) -> ExtractionJob:
    """submitting → submitted: the extractor accepted the job. Its poll location is stored in
    this same transaction, so polling resumes after any restart."""

    def prepare(job: ExtractionJob) -> None:
        _check_lease(job, lease_token)
        now = timezone.now()
        job.external_job_id = external_job_id[:255]
        job.external_url = external_url[:2000]
        job.external_request_id = request_id[:100]
        job.lease_expires_at = None
        job.due_at = now + first_poll_in
        job.remote_expires_at = now + remote_ttl if remote_ttl else None

    return job_transition(
        job_id=job_id,
        to_status=states.SUBMITTED,
        actor=SYSTEM,
        details={"external_job_id": external_job_id, "request_id": request_id},
        expected_from={states.SUBMITTING},
        prepare=prepare,
    )


def job_retry_submission(
    *,
    job_id: UUID | str,
    lease_token: int,
    max_attempts: int,
    error: str,
    http_status: int | None,
    delay: timedelta,
) -> ExtractionJob:
    """submitting → pending after a transient fault, to try again after `delay`; → failed
    (`extractor_unavailable`) once `max_attempts` submissions are spent. The lease token is the
    number of the attempt that just failed."""
    details = {"error": error, "http_status": http_status, "submit_attempts": lease_token}
    if lease_token >= max_attempts:
        return job_fail(
            job_id=job_id,
            expected_from={states.SUBMITTING},
            code=ErrorCode.EXTRACTOR_UNAVAILABLE,
            message=f"Gave up after {lease_token} submission attempts: {error}",
            details=details,
            lease_token=lease_token,
        )

    def prepare(job: ExtractionJob) -> None:
        _check_lease(job, lease_token)
        job.lease_expires_at = None
        job.due_at = timezone.now() + delay

    return job_transition(
        job_id=job_id,
        to_status=states.PENDING,
        actor=SYSTEM,
        reason=f"Transient fault; retrying in {delay.total_seconds():.1f}s",
        details=details,
        expected_from={states.SUBMITTING},
        prepare=prepare,
    )


def job_fail(
    *,
    job_id: UUID | str,
    expected_from: Collection[str],
    code: ErrorCode,
    message: str,
    details: dict[str, Any] | None = None,
    lease_token: int | None = None,
) -> ExtractionJob:
    """→ failed with an error code from the fixed vocabulary."""

    def prepare(job: ExtractionJob) -> None:
        if lease_token is not None:
            _check_lease(job, lease_token)
        job.error_code = code
        job.error_message = message[:2000]

    return job_transition(
        job_id=job_id,
        to_status=states.FAILED,
        actor=SYSTEM,
        reason=message[:500],
        details={"error_code": code, **(details or {})},
        expected_from=expected_from,
        prepare=prepare,
    )


def job_time_out(*, job_id: UUID | str) -> ExtractionJob:
    """→ timed_out once the deadline has passed; the extractor is asked to cancel."""

    def prepare(job: ExtractionJob) -> None:
        if job.deadline_at is None or job.deadline_at > timezone.now():
            raise JobMovedOnError(f"Job {job.id} has not reached its deadline.")
        job.error_code = ErrorCode.DEADLINE_EXCEEDED
        job.error_message = f"Not finished by its deadline {job.deadline_at.isoformat()}."

    with transaction.atomic():
        job = job_transition(
            job_id=job_id,
            to_status=states.TIMED_OUT,
            actor=SYSTEM,
            reason="Deadline passed",
            expected_from=states.ACTIVE,
            prepare=prepare,
        )
        _cancel_remote_on_commit(job)
    return job


def job_record_poll(
    *,
    job: ExtractionJob,
    raw_status: str,
    progress: int | None,
    next_poll_in: timedelta,
) -> bool:
    """A poll that changed no status: count it, keep the extractor's word and progress, reset
    the error count, schedule the next one. False if the job moved on meanwhile."""
    now = timezone.now()
    changes: dict[str, Any] = {
        "poll_count": F("poll_count") + 1,
        "poll_error_count": 0,
        "external_status": raw_status[:50],
        "due_at": now + next_poll_in,
        "updated_at": now,
    }
    if progress is not None:
        changes["progress"] = max(0, min(100, progress))
    return ExtractionJob.objects.filter(pk=job.pk, status=job.status_id).update(**changes) == 1


def job_record_poll_error(
    *, job: ExtractionJob, error: str, http_status: int | None, next_poll_in: timedelta
) -> None:
    """A transient poll fault: count it and poll again later; past the extractor's
    `max_poll_errors` the job fails with `extractor_unavailable`."""
    if job.poll_error_count + 1 >= job.extractor.max_poll_errors:
        job_fail(
            job_id=job.pk,
            expected_from={job.status_id},
            code=ErrorCode.EXTRACTOR_UNAVAILABLE,
            message=f"Gave up after {job.poll_error_count + 1} failed polls: {error}",
            details={"error": error, "http_status": http_status},
        )
        return
    now = timezone.now()
    ExtractionJob.objects.filter(pk=job.pk, status=job.status_id).update(
        poll_error_count=F("poll_error_count") + 1, due_at=now + next_poll_in, updated_at=now
    )


def job_mark_processing(
    *, job_id: UUID | str, raw_status: str, progress: int | None, next_poll_in: timedelta
) -> ExtractionJob:
    """submitted → processing: the extractor reports the job running."""

    def prepare(job: ExtractionJob) -> None:
        job.poll_count += 1
        job.poll_error_count = 0
        job.external_status = raw_status[:50]
        job.progress = max(0, min(100, progress or 0))
        job.due_at = timezone.now() + next_poll_in

    return job_transition(
        job_id=job_id,
        to_status=states.PROCESSING,
        actor=SYSTEM,
        details={"external_status": raw_status, "progress": progress},
        expected_from={states.SUBMITTED},
        prepare=prepare,
    )


def job_mark_succeeded(
    *,
    job_id: UUID | str,
    raw_status: str,
    payload: dict[str, Any],
    page_count: int | None,
    model_version: str,
) -> ExtractionJob:
    """submitted/processing → succeeded, storing the result in the same transaction: inline JSON
    up to `JOBS_RESULT_INLINE_MAX_BYTES`, otherwise a file in Django storage."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    digest = hashlib.sha256(body).hexdigest()
    inline = len(body) <= settings.JOBS_RESULT_INLINE_MAX_BYTES

    def prepare(job: ExtractionJob) -> None:
        job.poll_count += 1
        job.poll_error_count = 0
        job.external_status = raw_status[:50]
        job.progress = 100

    with transaction.atomic():
        job = job_transition(
            job_id=job_id,
            to_status=states.SUCCEEDED,
            actor=SYSTEM,
            details={"external_status": raw_status, "result_bytes": len(body)},
            expected_from={states.SUBMITTED, states.PROCESSING},
            prepare=prepare,
        )
        result = ExtractionResult(
            job=job,
            attempt=job.attempt,
            payload=payload if inline else None,
            content_sha256=digest,
            size_bytes=len(body),
            page_count=page_count,
            model_version=model_version[:200],
        )
        if not inline:
            # Written inside the transaction so that a failed commit leaves no result row; an
            # orphaned file is harmless and named after the job and attempt.
            result.payload_file.save(f"{job.id}-{job.attempt}.json", ContentFile(body), save=False)
        result.save()
    return job


def job_mark_cancelled_by_extractor(
    *, job_id: UUID | str, expected_from: Collection[str], raw_status: str
) -> ExtractionJob:
    return job_transition(
        job_id=job_id,
        to_status=states.CANCELLED,
        actor=SYSTEM,
        reason="Cancelled by the extractor",
        details={"external_status": raw_status},
        expected_from=expected_from,
    )
