"""What people and housekeeping do to a job: requeue, cancel, time out, hand back a dead
worker's lease. Each is one transition through `job_transition`."""

from collections.abc import Collection
from functools import partial
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from extraction.errors import ErrorCode
from jobtracking import states
from jobtracking.errors import (
    ActiveJobExistsError,
    ApplicationError,
    ExtractorDisabledError,
    InvalidTransitionError,
    JobMovedOnError,
)
from jobtracking.infra.queue import enqueue_cancel_at_extractor
from jobtracking.infra.wakeup import notify_due
from jobtracking.models import ExtractionJob, Priority
from jobtracking.representation import moment
from jobtracking.services.transitions import (
    SYSTEM,
    Actor,
    BatchOutcome,
    Move,
    job_transition,
    jobs_transition,
)


def _reset_for_new_attempt(job: ExtractionJob) -> None:
    now = timezone.now()
    # A success requeued is to be extracted again, not handed the same result (`services.reuse`).
    job.extract_afresh = job.status_id == states.SUCCEEDED
    job.attempt += 1
    job.submit_attempts = job.poll_count = job.poll_error_count = 0
    job.external_job_id = job.external_url = job.external_status = job.external_request_id = ""
    job.progress = 0
    job.remote_expires_at = job.lease_expires_at = job.claimed_at = None
    job.error_code = job.error_message = ""
    job.reused_from_job = job.reused_from_attempt = None
    job.submitted_at = job.started_at = job.completed_at = None
    # The new attempt's turnaround counts from here, not from the job's creation.
    job.requeued_at = now
    job.deadline_at = now + job.extractor.max_duration
    job.due_at = now


def job_requeue(
    *,
    job_id: UUID | str,
    actor: Actor,
    reason: str = "",
    force: bool = False,
    priority: Priority | None = None,
) -> ExtractionJob:
    """Send a terminal job back to `pending` as a new attempt (attempt + 1, counters, times and
    external ids reset, `requeued_at` now, a fresh deadline), due at once, at `priority` if
    given. A `succeeded` job needs `force`, and its new attempt goes to the extractor, never
    taking a reused result (`extract_afresh`). Earlier attempts' history and results stay.
    Refused while another active job exists for the same file."""

    with transaction.atomic():
        job = job_transition(
            job_id=job_id,
            to_status=states.PENDING,
            actor=actor,
            reason=reason,
            details=_requeue_details(priority),
            force=force,
            prepare=_requeue_prepare(priority),
        )
        notify_due()
    return job


def _requeue_prepare(priority: Priority | None):
    def prepare(job: ExtractionJob) -> None:
        if not states.requeue_allowed(job.status_id, force=True):
            raise InvalidTransitionError(
                f"Job {job.id} is {job.status_id}: only a job that ended can be requeued.",
                current_status=job.status_id,
            )
        if not job.extractor.enabled:
            raise ExtractorDisabledError(f"Extractor {job.extractor.slug} is disabled.")
        _reset_for_new_attempt(job)
        if priority is not None:
            job.priority = priority

    return prepare


def _requeue_details(priority: Priority | None) -> dict | None:
    return {"priority": Priority(priority).code} if priority is not None else None


def jobs_requeue(
    *,
    job_ids: Collection[UUID],
    actor: Actor,
    reason: str = "",
    force: bool = False,
    priority: Priority | None = None,
) -> BatchOutcome:
    """`job_requeue` for many jobs in one transaction: each one refused or requeued as
    `job_requeue` would. When one of them would be a second active job for its file (the
    database's unique index refuses the whole statement), each is requeued in a savepoint of
    its own, and that one is refused with `ActiveJobExistsError`."""
    moves = [
        Move(
            pk,
            states.PENDING,
            reason=reason,
            details=_requeue_details(priority),
            force=force,
            prepare=_requeue_prepare(priority),
        )
        for pk in job_ids
    ]
    with transaction.atomic():
        try:
            with transaction.atomic():
                outcome = jobs_transition(moves, actor=actor)
        except (IntegrityError, ActiveJobExistsError):
            outcome = BatchOutcome()
            for pk in job_ids:
                try:
                    kwargs = {"reason": reason, "force": force, "priority": priority}
                    outcome.moved[pk] = job_requeue(job_id=pk, actor=actor, **kwargs)
                except ApplicationError as error:
                    outcome.refused[pk] = error
        if outcome.moved:
            notify_due()
    return outcome


def jobs_set_priority(
    *, job_ids: Collection[UUID], priority: Priority, actor: Actor, reason: str = ""
) -> BatchOutcome:
    """Change the priority of active jobs in one transaction, each change an audit row (the
    status unchanged). A terminal job is refused: nothing of it is left to dispatch."""
    priority = Priority(priority)
    moves = [_priority_move(pk, priority, reason) for pk in job_ids]
    with transaction.atomic():
        return jobs_transition(moves, actor=actor)


def _priority_move(job_id: UUID, priority: Priority, reason: str) -> Move:
    details = {"priority_to": priority.code}

    def change(job: ExtractionJob) -> None:
        details["priority_from"] = Priority(job.priority).code
        job.priority = priority

    return Move(
        job_id,
        None,
        expected_from=states.ACTIVE,
        reason=reason or f"Priority set to {priority.code}",
        details=details,
        prepare=change,
        audited=True,
    )


def cancel_remote_on_commit(job: ExtractionJob) -> None:
    """Ask the extractor to drop the job too (best effort) once our change has committed."""
    if job.external_url:
        transaction.on_commit(partial(enqueue_cancel_at_extractor, job.id))


def job_cancel(*, job_id: UUID | str, actor: Actor, reason: str = "") -> ExtractionJob:
    """Cancel an active job, and the extractor's copy of it (best effort, after commit).
    Refused (`InvalidTransitionError`) once the job is terminal."""
    with transaction.atomic():
        job = job_transition(job_id=job_id, to_status=states.CANCELLED, actor=actor, reason=reason)
        cancel_remote_on_commit(job)
    return job


def time_out(job: ExtractionJob) -> None:
    """The `prepare` of a move to `timed_out`: refused before the deadline."""
    if job.deadline_at is None or job.deadline_at > timezone.now():
        raise JobMovedOnError(f"Job {job.id} has not reached its deadline.")
    job.error_code = ErrorCode.DEADLINE_EXCEEDED
    job.error_message = f"Not finished by its deadline {moment(job.deadline_at)}."


def job_time_out(*, job_id: UUID | str) -> ExtractionJob:
    """→ timed_out once the deadline has passed, from a status a deadline reaps (another is
    refused as moved on); the extractor is asked to cancel."""
    with transaction.atomic():
        job = job_transition(
            job_id=job_id,
            to_status=states.TIMED_OUT,
            actor=SYSTEM,
            reason="Deadline passed",
            expected_from=states.REAPED_AT_DEADLINE,
            prepare=time_out,
        )
        cancel_remote_on_commit(job)
    return job


HAND_BACK_REASON = (
    "Submission lease expired; the job will be submitted again with the same idempotency key."
)


def hand_back(job: ExtractionJob) -> None:
    """The `prepare` of submitting → pending after the lease expired (the worker died or hung):
    refused while the lease is live."""
    if job.lease_expires_at and job.lease_expires_at > timezone.now():
        raise JobMovedOnError(f"Job {job.id} still holds a live lease.")
    job.lease_expires_at = None
    job.due_at = timezone.now()


def job_hand_back_expired_lease(*, job_id: UUID | str) -> ExtractionJob:
    """submitting → pending after the lease expired. The next submission reuses the idempotency
    key of this attempt; the history says so."""
    return job_transition(
        job_id=job_id,
        to_status=states.PENDING,
        actor=SYSTEM,
        reason=HAND_BACK_REASON,
        details={"resubmission": True},
        expected_from={states.SUBMITTING},
        prepare=hand_back,
    )
