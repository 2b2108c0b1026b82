"""The one writer of job state. Nothing else assigns `ExtractionJob.status`.

`jobs_transition` applies a batch of moves in one transaction: it locks the jobs' rows (only those:
`FOR UPDATE OF` the job table, so the extractor row every job points to is never a shared hot
lock), checks each move against `states.TRANSITIONS` and the status its caller expected, and
writes every surviving job, their `JobStatusChange` audit rows, their `JobEvent` outbox rows
(fanned out to webhooks) and their usage rows at once (`services.moves_written`: one statement
on PostgreSQL). A move that is refused (the job moved on, the table forbids it) is dropped from
the batch with its error; it never fails the others. `job_transition` is the same for one job,
raising the refusal.

The row lock closes the race between two actors (two workers, a worker and a cancel): the second
one sees the first one's status and is refused.
"""

import getpass
import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from itertools import compress
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import DEFERRED
from django.utils import timezone

from jobtracking import states
from jobtracking.audit import chain_change
from jobtracking.errors import (
    ActiveJobExistsError,
    ApplicationError,
    ForceRequiredError,
    InvalidTransitionError,
    JobMovedOnError,
    JobNotFoundError,
)
from jobtracking.events import job_event_payload
from jobtracking.infra.rows import instance
from jobtracking.models import (
    ActorType,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    UsageRecord,
)
from jobtracking.selectors import VIEW_ALL
from jobtracking.services.batch_completion import batches_complete_on_commit, batches_reopen
from jobtracking.services.moves_written import MovesWritten
from jobtracking.services.usage import usage_count_on_commit, usage_row

# Every column but the key. Derived from the model rather than listed, so that no field a move
# sets can be left out of the UPDATE; `_changed` finds those the batch did change.
COLUMNS = tuple(
    field.attname for field in ExtractionJob._meta.concrete_fields if not field.primary_key
)
_DEFERRED = (DEFERRED,) * len(COLUMNS)


@dataclass(frozen=True)
class Actor:
    """Who causes a change: recorded on every audit row."""

    type: ActorType
    user: AbstractBaseUser | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def user_id(self) -> int | None:
        return getattr(self.user, "pk", None)

    @classmethod
    def system(cls) -> "Actor":
        return cls(ActorType.SYSTEM)

    @classmethod
    def command(cls, user: AbstractBaseUser | None = None) -> "Actor":
        return cls(ActorType.COMMAND, user, {"os_user": getpass.getuser()})


SYSTEM = Actor.system()


@dataclass
class Move:
    """One change of one job. `to_status=None` changes fields in place (counters, due times) with
    no audit row unless `audited` (a change people make, such as the priority, is recorded with
    the status unchanged); it is still refused when the job left `expected_from`.

    `prepare` mutates the locked job; it raises an `ApplicationError` to refuse the move, and
    must do so before it changes anything. Every field whose value it changes is saved; it
    assigns a new value rather than editing one in place (a dict in `metadata`), which the
    comparison with the value before cannot see. `on_commit` runs once the transaction has
    committed.
    `remote` is the extractor's final word (its status word, progress) when the move ends the
    job on an answer from it; a job that ends without one says so (no status word, progress 0).
    A move that ends an attempt which reached the extractor records its usage
    (`services.usage`) in the same transaction.
    """

    job_id: UUID
    to_status: str | None
    expected_from: Collection[str] | None = None
    reason: str = ""
    details: dict[str, Any] | None = None
    force: bool = False
    prepare: Callable[[ExtractionJob], None] | None = None
    on_commit: Callable[[], None] | None = None
    audited: bool = False
    remote: tuple[str, int] | None = None
    # The pages the extractor bills for the attempt this move ends (`services.usage`): the
    # result's, or what the extractor said it billed; None when it said nothing.
    billed_pages: int | None = None
    # The pages a reused result saved (`services.reuse`): its source's billed pages. The attempt
    # costs none.
    saved_pages: int | None = None


@dataclass
class BatchOutcome:
    moved: dict[UUID, ExtractionJob] = field(default_factory=dict)
    refused: dict[UUID, ApplicationError] = field(default_factory=dict)


def as_job_id(value: UUID | str) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        raise JobNotFoundError(f"No job {value}.") from None


def lock_jobs(job_ids: Collection[UUID]) -> dict[UUID, ExtractionJob]:
    """Lock the jobs' rows (and only those), in id order so that two batches never deadlock.
    Their extractor and requester come in the same read: an event's payload names both."""
    jobs = (
        ExtractionJob.objects.select_for_update(of=("self",))
        .select_related("extractor", "requested_by")
        .filter(pk__in=job_ids)
        .order_by("pk")
    )
    return {job.pk: job for job in jobs}


def jobs_transition(
    moves: list[Move],
    *,
    actor: Actor,
    locked: dict[UUID, ExtractionJob] | None = None,
    results: Callable[[BatchOutcome], list[ExtractionResult]] | None = None,
) -> BatchOutcome:
    """Apply `moves` in one transaction (see the module docstring); `locked` passes jobs the
    caller has already locked in its own transaction, read with their extractor and requester
    as `lock_jobs` reads them. A job may have several moves; once one is refused, its later
    ones are skipped. `results` gives the result rows to store with the moves, from their
    outcome (the engine's record step): written with the moves' other rows."""
    with transaction.atomic(savepoint=False):
        if locked is None:
            locked = lock_jobs({move.job_id for move in moves})
        return _apply(locked, moves, actor, results)


def _apply(
    locked: dict[UUID, ExtractionJob],
    moves: list[Move],
    actor: Actor,
    results: Callable[[BatchOutcome], list[ExtractionResult]] | None,
) -> BatchOutcome:
    now = timezone.now()
    before = {pk: _values(job) for pk, job in locked.items()}
    outcome = BatchOutcome()
    changes, event_jobs, usage, reactivated = [], [], [], False
    ended_batches, reopened_batches = set(), set()
    for move in moves:
        if move.job_id in outcome.refused:
            continue
        job = locked.get(move.job_id)
        try:
            if job is None:
                raise JobNotFoundError(f"No job {move.job_id}.")
            from_status = job.status_id
            _check(job, move, actor)
            if move.prepare is not None:
                move.prepare(job)
        except ApplicationError as error:
            # The job's earlier moves in this batch stand; this one and its later ones do not.
            outcome.refused[move.job_id] = error
            continue
        job.updated_at = now
        outcome.moved[job.pk] = job
        if move.on_commit is not None:
            transaction.on_commit(move.on_commit)
        if move.to_status is None:
            if move.audited:
                changes.append(_audit_row(job, from_status, actor, move, now))
            continue
        _stamp(job, move, now)
        reactivated = reactivated or from_status in states.TERMINAL
        if row := usage_row(job, move.billed_pages, now, saved_pages=move.saved_pages):
            usage.append(row)
        if job.batch_id and job.status_id in states.TERMINAL:
            ended_batches.add(job.batch_id)
        elif job.batch_id and from_status in states.TERMINAL:
            reopened_batches.add(job.batch_id)
        changes.append(_audit_row(job, from_status, actor, move, now))
        if states.event_type(from_status, move.to_status):
            event_jobs.append((job, states.event_type(from_status, move.to_status)))
    if reopened_batches:
        batches_reopen(reopened_batches)
    # Checked after commit, never here: see `services.batch_completion`.
    batches_complete_on_commit(ended_batches)
    events = [
        instance(JobEvent, job_id=job.pk, type=kind, payload=job_event_payload(job), created_at=now)
        for job, kind in event_jobs
    ]
    jobs = list(outcome.moved.values())
    rows = {JobStatusChange: changes, JobEvent: events, UsageRecord: usage}
    if results is not None:
        rows[ExtractionResult] = results(outcome)
    _write(MovesWritten(jobs, _changed(jobs, before), rows, now), reactivated, actor)
    usage_count_on_commit(usage)
    return outcome


def _check(job: ExtractionJob, move: Move, actor: Actor) -> None:
    current = job.status_id
    if move.expected_from is not None and current not in move.expected_from:
        raise JobMovedOnError(
            f"Job {job.id} is {current}, not {'/'.join(sorted(move.expected_from))}.",
            current_status=current,
        )
    to_status = move.to_status
    if to_status is not None and not states.is_allowed(current, to_status, force=move.force):
        error = (
            ForceRequiredError
            if states.is_allowed(current, to_status, force=True)
            else InvalidTransitionError
        )
        message = f"Job {job.id} cannot go from {current} to {to_status}."
        raise error(message, current_status=current)
    if to_status is not None and not states.may_set(actor.type, to_status):
        raise InvalidTransitionError(
            f"An actor of type {actor.type} cannot move a job to {to_status}.",
            current_status=current,
        )


def _stamp(job: ExtractionJob, move: Move, now) -> None:
    """Set the status and the timestamps and fields that go with it. A job that ends keeps no
    word of the extractor's but its final one: never "running" on a failed job."""
    to_status = job.status_id = move.to_status
    if to_status in states.TERMINAL:
        job.due_at = job.claimed_at = job.lease_expires_at = None
        job.completed_at = now
        status_word, progress = move.remote or ("", 0)
        job.external_status, job.progress = status_word[:50], max(0, min(100, progress))
    elif to_status == states.SUBMITTED:
        job.submitted_at = job.submitted_at or now
    if job.started_at is None and _work_began(move):
        job.started_at = now


def _work_began(move: Move) -> bool:
    """The move shows that the extractor worked on the job: it reports it running, or ends it
    with its own word that it finished or failed it. A quick job goes submitted → succeeded
    without a poll seeing it run, and still gets its `started_at` (when we learnt it). A person's
    cancel or a deadline shows no work."""
    return move.to_status == states.PROCESSING or (
        move.remote is not None and move.to_status in states.WORKED_ENDS
    )


def _audit_row(job: ExtractionJob, from_status: str, actor: Actor, move: Move, now):
    """The move's audit row, linked to the job's chain (the job is locked); the job's new
    head is saved with the job's other changes."""
    change = instance(
        JobStatusChange,
        job_id=job.pk,
        from_status_id=from_status,
        to_status_id=job.status_id,
        attempt=job.attempt,
        changed_at=now,
        actor_type=actor.type,
        actor_id=actor.user_id,
        reason=move.reason,
        details={**actor.details, **(move.details or {})},
    )
    chain_change(change, job)
    return change


def _values(job: ExtractionJob) -> list:
    # Read from the instance's dict, not its attributes: those would load a deferred field with
    # a query per job.
    # (Mapped, not a comprehension: at C speed, for each column of each job of a batch, twice.)
    return list(map(vars(job).get, COLUMNS, _DEFERRED))


def _changed(jobs: list[ExtractionJob], before: dict[UUID, list]) -> list[str]:
    """The columns the batch's one UPDATE writes: the union of what each job changed."""
    changed = set()
    for job in jobs:
        changed.update(compress(COLUMNS, map(operator.ne, _values(job), before[job.pk])))
    return [name for name in COLUMNS if name in changed]


def _write(written: MovesWritten, reactivated: bool, actor: Actor) -> None:
    if not reactivated:
        written.write()
        return
    # Back to active: the partial unique index may find another active job for the file.
    try:
        with transaction.atomic():
            written.write()
    except IntegrityError:
        job = written.jobs[0]
        if len(written.jobs) == 1 and (
            error := active_job_error(job.extractor, job.file_id, viewer=actor.user)
        ):
            raise error from None
        raise


def active_job_error(extractor, file_id: str, *, viewer=None) -> ActiveJobExistsError | None:
    """The 409 for a file that an active job holds on this extractor, or None if none does."""
    active = (
        ExtractionJob.objects.filter(extractor=extractor, file_id=file_id, status__in=states.ACTIVE)
        .only("id", "status", "requested_by")
        .first()
    )
    if active is None:
        return None
    return holder_error(extractor, file_id, active, viewer=viewer)


def holder_error(extractor, file_id: str, holder: ExtractionJob, *, viewer) -> ActiveJobExistsError:
    """One file is extracted once at a time on an extractor, whoever asks (the platform's file
    ids are global). The 409 names the active job only to a caller who may see it (`viewer`
    None: a system or command actor); another client's job is not disclosed."""
    if viewer is None or holder.requested_by_id == viewer.pk or viewer.has_perm(VIEW_ALL):
        return ActiveJobExistsError(
            f"Job {holder.pk} is already {holder.status_id} for file {file_id} on "
            f"{extractor.slug}.",
            job_id=str(holder.pk),
        )
    return ActiveJobExistsError(
        f"Another client's job is already active for file {file_id} on {extractor.slug}; a "
        "file is extracted once at a time on an extractor."
    )


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
    """Move one job to `to_status` (`jobs_transition` for one job). Raises the refusal:
    `JobNotFoundError`, `JobMovedOnError` (it left `expected_from`, so a redelivered task can
    drop its work), `InvalidTransitionError`, `ForceRequiredError` (a succeeded job without
    `force`), or what `prepare` raised. Terminal statuses clear `due_at`, the claim and the lease
    and stamp `completed_at`."""
    pk = as_job_id(job_id)
    move = Move(
        job_id=pk,
        to_status=to_status,
        expected_from=expected_from,
        reason=reason,
        details=details,
        force=force,
        prepare=prepare,
        on_commit=on_commit,
    )
    outcome = jobs_transition([move], actor=actor)
    if pk in outcome.refused:
        raise outcome.refused[pk]
    return outcome.moved[pk]
