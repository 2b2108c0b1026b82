"""Batches: the files of one grant request, tracked as one unit. Creating one (with its first
jobs), adding jobs while it is open, closing it, cancelling its active jobs, requeueing its
failed ones. Every change of a job goes through the job services (`creation`, `transitions`,
`operations`), each audited per job; `batch_completion` publishes `batch.completed`.

Locks: adding jobs locks the batch's row (FOR NO KEY UPDATE) to check that it is open, and so
do closing and cancelling: an add never slips in after a close. Job transitions never touch
the row (see `batch_completion`)."""

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobtracking import batch_states, states
from jobtracking.errors import (
    BatchClosedError,
    BatchFinishedError,
    BatchNotFoundError,
    BatchReferenceExistsError,
    IdempotencyKeyReusedError,
)
from jobtracking.models import Batch, ExtractionJob
from jobtracking.services.batch_completion import batch_events_write, batches_complete_on_commit
from jobtracking.services.creation import BulkOutcome, NewJob, job_create_many
from jobtracking.services.operations import cancel_remote_on_commit, jobs_requeue
from jobtracking.services.transitions import Actor, BatchOutcome, Move, jobs_transition

# Jobs moved per statement by a batch's cancel (a statement's parameters are bounded).
CHUNK = 500


@dataclass(frozen=True, kw_only=True)
class NewBatch:
    """What a creator gives for a new batch (its jobs come apart, as `NewJob`s)."""

    client_reference: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    close: bool = False
    # From the request's Idempotency-Key header (`batch_create`).
    idempotency_key: str | None = None
    request_fingerprint: str = ""


@dataclass(frozen=True)
class BatchCreated:
    batch: Batch
    outcomes: list[BulkOutcome]
    created: bool  # False: an idempotent replay (no outcomes)


def batch_replayed(new: NewBatch, *, user: AbstractBaseUser | None) -> Batch | None:
    """The batch an earlier request with `new`'s Idempotency-Key created, if any; a reuse of
    the key with another request is refused (`IdempotencyKeyReusedError`)."""
    if not new.idempotency_key:
        return None
    batch = Batch.objects.filter(requested_by=user, idempotency_key=new.idempotency_key).first()
    if batch is not None and batch.request_fingerprint != new.request_fingerprint:
        raise IdempotencyKeyReusedError(
            f"Idempotency-Key {new.idempotency_key!r} was used for a different request "
            f"(batch {batch.pk}).",
            batch_id=str(batch.pk),
        )
    return batch


def _reference_taken(user: AbstractBaseUser | None, reference: str | None) -> None:
    if reference is None:
        return
    taken = Batch.objects.filter(requested_by=user, client_reference=reference).first()
    if taken is not None:
        raise BatchReferenceExistsError(
            f"A batch with client_reference {reference!r} exists already: {taken.pk}.",
            batch_id=str(taken.pk),
        )


def batch_create(new: NewBatch, items: list[NewJob], *, actor: Actor) -> BatchCreated:
    """Create a batch with its first jobs (each item's outcome as `job_create_many` gives it)
    and its `batch.created` event, in one transaction; closed at once with `new.close`. With an
    Idempotency-Key, a replay returns the batch as it is (created=False) and a reuse with
    another request is refused; a client_reference the client used before is refused with
    `BatchReferenceExistsError`. Concurrent twins are settled by the unique constraints."""
    user = actor.user
    if existing := batch_replayed(new, user=user):
        return BatchCreated(existing, [], False)
    _reference_taken(user, new.client_reference)
    now = timezone.now()
    try:
        with transaction.atomic():
            batch = Batch.objects.create(
                requested_by=user,
                client_reference=new.client_reference,
                metadata=new.metadata,
                idempotency_key=new.idempotency_key,
                request_fingerprint=new.request_fingerprint,
                created_at=now,
                closed_at=now if new.close else None,
            )
            outcomes = job_create_many(items, actor=actor, batch=batch) if items else []
            batch_events_write([batch], states.BATCH_CREATED)
            if new.close:
                batches_complete_on_commit([batch.pk])
    except IntegrityError:
        if existing := batch_replayed(new, user=user):
            return BatchCreated(existing, [], False)
        _reference_taken(user, new.client_reference)
        raise
    return BatchCreated(batch, outcomes, True)


def _locked(batch_id: UUID | str) -> Batch:
    batch = (
        Batch.objects.select_for_update(no_key=True, of=("self",))
        .select_related("requested_by")
        .filter(pk=batch_id)
        .first()
    )
    if batch is None:
        raise BatchNotFoundError(f"No batch {batch_id}.")
    return batch


def _status(batch: Batch) -> str:
    """The batch's status now (`batch_states.batch_status`), its jobs looked at only when its
    row does not say it."""
    closed, cancelled = batch.closed_at is not None, batch.cancelled_at is not None
    jobs = ExtractionJob.objects.filter(batch=batch)
    active = closed and not cancelled and jobs.filter(status__in=sorted(states.ACTIVE)).exists()
    failures = (
        closed
        and not cancelled
        and not active
        and jobs.filter(status__in=sorted(states.FAILURES)).exists()
    )
    return batch_states.batch_status(
        closed=closed, cancelled=cancelled, active=active, failures=failures
    )


def batch_add_jobs(*, batch_id: UUID | str, items: list[NewJob], actor: Actor) -> list[BulkOutcome]:
    """Create jobs in an open batch (`job_create_many`'s outcomes); a closed or cancelled batch
    refuses them all (`BatchClosedError`). The batch's row lock makes a concurrent close wait
    for the jobs, or the jobs for the close."""
    with transaction.atomic():
        batch = _locked(batch_id)
        if not batch_states.may(batch_states.ADD_JOBS, _status(batch)):
            raise BatchClosedError(f"Batch {batch.pk} is closed: it takes no more jobs.")
        return job_create_many(items, actor=actor, batch=batch)


def batch_close(*, batch_id: UUID | str) -> Batch:
    """Close the batch: it takes no more jobs, and completes (`batch.completed`) once its jobs
    have all ended, at once if they have. Closing a closed batch changes nothing."""
    with transaction.atomic():
        batch = _locked(batch_id)
        if batch.closed_at is None:
            batch.closed_at = timezone.now()
            batch.save(update_fields=["closed_at"])
            batches_complete_on_commit([batch.pk])
    return batch


def _chunks(ids: list[UUID]) -> Iterable[list[UUID]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def batch_cancel(*, batch_id: UUID | str, actor: Actor, reason: str = "") -> BatchOutcome:
    """Cancel the batch: close it, cancel each of its active jobs through the state machine
    (each audited, and cancelled at its extractor after commit), and publish `batch.cancelled`
    with the counts after, all in one transaction. A job that ended meanwhile is refused and
    left as it is. Cancelling a cancelled batch cancels what is active again, with no second
    event."""
    with transaction.atomic():
        batch = _locked(batch_id)
        if not batch_states.may(batch_states.CANCEL, status := _status(batch)):
            raise BatchFinishedError(
                f"Batch {batch.pk} is {status.replace('_', ' ')}: every job in it has ended, so "
                "there is nothing to cancel."
            )
        first = batch.cancelled_at is None
        now = timezone.now()
        batch.closed_at = batch.closed_at or now
        batch.cancelled_at = batch.cancelled_at or now
        batch.save(update_fields=["closed_at", "cancelled_at"])
        active = list(
            ExtractionJob.objects.filter(batch=batch, status__in=sorted(states.ACTIVE))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        outcome = BatchOutcome()
        for chunk in _chunks(active):
            moves = [
                Move(pk, states.CANCELLED, expected_from=states.ACTIVE, reason=reason)
                for pk in chunk
            ]
            moved = jobs_transition(moves, actor=actor)
            outcome.moved |= moved.moved
            outcome.refused |= moved.refused
        for job in outcome.moved.values():
            cancel_remote_on_commit(job)
        if first:
            batch_events_write([batch], states.BATCH_CANCELLED)
    return outcome


def batch_requeue(
    *, batch_id: UUID | str, actor: Actor, reason: str = "", force: bool = False, priority=None
) -> BatchOutcome:
    """Requeue the batch's jobs that ended without their result (failed, timed out,
    cancelled) and, with `force`, its succeeded ones, through `jobs_requeue` (each audited, each
    refused as `job_requeue` would refuse it). The batch is reopened by its jobs' requeue
    (`batch_completion.batches_reopen`): it completes, and says so, again."""
    statuses = states.TERMINAL if force else states.TERMINAL - {states.SUCCEEDED}
    batch = Batch.objects.filter(pk=batch_id).only("pk").first()
    if batch is None:
        raise BatchNotFoundError(f"No batch {batch_id}.")
    ended = list(
        ExtractionJob.objects.filter(batch=batch, status__in=sorted(statuses))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    outcome = BatchOutcome()
    for chunk in _chunks(ended):
        requeued = jobs_requeue(
            job_ids=chunk, actor=actor, reason=reason, force=force, priority=priority
        )
        outcome.moved |= requeued.moved
        outcome.refused |= requeued.refused
    return outcome
