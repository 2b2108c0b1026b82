"""The worker's moves, in batches. A batch task (`tasks.process_jobs`) runs three steps:

1. `jobs_start`, one transaction: consume the batch's claims; time out overdue jobs; hand back
   expired submission leases; give pending jobs an identical document's result where their
   extractor allows it (`services.reuse`: no call), or let them wait a round for the result of
   an identical job in flight; hold jobs their client's usage budget has no room for
   (`services.budgets`); take submission leases within the extractor's in-flight cap and
   submission rate; reserve poll slots within its poll rate. Jobs that must wait get a later
   `due_at` and the dispatcher hands them out again then.
2. The extractor calls, concurrently, outside any transaction (`tasks.py`).
3. `jobs_record`, one transaction: every call's outcome as a move through `jobs_transition`
   (compare-and-set per job: the lease token, the status the worker saw), results stored.

In-flight cap: only the lease step takes a per-extractor advisory lock (PostgreSQL) before it
counts the extractor's in-flight jobs, so no other transition, and no job insert, ever waits on
it. On SQLite every write transaction is serialized anyway (`IMMEDIATE`).

Rate limits are shared by every worker on every machine through one `RateSlot` row per extractor
and kind (submit, poll): each reservation hands out evenly spaced call times (no burst, at most
`HORIZON` ahead) and moves the row's `next_free_at` past them. The call goes out at its time.
"""

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from extraction.clients.base import DocumentFacts
from extraction.errors import ErrorCode
from extraction.models import Extractor
from extraction.registry import service_fetches_source
from jobtracking import states
from jobtracking.errors import JobMovedOnError
from jobtracking.infra.queue import enqueue_cancel_at_extractor
from jobtracking.models import (
    ExtractionJob,
    ExtractionResult,
    ExtractorHealth,
    FileFactsOrigin,
    Priority,
    RateSlot,
)
from jobtracking.priorities import lane_rate, pending_priorities, split, submit_lanes
from jobtracking.services.budgets import budget_gate
from jobtracking.services.circuits import circuit_gate
from jobtracking.services.operations import HAND_BACK_REASON, hand_back, time_out
from jobtracking.services.results import Result, result_row
from jobtracking.services.reuse import jobs_reuse
from jobtracking.services.transitions import SYSTEM, BatchOutcome, Move, jobs_transition

logger = logging.getLogger(__name__)

IN_FLIGHT_LOCK = 0x6A6F62  # advisory lock namespace ("job"); the second key is the extractor id
HORIZON = timedelta(seconds=1)
# Errors of the database itself: no job's data causes them, so no job is failed for them.
CONNECTION_ERRORS = (OperationalError, InterfaceError)


@dataclass
class Planned:
    """A job whose extractor call may go out at `at`."""

    job: ExtractionJob
    at: datetime


@dataclass
class StartedBatch:
    submits: list[Planned] = field(default_factory=list)
    polls: list[Planned] = field(default_factory=list)
    # Each extractor's circuit as the batch found it (None: never failed).
    health: dict[int, ExtractorHealth | None] = field(default_factory=dict)


# Step 1


def jobs_start(*, job_ids: Collection[UUID | str]) -> StartedBatch:
    """Consume the claims of `job_ids` and decide, in one transaction, what each job does now.
    A job locked by someone else, or whose claim is gone (a redelivered task), is skipped: its
    claim lease brings it back if needed."""
    with transaction.atomic():
        jobs = list(
            ExtractionJob.objects.select_for_update(skip_locked=True, of=("self",))
            # As `lock_jobs` reads them: a timed-out job's event names its requester.
            .select_related("extractor", "requested_by")
            .filter(pk__in=job_ids, claimed_at__isnull=False)
            .order_by("pk")
        )
        if not jobs:
            return StartedBatch()
        now = timezone.now()
        moves = [Move(job.pk, None, prepare=_release_claim) for job in jobs]
        to_lease, to_poll = defaultdict(list), defaultdict(list)
        handed_back: defaultdict[int, Counter[int]] = defaultdict(Counter)  # by priority
        for job in jobs:
            if job.deadline_at and job.deadline_at <= now:
                moves.append(_time_out_move(job))
            elif job.status_id == states.SUBMITTING:
                if job.lease_expires_at and job.lease_expires_at > now:
                    continue  # a live lease: its worker is still on it
                moves.append(_hand_back_move(job))
                handed_back[job.extractor_id][job.priority] += 1
                to_lease[job.extractor].append(job)
            elif job.status_id == states.PENDING:
                to_lease[job.extractor].append(job)
            else:
                to_poll[job.extractor].append(job)
        # Before the leases, circuits and rates: a reused result calls no extractor.
        reuse = jobs_reuse(to_lease, now)
        moves += reuse.moves
        moves += [defer_move(job, now + _in_flight_wait()) for job in reuse.waiting]
        to_lease = _without(to_lease, reuse.taken)
        started = StartedBatch()
        moves += _hold_behind_circuits(to_lease, to_poll, now, started)
        moves += budget_gate(to_lease, now)
        for extractor, candidates in to_lease.items():
            moves += _lease_moves(extractor, candidates, handed_back[extractor.pk], now, started)
        for extractor, candidates in to_poll.items():
            slots, free_at = reserve_slots(extractor, RateSlot.POLL, len(candidates), now)
            started.polls += [Planned(job, at) for job, at in zip(candidates, slots, strict=False)]
            moves += [defer_move(job, free_at) for job in candidates[len(slots) :]]
        outcome = jobs_transition(moves, actor=SYSTEM, locked={job.pk: job for job in jobs})
        reuse.store(outcome)
    started.submits = [p for p in started.submits if p.job.pk not in outcome.refused]
    started.polls = [p for p in started.polls if p.job.pk not in outcome.refused]
    return started


def _without(
    by_extractor: dict[Extractor, list[ExtractionJob]], taken: Collection[UUID]
) -> dict[Extractor, list[ExtractionJob]]:
    """The jobs not `taken`, by extractor; an extractor left with none is left out (no lease
    step, no circuit look-up for it)."""
    left = {e: [job for job in jobs if job.pk not in taken] for e, jobs in by_extractor.items()}
    return {extractor: jobs for extractor, jobs in left.items() if jobs}


def _hold_behind_circuits(
    to_lease: dict[Extractor, list[ExtractionJob]],
    to_poll: dict[Extractor, list[ExtractionJob]],
    now: datetime,
    started: StartedBatch,
) -> list[Move]:
    """Jobs of an extractor whose circuit is open or paused wait until it may be called again
    (no call, no attempt spent); when a probe is due, one of them goes as the probe, a poll
    rather than a submission."""
    extractors = set(to_lease) | set(to_poll)
    found = ExtractorHealth.objects.in_bulk([e.pk for e in extractors])
    moves = []
    for extractor in extractors:
        health = started.health[extractor.pk] = found.get(extractor.pk)
        gate = circuit_gate(health, now)
        if gate.hold_until is None:
            continue
        polls, leases = to_poll.pop(extractor, []), to_lease.pop(extractor, [])
        if gate.probe and polls:
            to_poll[extractor], polls = polls[:1], polls[1:]
        elif gate.probe:
            to_lease[extractor], leases = leases[:1], leases[1:]
        moves += [defer_move(job, gate.hold_until) for job in polls + leases]
    return moves


def _lease_moves(
    extractor: Extractor,
    candidates: list[ExtractionJob],
    handed_back: Counter[int],
    now: datetime,
    started: StartedBatch,
) -> list[Move]:
    """Leases for as many candidates as the extractor's in-flight cap and submission rate allow,
    priority by priority (`jobtracking.priorities`); the others are deferred."""
    by_priority = defaultdict(list)
    for job in candidates:
        by_priority[job.priority].append(job)
    waiting = set(by_priority)
    if extractor.max_in_flight or extractor.rate_limit(RateSlot.SUBMIT):
        waiting |= pending_priorities(extractor)
    wanted = {priority: len(jobs) for priority, jobs in by_priority.items()}
    rooms = _in_flight_rooms(extractor, wanted, handed_back, waiting)
    moves = []
    for priority, jobs in sorted(by_priority.items()):
        room = rooms[priority]
        lanes = submit_lanes(priority, waiting)
        slots, free_at = reserve_slots(extractor, RateSlot.SUBMIT, room, now, lanes)
        for job, at in zip(jobs, slots, strict=False):
            moves.append(_lease_move(job, extractor, now))
            started.submits.append(Planned(job, at))
        # Left over by the in-flight cap (all `room` had slots) or by the rate limit.
        wait_until = now + _in_flight_wait() if len(slots) == room else free_at
        moves += [defer_move(job, wait_until) for job in jobs[len(slots) :]]
    return moves


def _release_claim(job: ExtractionJob) -> None:
    job.claimed_at = None


def _time_out_move(job: ExtractionJob) -> Move:
    cancel = partial(enqueue_cancel_at_extractor, job.pk) if job.external_url else None
    return Move(
        job.pk,
        states.TIMED_OUT,
        expected_from=states.ACTIVE,
        reason="Deadline passed",
        prepare=time_out,
        on_commit=cancel,
    )


def _hand_back_move(job: ExtractionJob) -> Move:
    return Move(
        job.pk,
        states.PENDING,
        expected_from={states.SUBMITTING},
        reason=HAND_BACK_REASON,
        details={"resubmission": True},
        prepare=hand_back,
    )


def _lease_move(job: ExtractionJob, extractor: Extractor, now: datetime) -> Move:
    """pending → submitting: the worker may now call the extractor. The lease (and `due_at`)
    end after the extractor's request timeout plus a margin, and the source's fetch where the
    service fetches it; then the job is handed back."""

    def take_lease(job: ExtractionJob) -> None:
        job.submit_attempts += 1
        margin = timedelta(seconds=settings.JOBS_SUBMIT_LEASE_MARGIN_SECONDS)
        if job.source_url and service_fetches_source(extractor.adapter):
            margin += timedelta(seconds=2 * settings.JOBS_SOURCE_FETCH_TIMEOUT_SECONDS)
        job.lease_expires_at = job.due_at = now + extractor.request_timeout + margin

    return Move(job.pk, states.SUBMITTING, expected_from={states.PENDING}, prepare=take_lease)


def defer_move(job: ExtractionJob, until: datetime) -> Move:
    """No room (in-flight cap), no rate slot, no circuit or a twin's result to wait for now:
    look again at `until`."""

    def defer(job: ExtractionJob) -> None:
        job.due_at = until

    return Move(job.pk, None, prepare=defer)


def _in_flight_wait() -> timedelta:
    return timedelta(seconds=settings.JOBS_IN_FLIGHT_RETRY_SECONDS)


def _in_flight_rooms(
    extractor: Extractor, wanted: dict[int, int], handed_back: dict[int, int], waiting: set[int]
) -> dict[int, int]:
    """How many jobs of each priority may take a lease under the extractor's `max_in_flight`:
    the cap is split between the priorities in flight or waiting (`priorities.split`)."""
    if not extractor.max_in_flight:
        return dict(wanted)
    if connection.vendor == "postgresql":
        # Held to the end of this transaction: two lease steps for one extractor count in turn.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [IN_FLIGHT_LOCK, extractor.pk])
    in_flight = ExtractionJob.objects.filter(
        extractor=extractor, status__in=sorted(states.IN_FLIGHT)
    )
    running = Counter(dict(in_flight.order_by().values_list("priority").annotate(Count("pk"))))
    # Jobs handed back in this same step are still counted as submitting.
    running.subtract(handed_back)
    cap = extractor.max_in_flight
    shares = split(cap, {p: running[p] + (cap if p in waiting else 0) for p in Priority.values})
    free = cap - sum(running.values())
    rooms = {}
    for priority in sorted(wanted):
        rooms[priority] = max(0, min(wanted[priority], shares[priority] - running[priority], free))
        free -= rooms[priority]
    return rooms


def reserve_slots(
    extractor: Extractor,
    kind: str,
    wanted: int,
    now: datetime,
    lanes: tuple[str, ...] = (RateSlot.SHARED, RateSlot.RESERVED),
) -> tuple[list[datetime], datetime]:
    """Call times for up to `wanted` calls of `kind` under the extractor's rate, booked from
    `lanes` in turn (each carries its share of the rate, `priorities.lane_rate`), spaced evenly
    within a lane and no later than `HORIZON` from now; and when the next slot after them is
    free. Without a rate limit every call may go now. Call inside a transaction."""
    rate = extractor.rate_limit(kind)
    if not rate or not wanted:
        return [now] * wanted, now
    slots, frees = [], []
    for lane in lanes:
        if rate_of_lane := lane_rate(rate, lane):
            booked, free_at = _book(extractor, kind, lane, rate_of_lane, wanted - len(slots), now)
            slots += booked
            frees.append(free_at)
    # A lane with no share of the rate (JOBS_PRIORITY_RESERVED_SHARE=0) never frees up.
    return sorted(slots), min(frees, default=now + _in_flight_wait())


def _book(
    extractor: Extractor, kind: str, lane: str, rate: float, wanted: int, now: datetime
) -> tuple[list[datetime], datetime]:
    slot = _locked_slot(extractor, kind, lane, now)
    start = max(slot.next_free_at, now)
    interval = timedelta(seconds=1 / rate)
    room = math.floor((now + HORIZON - start) / interval) + 1 if start <= now + HORIZON else 0
    granted = max(0, min(wanted, room))
    if granted:
        slot.next_free_at = start + granted * interval
        slot.save(update_fields=["next_free_at"])
    return [start + n * interval for n in range(granted)], max(slot.next_free_at, now)


def _locked_slot(extractor: Extractor, kind: str, lane: str, now: datetime) -> RateSlot:
    slots = RateSlot.objects.select_for_update().filter(extractor=extractor, kind=kind, lane=lane)
    slot = slots.first()
    if slot is None:
        RateSlot.objects.get_or_create(
            extractor=extractor, kind=kind, lane=lane, defaults={"next_free_at": now}
        )
        slot = slots.get()
    return slot


def reserve_fetch_slots(extractor: Extractor, wanted: int) -> list[datetime]:
    """Result fetches count against the poll rate; those beyond the horizon go out at once
    after the granted ones (a result is never left behind for a rate limit)."""
    now = timezone.now()
    with transaction.atomic():
        slots, free_at = reserve_slots(extractor, RateSlot.POLL, wanted, now)
    return slots + [free_at] * (wanted - len(slots))


# Step 3: each builder turns one call's outcome into a move; `jobs_record` applies them.


def _check_lease(job: ExtractionJob, lease_token: int) -> None:
    # The lease token is the submit attempt number that took the lease: if the lease expired and
    # another worker took a new one, this worker's result is no longer wanted.
    if job.submit_attempts != lease_token:
        raise JobMovedOnError(f"Job {job.id} lease {lease_token} was taken over.")


def submitted_move(
    job_id: UUID,
    *,
    lease_token: int,
    external_job_id: str,
    external_url: str,
    request_id: str,
    first_poll_in: timedelta,
    remote_ttl: timedelta | None,
    document: DocumentFacts | None = None,
) -> Move:
    """submitting → submitted: the extractor accepted the job. Its poll location is stored in
    this same transaction, so polling resumes after any restart; so are the facts of the
    document the service fetched and submitted (`document`), if it did."""

    def prepare(job: ExtractionJob) -> None:
        _check_lease(job, lease_token)
        _learn_document(job, document, FileFactsOrigin.SERVICE)
        now = timezone.now()
        job.external_job_id = external_job_id[:255]
        job.external_url = external_url[:2000]
        job.external_request_id = request_id[:100]
        job.lease_expires_at = None
        job.due_at = now + first_poll_in
        job.remote_expires_at = now + remote_ttl if remote_ttl else None

    return Move(
        job_id,
        states.SUBMITTED,
        expected_from={states.SUBMITTING},
        details={"external_job_id": external_job_id, "request_id": request_id},
        prepare=prepare,
    )


def fail_move(
    job_id: UUID,
    *,
    expected_from: Collection[str],
    code: ErrorCode,
    message: str,
    details: dict[str, Any] | None = None,
    lease_token: int | None = None,
    remote: tuple[str, int] | None = None,
    billed_pages: int | None = None,
) -> Move:
    """→ failed with an error code from the fixed vocabulary; `remote`: the extractor's final
    word, when it reported the failure; `billed_pages`: the pages it says it billed."""

    def prepare(job: ExtractionJob) -> None:
        if lease_token is not None:
            _check_lease(job, lease_token)
        job.error_code = code
        job.error_message = message[:2000]

    return Move(
        job_id,
        states.FAILED,
        expected_from=expected_from,
        reason=message[:500],
        details={"error_code": code, **(details or {})},
        prepare=prepare,
        remote=remote,
        billed_pages=billed_pages,
    )


def submit_retry_move(
    job_id: UUID,
    *,
    lease_token: int,
    max_attempts: int,
    error: str,
    http_status: int | None,
    delay: timedelta,
) -> Move:
    """submitting → pending after a transient fault, to try again after `delay`; → failed
    (`extractor_unavailable`) once `max_attempts` submissions are spent. The lease token is the
    number of the attempt that just failed."""
    details = {"error": error, "http_status": http_status, "submit_attempts": lease_token}
    if lease_token >= max_attempts:
        return fail_move(
            job_id,
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

    return Move(
        job_id,
        states.PENDING,
        expected_from={states.SUBMITTING},
        reason=f"Transient fault; retrying in {delay.total_seconds():.1f}s",
        details=details,
        prepare=prepare,
    )


def submit_hold_move(
    job_id: UUID, *, lease_token: int, error: str, http_status: int | None, until: datetime
) -> Move:
    """submitting → pending after a transient fault while the extractor's circuit is open: the
    attempt is given back (the outage is not the job's fault), and the job waits for the
    circuit."""
    details = {"error": error, "http_status": http_status, "circuit": "open"}

    def prepare(job: ExtractionJob) -> None:
        _check_lease(job, lease_token)
        job.submit_attempts -= 1
        job.lease_expires_at = None
        job.due_at = until

    return Move(
        job_id,
        states.PENDING,
        expected_from={states.SUBMITTING},
        reason="Extractor unavailable (circuit open): waiting for it, no attempt spent",
        details=details,
        prepare=prepare,
    )


def _record_poll(
    job: ExtractionJob, raw_status: str, progress: int | None, next_poll_in: timedelta | None
) -> None:
    job.poll_count += 1
    job.poll_error_count = 0
    job.external_status = raw_status[:50]
    if progress is not None:
        job.progress = max(0, min(100, progress))
    if next_poll_in is not None:
        job.due_at = timezone.now() + next_poll_in


def poll_move(
    job_id: UUID,
    *,
    seen_status: str,
    to_status: str | None,
    raw_status: str,
    progress: int | None,
    next_poll_in: timedelta | None,
    billed_pages: int | None = None,
) -> Move:
    """A poll's answer: counted, the extractor's word and progress kept, the error count reset,
    the next poll scheduled. `to_status` is processing (it started running), cancelled (by the
    extractor, which may say what it billed: `billed_pages`) or None (no change of status)."""
    reason = "Cancelled by the extractor" if to_status == states.CANCELLED else ""
    details = {"external_status": raw_status, "progress": progress} if to_status else None
    return Move(
        job_id,
        to_status,
        expected_from={seen_status},
        reason=reason,
        details=details,
        prepare=lambda job: _record_poll(job, raw_status, progress, next_poll_in),
        remote=(raw_status, progress or 0) if to_status == states.CANCELLED else None,
        billed_pages=billed_pages,
    )


def poll_error_move(
    job: ExtractionJob, *, error: str, http_status: int | None, next_poll_in: timedelta
) -> Move:
    """A transient poll fault: counted, polled again later; past the extractor's
    `max_poll_errors` the job fails with `extractor_unavailable`."""
    if job.poll_error_count + 1 >= job.extractor.max_poll_errors:
        return fail_move(
            job.pk,
            expected_from={job.status_id},
            code=ErrorCode.EXTRACTOR_UNAVAILABLE,
            message=f"Gave up after {job.poll_error_count + 1} failed polls: {error}",
            details={"error": error, "http_status": http_status},
        )

    def prepare(job: ExtractionJob) -> None:
        job.poll_error_count += 1
        job.due_at = timezone.now() + next_poll_in

    return Move(job.pk, None, expected_from={job.status_id}, prepare=prepare)


def _learn_document(
    job: ExtractionJob, facts: DocumentFacts | None, origin: FileFactsOrigin
) -> None:
    """A URL job records what was extracted, as the extractor reports it or as the service
    measured what it fetched and submitted (an upload's facts are the service's own, taken as
    it was stored, and stay)."""
    if facts is None or not job.source_url or job.upload:
        return
    job.content_type, job.file_size, job.file_sha256 = facts.content_type, facts.size, facts.sha256
    job.file_facts_origin = origin


def succeeded_move(job_id: UUID, *, seen_status: str, raw_status: str, result: Result) -> Move:
    """submitted/processing → succeeded; `jobs_record` stores the result in the same
    transaction."""

    def prepare(job: ExtractionJob) -> None:
        _record_poll(job, raw_status, 100, None)
        _learn_document(job, result.document, FileFactsOrigin.EXTRACTOR)

    return Move(
        job_id,
        states.SUCCEEDED,
        expected_from={seen_status},
        details={"external_status": raw_status, "result_bytes": len(result.body)},
        prepare=prepare,
        remote=(raw_status, 100),
        billed_pages=result.billable_pages,
    )


def jobs_record(
    *,
    moves: list[Move],
    results: dict[UUID, Result],
    unrecordable: Callable[[Move, Exception], Move] | None = None,
) -> BatchOutcome:
    """Apply a batch's outcomes in one transaction, with the results of the jobs that succeeded:
    inline JSON up to `JOBS_RESULT_INLINE_MAX_BYTES`, otherwise a file in Django storage.

    Should that transaction fail (a value the checks before it missed), each job's outcome is
    recorded in a transaction of its own, so that its neighbours are recorded in this same
    round; a job whose own outcome cannot be recorded gets `unrecordable(move, error)` instead
    (its failure, with its own error code), or keeps its claim lease if even that fails."""
    try:
        return _record(moves, results)
    except CONNECTION_ERRORS:
        raise  # the database's fault, not a job's: the claims bring the batch back
    except Exception:
        if unrecordable is None:
            raise
        logger.exception(
            "recording a batch of %d moves failed; recording each job alone", len(moves)
        )
    outcome = BatchOutcome()
    by_job: defaultdict[UUID, list[Move]] = defaultdict(list)
    for move in moves:
        by_job[move.job_id].append(move)
    for job_id, own in by_job.items():
        result = {job_id: results[job_id]} if job_id in results else {}
        if part := _record_alone(own, result, unrecordable):
            outcome.moved.update(part.moved)
            outcome.refused.update(part.refused)
    return outcome


def _record_alone(
    moves: list[Move], result: dict[UUID, Result], unrecordable: Callable[[Move, Exception], Move]
) -> BatchOutcome | None:
    try:
        return _record(moves, result)
    except CONNECTION_ERRORS:
        raise
    except Exception as error:
        logger.warning("job %s: its outcome cannot be recorded: %r", moves[0].job_id, error)
        failure = unrecordable(moves[-1], error)
    try:
        return _record([failure], {})
    except Exception:
        logger.exception("job %s: not even its failure can be recorded", moves[0].job_id)
        return None  # its claim lease brings it back


def _record(moves: list[Move], results: dict[UUID, Result]) -> BatchOutcome:
    def rows(outcome: BatchOutcome) -> list[ExtractionResult]:
        return [
            result_row(outcome.moved[pk], result)
            for pk, result in results.items()
            if pk not in outcome.refused and outcome.moved[pk].status_id == states.SUCCEEDED
        ]

    with transaction.atomic():
        return jobs_transition(moves, actor=SYSTEM, results=rows)


def jobs_claim(ids: list, *, now, lease) -> None:
    """Hand these jobs to a worker (inside the dispatcher's claiming transaction, which holds
    their rows): claimed now, and due again after `lease` should the worker never run them."""
    ExtractionJob.objects.filter(pk__in=ids).update(claimed_at=now, due_at=now + lease)
