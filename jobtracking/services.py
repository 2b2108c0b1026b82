"""Every write to a job's state. Nothing else assigns `ExtractionJob.status`.

Each change is one transaction: lock the job row, check the move against `states.TRANSITIONS`,
write the job, one `JobStatusChange` (audit) and one `JobEvent` (outbox), and register side effects
to run only after commit. The row lock closes the race between two actors (two workers, or a worker
and a cancel): the second one sees the first one's status and is refused.
"""

import getpass
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.files import File
from django.db import IntegrityError, transaction
from django.utils import timezone

from extraction.models import Extractor
from jobtracking import states
from jobtracking.errors import (
    ActiveJobExistsError,
    ExtractorDisabledError,
    ForceRequiredError,
    InvalidTransitionError,
    JobMovedOnError,
    JobNotFoundError,
    JobValidationError,
)
from jobtracking.events import job_event_payload
from jobtracking.models import (
    ActorType,
    ExtractionJob,
    JobEvent,
    JobStatusChange,
)


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
        JobEvent.objects.create(
            job=job, type=event_type, payload=job_event_payload(job), created_at=job.updated_at
        )


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
        created_at=now,
        due_at=now,
        deadline_at=now + extractor.max_duration,
    )
    if upload is not None:
        job.upload.save(upload.name or file_name or "upload", upload, save=False)
    try:
        with transaction.atomic():
            job.save(force_insert=True)
            _record(job, from_status=None, actor=actor, reason=reason, details=None)
    except IntegrityError:
        if error := _active_job_error(extractor, file_id):
            raise error from None
        raise
    return job


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
                status=from_status,
            )
        if not states.is_allowed(from_status, to_status, force=force):
            error = (
                ForceRequiredError
                if states.is_allowed(from_status, to_status, force=True)
                else InvalidTransitionError
            )
            raise error(
                f"Job {job.id} cannot go from {from_status} to {to_status}.", status=from_status
            )

        now = timezone.now()
        job.status_id = to_status
        if prepare is not None:
            prepare(job)
        if to_status in states.TERMINAL:
            job.due_at = None
            job.lease_expires_at = None
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
    job.due_at = now
    job.deadline_at = now + job.extractor.max_duration


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
    )


def job_cancel(*, job_id: UUID | str, actor: Actor, reason: str = "") -> ExtractionJob:
    """Cancel an active job. Refused (`InvalidTransitionError`) once the job is terminal."""
    return job_transition(job_id=job_id, to_status=states.CANCELLED, actor=actor, reason=reason)
