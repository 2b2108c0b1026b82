"""The job lifecycle as declarations: each status says what it is, and everything else follows.

Pure Python on purpose, so the lifecycle is tested without a database. `STATUSES` declares every
status once (`Status`): whether it has ended, whether the engine has taken it or works on it when
it is due, whether its deadline times it out, who may move a job into it, and the moves that lead
into it. `lifecycle()` derives from the declarations every set the code uses (`ACTIVE`,
`IN_FLIGHT`, `DISPATCHED`, `REAPED_AT_DEADLINE`…) and the transition table; the model's partial
indexes and its one-active-job constraint, the dispatcher, the reaper and the dashboard read those
sets and never list statuses of their own. Adding a status is one declaration here, plus
`makemigrations` (it rebuilds the indexes and the constraint over the new set) and a data
migration inserting its `JobStatus` row as it is then (docs/architecture.md, Lifecycle).

Each allowed transition maps to the event type it publishes, or to None for the internal lease
moves (taking a job for submission, handing it back after a transient fault), which are audited
but are not client-facing events.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

PENDING = "pending"
SUBMITTING = "submitting"
SUBMITTED = "submitted"
PROCESSING = "processing"
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANCELLED = "cancelled"
HELD = "held"

# Who may move a job into a status: the audit rows' actor types (`models.ActorType`).
CLIENT = frozenset({"api"})
STAFF = frozenset({"admin", "command"})
ENGINE = frozenset({"system"})  # workers, the dispatcher, the reaper
ANYONE = CLIENT | STAFF | ENGINE

EVENT_CREATED = "job.created"
EVENT_REQUEUED = "job.requeued"
EVENT_HELD = "job.held"
EVENT_RELEASED = "job.released"

# A move: (the status it comes from or goes to, the event type it publishes or None).
Edge = tuple[str | None, str | None]


@dataclass(frozen=True)
class Status:
    """One status and what it is. Only the flags that make it differ from a plain active status
    are given; `lifecycle()` checks that they agree with one another."""

    code: str
    label: str
    meaning: str
    # The job has ended: no worker, deadline or dispatcher touches it; a requeue starts it again.
    terminal: bool = False
    # Taken by the engine: on the way to the extractor or at it. Counts against the extractor's
    # `max_in_flight` and in the dashboard's in-flight figures.
    in_flight: bool = False
    # The dispatcher claims the job when its `due_at` passes and a worker acts on it (submits,
    # polls, hands back an expired lease); a job in any other active status waits for a person.
    dispatched: bool = False
    # Timed out once its deadline passes (by the worker that finds it due, or by the reaper).
    reaped_at_deadline: bool = False
    # Terminal only: ended with its result stored (a requeue, which redoes and replaces it,
    # needs force); without it, it is a failure in a batch's figures.
    with_result: bool = False
    # Terminal only: says how the extraction went, so it counts in the success rate (a person's
    # cancel says nothing about it).
    judged: bool = False
    # Terminal only: an end the extractor reports only about a job it worked on (a job it ends
    # so gets its `started_at`; its cancel may come before any work).
    worked_end: bool = False
    # The actor types that may move a job into it.
    set_by: frozenset[str] = ENGINE
    # Moves into it from a named status (None: creation), besides the generated ones.
    entered_from: tuple[Edge, ...] = ()
    # Moves out of it to a named status, besides the generated ones: a new status declares its
    # way back here rather than in the declaration of the status it returns to.
    leads_to: tuple[Edge, ...] = ()


STATUSES: tuple[Status, ...] = (
    Status(
        PENDING,
        "Pending",
        "Created or requeued, waiting to be submitted",
        dispatched=True,
        reaped_at_deadline=True,
        set_by=ANYONE,  # created or requeued by clients and staff; handed back by the engine
        entered_from=((None, EVENT_CREATED), (SUBMITTING, None)),
    ),
    Status(
        HELD,
        "Held",
        "Waiting for room in its client's usage budget: a raised budget or a new month",
        # Not dispatched: it waits for budget room, which `services.budgets` gives it back in
        # its turn. Its deadline does not run meanwhile (a release sets a new one).
        entered_from=((PENDING, EVENT_HELD),),
        leads_to=((PENDING, EVENT_RELEASED),),
    ),
    Status(
        SUBMITTING,
        "Submitting",
        "A worker holds a lease and is sending it to the extractor",
        in_flight=True,
        dispatched=True,
        reaped_at_deadline=True,
        entered_from=((PENDING, None),),
    ),
    Status(
        SUBMITTED,
        "Submitted",
        "The extractor accepted it, not yet running",
        in_flight=True,
        dispatched=True,
        reaped_at_deadline=True,
        entered_from=((SUBMITTING, "job.submitted"),),
    ),
    Status(
        PROCESSING,
        "Processing",
        "The extractor reports it running",
        in_flight=True,
        dispatched=True,
        reaped_at_deadline=True,
        entered_from=((SUBMITTED, "job.processing"),),
    ),
    Status(
        SUCCEEDED,
        "Succeeded",
        "The extractor finished and the result is stored",
        terminal=True,
        with_result=True,
        judged=True,
        worked_end=True,
        # From pending: an identical document's result reused, with no extractor call.
        entered_from=(
            (PENDING, "job.succeeded"),
            (SUBMITTED, "job.succeeded"),
            (PROCESSING, "job.succeeded"),
        ),
    ),
    Status(
        FAILED,
        "Failed",
        "Permanent error, or retries or error budget exhausted",
        terminal=True,
        judged=True,
        worked_end=True,
    ),
    Status(
        TIMED_OUT,
        "Timed out",
        "The job's deadline passed before the extractor finished",
        terminal=True,
        judged=True,
    ),
    Status(
        CANCELLED,
        "Cancelled",
        "Cancelled by a person or client, or by the extractor",
        terminal=True,
        set_by=ANYONE,
    ),
)


@dataclass(frozen=True)
class Lifecycle:
    """Everything derived from a list of declarations. Its field names are the module's
    names in capitals (`ACTIVE`, `TRANSITIONS`…), bound from `lifecycle(STATUSES)`."""

    statuses: tuple[Status, ...]
    all: frozenset[str]
    terminal: frozenset[str]
    active: frozenset[str]
    in_flight: frozenset[str]
    dispatched: frozenset[str]
    reaped_at_deadline: frozenset[str]
    worked_ends: frozenset[str]
    # Ended without the result: a batch counts these as its failures.
    failures: frozenset[str]
    judged: frozenset[str]
    settable_by: Mapping[str, frozenset[str]]
    transitions: Mapping[tuple[str | None, str], str | None]
    needs_force: frozenset[tuple[str, str]]
    event_types: tuple[str, ...]


def _codes(statuses: Iterable[Status], flag: str) -> frozenset[str]:
    return frozenset(status.code for status in statuses if getattr(status, flag))


def _check(statuses: tuple[Status, ...]) -> None:
    codes = [status.code for status in statuses]
    if len(set(codes)) != len(codes):
        raise ValueError(f"A status is declared twice: {codes}")
    for status in statuses:
        ends = ("with_result", "judged", "worked_end")
        if status.terminal and (status.dispatched or status.reaped_at_deadline):
            raise ValueError(f"{status.code}: a terminal status is neither dispatched nor reaped")
        if not status.terminal and any(getattr(status, flag) for flag in ends):
            raise ValueError(f"{status.code}: {'/'.join(ends)} describe terminal statuses only")
        if status.in_flight and not status.dispatched:
            raise ValueError(f"{status.code}: a job in flight is dispatched (polled, handed back)")
        if not status.set_by <= ANYONE:
            raise ValueError(f"{status.code}: unknown actor types {status.set_by - ANYONE}")
        named = {other for other, _ in status.entered_from + status.leads_to} - {None}
        if not named <= set(codes):
            raise ValueError(f"{status.code}: moves name undeclared statuses {named - set(codes)}")


def lifecycle(statuses: Iterable[Status]) -> Lifecycle:
    """Derive the sets and the transition table from `statuses`. A pure function, so a test can
    derive the lifecycle with a status of its own and check every behaviour that follows."""
    statuses = tuple(statuses)
    _check(statuses)
    terminal = _codes(statuses, "terminal")
    active = frozenset(status.code for status in statuses) - terminal
    reaped = _codes(statuses, "reaped_at_deadline")
    with_result = _codes(statuses, "with_result")
    # The declared moves first, in lifecycle order (`event_types` keeps their order), then the
    # generated ones: any active job may fail or be cancelled, only a job its deadline reaps may
    # time out, and any ended job may be requeued.
    table: dict[tuple[str | None, str], str | None] = {}
    for status in statuses:
        table.update({(source, status.code): event for source, event in status.entered_from})
    for status in statuses:
        table.update({(status.code, target): event for target, event in status.leads_to})
    table.update({(code, FAILED): "job.failed" for code in _ordered(statuses, active)})
    table.update({(code, TIMED_OUT): "job.timed_out" for code in _ordered(statuses, reaped)})
    table.update({(code, CANCELLED): "job.cancelled" for code in _ordered(statuses, active)})
    table.update({(code, PENDING): EVENT_REQUEUED for code in _ordered(statuses, terminal)})
    return Lifecycle(
        statuses=statuses,
        all=active | terminal,
        terminal=terminal,
        active=active,
        in_flight=_codes(statuses, "in_flight"),
        dispatched=_codes(statuses, "dispatched"),
        reaped_at_deadline=reaped,
        worked_ends=_codes(statuses, "worked_end"),
        failures=terminal - with_result,
        judged=_codes(statuses, "judged"),
        settable_by={
            actor: frozenset(status.code for status in statuses if actor in status.set_by)
            for actor in sorted(ANYONE)
        },
        transitions=table,
        # Redoing a successful extraction costs money and replaces what clients already read.
        needs_force=frozenset((code, PENDING) for code in with_result),
        event_types=tuple(dict.fromkeys(event for event in table.values() if event)),
    )


def _ordered(statuses: tuple[Status, ...], codes: frozenset[str]) -> list[str]:
    return [status.code for status in statuses if status.code in codes]


LIFECYCLE = lifecycle(STATUSES)
ALL = LIFECYCLE.all
TERMINAL = LIFECYCLE.terminal
ACTIVE = LIFECYCLE.active
IN_FLIGHT = LIFECYCLE.in_flight
DISPATCHED = LIFECYCLE.dispatched
REAPED_AT_DEADLINE = LIFECYCLE.reaped_at_deadline
WORKED_ENDS = LIFECYCLE.worked_ends
FAILURES = LIFECYCLE.failures
JUDGED = LIFECYCLE.judged
SETTABLE_BY = LIFECYCLE.settable_by
TRANSITIONS = LIFECYCLE.transitions
NEEDS_FORCE = LIFECYCLE.needs_force
EVENT_TYPES = LIFECYCLE.event_types
# The module's derived names, each the `Lifecycle` field of the same name in lower case.
DERIVED = tuple(f.name.upper() for f in fields(Lifecycle))

# A batch's events (`services.batches`, `services.batch_completion`), through the same outbox.
BATCH_CREATED = "batch.created"
BATCH_COMPLETED = "batch.completed"
BATCH_CANCELLED = "batch.cancelled"
BATCH_EVENT_TYPES: tuple[str, ...] = (BATCH_CREATED, BATCH_COMPLETED, BATCH_CANCELLED)
# Every type the outbox carries, the feed filters by and webhooks subscribe to.
# A signed audit checkpoint (docs/audit.md): of no job or batch, seen by whoever sees them all.
AUDIT_CHECKPOINT = "audit.checkpoint"
# A client's usage reached its budget's threshold (`services.budgets`): of the client, seen by
# them and by whoever sees every client.
USAGE_THRESHOLD_REACHED = "usage.threshold_reached"
OUTBOX_EVENT_TYPES = EVENT_TYPES + BATCH_EVENT_TYPES + (AUDIT_CHECKPOINT, USAGE_THRESHOLD_REACHED)


def is_allowed(from_status: str | None, to_status: str, *, force: bool = False) -> bool:
    if (from_status, to_status) not in TRANSITIONS:
        return False
    return force or (from_status, to_status) not in NEEDS_FORCE


def may_set(actor_type: str, to_status: str) -> bool:
    """Whether an actor of this type may move a job into `to_status` (its `set_by`)."""
    return to_status in SETTABLE_BY.get(actor_type, frozenset())


def requeue_allowed(from_status: str, *, force: bool = False) -> bool:
    """A requeue starts a new attempt of a job that ended. (submitting → pending is in the table
    too, but as the hand-back of an expired lease, within the same attempt.)"""
    return from_status in TERMINAL and is_allowed(from_status, PENDING, force=force)


def event_type(from_status: str | None, to_status: str) -> str | None:
    return TRANSITIONS[(from_status, to_status)]
