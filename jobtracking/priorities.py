"""Who goes first when there is more work than room: priority first, a reserved share for the
lower priorities, and round-robin between the clients of one priority.

Three places hand out room this way: the dispatcher (how many due jobs of each priority one claim
round takes), an extractor's `max_in_flight` (how many of its in-flight jobs each priority may
hold) and its submission rate (which priorities book which share of the calls per second).

The rule, `split`: every priority that wants room, except the highest such one, is guaranteed
`JOBS_PRIORITY_RESERVED_SHARE` of it (at least one unit, when there are at least as many units as
priorities asking); the highest one gets everything else; room a priority leaves unused goes to
the others in priority order. So interactive work goes first, and bulk work still moves while it
does; a priority alone gets all of it.
"""

import math
from collections.abc import Iterable, Sequence
from itertools import chain, zip_longest

from django.conf import settings
from django.db.models import Exists, OuterRef

from extraction.models import Extractor
from jobtracking import states
from jobtracking.models import ExtractionJob, Priority, RateSlot

_SKIP = object()


def reserved_share() -> float:
    return settings.JOBS_PRIORITY_RESERVED_SHARE


def split(capacity: int, wants: dict[int, int]) -> dict[int, int]:
    """Share `capacity` units between priorities wanting `wants[priority]` units (see the module
    docstring)."""
    grants = dict.fromkeys(wants, 0)
    asking = sorted(priority for priority, want in wants.items() if want > 0)
    if capacity <= 0 or not asking:
        return grants
    reserve = math.floor(capacity * reserved_share())
    if capacity >= len(asking):
        reserve = max(1, reserve)
    for priority in asking[1:]:
        grants[priority] = min(wants[priority], reserve)
    left = capacity - sum(grants.values())
    for priority in asking:
        extra = max(0, min(wants[priority] - grants[priority], left))
        grants[priority] += extra
        left -= extra
    return grants


def round_robin(queues: Iterable[Sequence]) -> list:
    """One item from each queue in turn: the fair order between clients of one priority."""
    turns = chain.from_iterable(zip_longest(*queues, fillvalue=_SKIP))
    return [item for item in turns if item is not _SKIP]


def submit_lanes(priority: int, waiting: set[int]) -> tuple[str, ...]:
    """Which lanes of an extractor's submission rate a priority books: the highest waiting
    priority the shared lane, the others the reserved lane; a priority waiting alone both."""
    if len(waiting) <= 1:
        return (RateSlot.SHARED, RateSlot.RESERVED)
    return (RateSlot.SHARED,) if priority == min(waiting) else (RateSlot.RESERVED,)


def lane_rate(rate: float, lane: str) -> float:
    """The reserved lane carries the reserved share of the rate, the shared lane the rest."""
    share = reserved_share()
    return rate * (share if lane == RateSlot.RESERVED else 1 - share)


def pending_priorities(extractor: Extractor) -> set[int]:
    """The priorities that have jobs pending for this extractor: one probe per priority of the
    active-jobs index, whatever the size of the backlog."""
    pending = ExtractionJob.objects.filter(extractor=OuterRef("pk"), status_id=states.PENDING)
    probes = {f"p{p}": Exists(pending.filter(priority=p)) for p in Priority.values}
    found = Extractor.objects.filter(pk=extractor.pk).annotate(**probes).values_list(*probes)
    found = found.first() or ()
    return {p for p, waiting in zip(Priority.values, found, strict=False) if waiting}
