"""Monthly usage budgets: a client's pages a calendar month (UTC), for every extractor or for
one (`UsageBudget`). docs/usage.md says it for staff and clients.

- The gate (`budget_gate`, in the worker's lease step `engine.jobs_start`): a job of a client
  with a budget is submitted only while the month's pages used, plus the pages of the client's
  jobs in flight, plus its own, fit within every budget that covers it; else it is `held`. A
  job's pages are what the service knows before submission (`expected_pages`: an uploaded PDF's
  page count, an image's one page) or, unknown, one page, the least a billed attempt costs. A
  job never overtakes an older held job of its client and extractor: they go in their order.
- The bound on overshoot: the lease steps of one client take turns (an advisory lock per
  client, held to the end of their transaction, on every machine), and each counts the jobs the
  others have put in flight. So once the month's usage has reached the budget, nothing more is
  submitted: what a month bills past its budget is at most the pages of the jobs already in
  flight then, beyond what was known of them (a URL job counted as one page, say).
- `budgets_tend` (a schedule, every minute; and at once when staff change a budget) releases
  held jobs in their order while they fit, when a budget was raised or removed or a month
  began, and sends `usage.threshold_reached` once a month when a budget's threshold is reached.
- `budget_refusal`: a client whose budget says `refuse` gets a 403 at creation once that budget
  is used up, instead of jobs that wait.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import partial

from django.db import connection, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    F,
    Min,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from extraction.models import Extractor
from jobtracking import states
from jobtracking.errors import BudgetExhaustedError
from jobtracking.infra.recent import Recent
from jobtracking.infra.wakeup import notify_due
from jobtracking.models import (
    ATTEMPT_STARTED_AT,
    ExtractionJob,
    JobEvent,
    UsageBudget,
    UsageMonthly,
    UsageRecord,
    WhenUsedUp,
    status_in,
)
from jobtracking.services.deliveries import deliveries_fan_out
from jobtracking.services.transitions import SYSTEM, Move, jobs_transition
from jobtracking.usage_selectors import next_month

BUDGET_LOCK = 0x627564  # advisory lock namespace ("bud"); the second key is the client's id
HELD_REASON = "Held: its client's usage budget has no room for it this month"
RELEASED_REASON = "Released: its client's usage budget has room for it"
# Held jobs released in one transaction, at most (the next round takes the rest).
RELEASE_CHUNK = 500
# The clients with a budget that refuses: a process's recent lookup (`API_LOOKUP_CACHE_SECONDS`).
REFUSING_CLIENTS = Recent()


def month_of(now: datetime) -> date:
    return now.astimezone(UTC).date().replace(day=1)


def job_pages(job: ExtractionJob) -> int:
    """The pages the gate counts for a job: known before submission, or one."""
    return job.expected_pages or 1


@dataclass
class Room:
    """What is left of one budget this month: its pages minus those used and in flight."""

    budget: UsageBudget
    used: int
    in_flight: int

    @property
    def left(self) -> int:
        return self.budget.pages - self.used - self.in_flight

    def covers(self, job: ExtractionJob) -> bool:
        return self.budget.extractor_id in (None, job.extractor_id)


def budget_room(
    budget: UsageBudget,
    now: datetime,
    *,
    besides: Iterable = (),
    counted: frozenset[str] = states.IN_FLIGHT,
) -> Room:
    """What is left of `budget` this month (`budget_rooms`)."""
    (room,) = budget_rooms([budget], now, besides=besides, counted=counted)
    return room


def budget_rooms(
    budgets: Sequence[UsageBudget],
    now: datetime,
    *,
    besides: Iterable = (),
    counted: frozenset[str] = states.IN_FLIGHT,
) -> list[Room]:
    """What is left of each of `budgets` this month, counting the jobs in `counted` statuses
    as in flight, but those in `besides` (the batch being decided, whose handed-back jobs are
    still `submitting`). One statement for them all (a row per budget, its sums as correlated
    subqueries), so one snapshot: the month's pages used (the rolled-up month plus the rows not
    yet rolled up) never count a row twice, or miss one, while the rollup moves it. A budget
    removed meanwhile has no room left to report: it is left out."""
    month, deciding = month_of(now), list(besides)

    def used(scope: dict) -> Coalesce:
        client = OuterRef("client_id")
        rolled = UsageMonthly.objects.filter(day=month, client_key=client, **scope)
        fresh = UsageRecord.objects.filter(rolled_up=False, day__gte=month, client=client, **scope)
        return _total(rolled, "client_key", F("pages")) + _total(fresh, "client", F("pages"))

    def in_flight(scope: dict) -> Coalesce:
        flying = ExtractionJob.objects.filter(
            status_in(counted), requested_by=OuterRef("client_id"), **scope
        ).exclude(pk__in=deciding)
        return _total(flying, "requested_by", Coalesce("expected_pages", 1))

    found = (
        UsageBudget.objects.filter(pk__in=[budget.pk for budget in budgets])
        .annotate(used=_by_scope(used), in_flight=_by_scope(in_flight))
        .values_list("pk", "used", "in_flight")
    )
    sums = {pk: (used, in_flight) for pk, used, in_flight in found}
    return [Room(budget, *sums[budget.pk]) for budget in budgets if budget.pk in sums]


def _by_scope(total: Callable[[dict], Coalesce]) -> Case:
    """`total` over the rows a budget covers: its client's, of its extractor if it names one.
    Two subqueries with plain equalities rather than one with an OR, so each finds its rows
    through an index."""
    return Case(
        When(extractor__isnull=True, then=total({})),
        default=total({"extractor_id": OuterRef("extractor_id")}),
    )


def _total(rows: QuerySet, key: str, value) -> Coalesce:
    """The sum of `value` over `rows` (all of one `key`), 0 over none: a scalar subquery."""
    summed = rows.order_by().values(key).annotate(total=Sum(value)).values("total")
    return Coalesce(Subquery(summed, output_field=BigIntegerField()), 0)


def _lock_clients(clients: Iterable[int]) -> None:
    """Take the clients' turns, in id order (two steps never wait on each other crosswise)."""
    if connection.vendor != "postgresql":
        return  # SQLite serializes every write transaction anyway
    with connection.cursor() as cursor:
        for client in sorted(set(clients)):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [BUDGET_LOCK, client])


def _budgets_of(clients: Iterable[int]) -> dict[int, list[UsageBudget]]:
    found = defaultdict(list)
    for budget in UsageBudget.objects.filter(client_id__in=set(clients)).order_by("pk"):
        found[budget.client_id].append(budget)
    return found


def _oldest_held(clients: Iterable[int]) -> dict[tuple[int, int], datetime]:
    """The start of the oldest held attempt of each (client, extractor) that has one."""
    held = (
        ExtractionJob.objects.filter(status=states.HELD, requested_by__in=set(clients))
        .order_by()
        .values_list("requested_by", "extractor")
        .annotate(oldest=Min(ATTEMPT_STARTED_AT))
    )
    return {(client, extractor): oldest for client, extractor, oldest in held}


# The gate


def budget_gate(to_lease: dict[Extractor, list[ExtractionJob]], now: datetime) -> list[Move]:
    """Hold the jobs of `to_lease` that their clients' budgets have no room for (removing them
    from it), inside the lease step's transaction: the hold moves. Counts each job it lets
    through, so a batch never spends a budget twice."""
    candidates = [job for jobs in to_lease.values() for job in jobs]
    budgets = _budgets_of({job.requested_by_id for job in candidates} - {None})
    if not budgets:
        return []
    _lock_clients(budgets)
    # The candidates are not in flight (a handed-back one is still `submitting` in the table);
    # the batch's jobs being polled are, and count.
    deciding = [job.pk for job in candidates]
    rooms = defaultdict(list)
    every = [budget for owned in budgets.values() for budget in owned]
    for room in budget_rooms(every, now, besides=deciding):
        rooms[room.budget.client_id].append(room)
    oldest_held = _oldest_held(budgets)
    moves = []
    for extractor, jobs in to_lease.items():
        kept = []
        for job in jobs:
            covering = [room for room in rooms.get(job.requested_by_id, ()) if room.covers(job)]
            if not covering:
                kept.append(job)
                continue
            waiting_since = oldest_held.get((job.requested_by_id, extractor.pk))
            pages = job_pages(job)
            if (waiting_since and waiting_since < job.attempt_started_at) or any(
                room.left < pages for room in covering
            ):
                moves.append(_hold_move(job, now, covering, pages))
                continue
            for room in covering:
                room.in_flight += pages
            kept.append(job)
        to_lease[extractor] = kept
    return moves


def _hold_move(job: ExtractionJob, now: datetime, covering: list[Room], pages: int) -> Move:
    def hold(job: ExtractionJob) -> None:
        job.held_since, job.due_at = now, None

    return Move(
        job.pk,
        states.HELD,
        expected_from={states.PENDING},
        reason=HELD_REASON,
        details={"pages": pages, "budgets": [_room_details(room) for room in covering]},
        prepare=hold,
    )


def _room_details(room: Room) -> dict:
    return {
        "budget": room.budget.pk,
        "pages": room.budget.pages,
        "used": room.used,
        "in_flight": room.in_flight,
    }


# Releases and thresholds


def budgets_tend(*, client_id: int | None = None, now: datetime | None = None) -> dict[str, int]:
    """Release what the budgets have room for, then send the thresholds reached: the schedule's
    round (every minute), or one client's after staff changed its budget."""
    now = now or timezone.now()
    held = ExtractionJob.objects.filter(status=states.HELD)
    if client_id is not None:
        held = held.filter(requested_by=client_id)
    clients = set(held.order_by().values_list("requested_by", flat=True).distinct())
    released = sum(_release(client, now) for client in sorted(clients, key=lambda c: c or 0))
    return {"released": released, "thresholds": budgets_send_thresholds(now=now)}


def _release(client: int | None, now: datetime) -> int:
    """Release the client's held jobs in their order (per extractor: none overtakes an older
    one) while they fit every budget covering them, in the client's turn."""
    released = 0
    with transaction.atomic():
        _lock_clients([client] if client else [])
        # Pending jobs count too: they reach the gate before the jobs released now.
        rooms = budget_rooms(_budgets_of([client]).get(client, []), now, counted=states.DISPATCHED)
        jobs = (
            ExtractionJob.objects.filter(status=states.HELD, requested_by=client)
            .select_related("extractor")
            .order_by(ATTEMPT_STARTED_AT, "pk")[:RELEASE_CHUNK]
        )
        blocked, moves = set(), []
        for job in jobs:
            covering = [room for room in rooms if room.covers(job)]
            pages = job_pages(job)
            if job.extractor_id in blocked or any(room.left < pages for room in covering):
                blocked.add(job.extractor_id)
                continue
            for room in covering:
                room.in_flight += pages
            moves.append(_release_move(job, now))
        if moves:
            released = len(jobs_transition(moves, actor=SYSTEM).moved)
            transaction.on_commit(notify_due)
    return released


def _release_move(job: ExtractionJob, now: datetime) -> Move:
    deadline = now + job.extractor.max_duration

    def release(job: ExtractionJob) -> None:
        # Its deadline did not run while it was held: a new one from now.
        job.held_since, job.due_at, job.deadline_at = None, now, deadline

    return Move(
        job.pk,
        states.PENDING,
        expected_from={states.HELD},
        reason=RELEASED_REASON,
        details={"held_since": job.held_since.isoformat() if job.held_since else None},
        prepare=release,
    )


def budgets_send_thresholds(*, now: datetime | None = None) -> int:
    """A `usage.threshold_reached` event for each budget whose month's usage reached its
    threshold, once a month (the budget row remembers the month, locked while it is decided, so
    two schedules never send it twice)."""
    now = now or timezone.now()
    month, sent = month_of(now), 0
    due = UsageBudget.objects.exclude(threshold_sent_for=month).values_list("pk", flat=True)
    for pk in list(due):
        with transaction.atomic():
            budget = (
                UsageBudget.objects.select_for_update(of=("self",))
                .select_related("client", "extractor")
                .filter(pk=pk)
                .exclude(threshold_sent_for=month)
                .first()
            )
            if budget is None:
                continue
            used = budget_room(budget, now).used
            if used * 100 < budget.pages * budget.threshold_percent:
                continue
            event = JobEvent.objects.create(
                type=states.USAGE_THRESHOLD_REACHED,
                requested_by=budget.client,
                payload=threshold_payload(budget, used, month),
                created_at=now,
            )
            deliveries_fan_out([event])
            budget.threshold_sent_for = month
            budget.save(update_fields=["threshold_sent_for"])
            sent += 1
    return sent


def threshold_payload(budget: UsageBudget, used: int, month: date) -> dict:
    return {
        "client": budget.client.username,
        "extractor": budget.extractor.slug if budget.extractor_id else None,
        "month": month.strftime("%Y-%m"),
        "budget_pages": budget.pages,
        "used_pages": used,
        "threshold_percent": budget.threshold_percent,
        "when_used_up": budget.when_used_up,
    }


# Creation


def budget_refusal(client_id: int | None, extractors: Iterable[int]) -> None:
    """Raise `BudgetExhaustedError` when a budget of the client's that says `refuse`, covering
    one of `extractors`, is used up (nothing left after the month's usage and its jobs in
    flight). Which clients have such a budget is read at most every `API_LOOKUP_CACHE_SECONDS`
    in a process, so a create of any other client costs no statement of its own."""
    if client_id is None or client_id not in _refusing_clients():
        return
    wanted = set(extractors)
    budgets = UsageBudget.objects.filter(client_id=client_id, when_used_up=WhenUsedUp.REFUSE)
    now = timezone.now()
    for budget in budgets.select_related("extractor"):
        if budget.extractor_id not in (None, *wanted):
            continue
        room = budget_room(budget, now)
        if room.left <= 0:
            scope = f"on {budget.extractor.slug}" if budget.extractor_id else "this month"
            raise BudgetExhaustedError(
                f"Your usage budget {scope} is used up: {room.used} of {budget.pages} pages "
                f"used and {room.in_flight} in flight. No new jobs are accepted until the "
                "budget is raised or the month ends.",
                budget_pages=budget.pages,
                used_pages=room.used,
                resets_at=f"{next_month(month_of(now)).isoformat()}T00:00:00Z",
            )


def _refusing_clients() -> frozenset[int]:
    def load() -> frozenset[int]:
        refusing = UsageBudget.objects.filter(when_used_up=WhenUsedUp.REFUSE)
        return frozenset(refusing.values_list("client_id", flat=True))

    return REFUSING_CLIENTS.get("refusing", load)


def budget_changed(budget: UsageBudget) -> None:
    """Staff saved or deleted `budget`: release what it now has room for once it commits (and
    this process reads the refusing clients again; others within `API_LOOKUP_CACHE_SECONDS`)."""
    REFUSING_CLIENTS.clear()
    transaction.on_commit(partial(budgets_tend, client_id=budget.client_id))
