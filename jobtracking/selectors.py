"""Reads: what a user may see, and figures about jobs."""

import contextlib
import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from jobtracking import states
from jobtracking.models import (
    ACTIVE_STATUS,
    SHORT_ID,
    ExtractionJob,
    JobEvent,
    Priority,
    ServiceHeartbeat,
)

VIEW_ALL = "jobtracking.view_all_extractionjobs"
MANAGE_ALL = "jobtracking.manage_all_extractionjobs"


def visible(rows: QuerySet, *, user: AbstractBaseUser, via: str = "job") -> QuerySet:
    """The one scoping rule, for jobs and everything derived from one (results, events,
    deliveries, audit rows): the rows whose job `user` may see, reached through the relation
    path `via` ("" for jobs themselves). A user sees the jobs they requested, or every job with
    the view-all permission."""
    if user.has_perm(VIEW_ALL):
        return rows
    return rows.filter(**{f"{via}__requested_by" if via else "requested_by": user})


def job_list(*, user: AbstractBaseUser) -> QuerySet[ExtractionJob]:
    """The jobs `user` may see (`visible`)."""
    jobs = ExtractionJob.objects.select_related("extractor", "requested_by")
    return visible(jobs, user=user, via="")


def job_may_act(*, user: AbstractBaseUser, job: ExtractionJob) -> bool:
    """Whether `user` may cancel or requeue `job` (holding that action's permission too): their
    own job, or any with the manage-all permission. Seeing every job (view-all) is not enough."""
    return job.requested_by_id == user.pk or user.has_perm(MANAGE_ALL)


def job_search(jobs: QuerySet[ExtractionJob], term: str) -> QuerySet[ExtractionJob]:
    """Jobs whose id (whole, or the 12-character short id staff see), file id or external id is
    `term`, or whose file name starts with it: each one an index lookup, even with millions."""
    query = Q(file_id=term) | Q(external_job_id=term) | Q(file_name__startswith=term)
    with contextlib.suppress(ValueError):
        query |= Q(pk=uuid.UUID(term))
    if len(term) == 12:
        jobs = jobs.alias(short_id=SHORT_ID)
        query |= Q(short_id=term.lower())
    return jobs.filter(query)


def event_list(*, user: AbstractBaseUser, settle: timedelta) -> QuerySet[JobEvent]:
    """Events of the jobs `user` may see, older than `settle` so that ids no longer appear out
    of commit order."""
    events = JobEvent.objects.filter(created_at__lte=timezone.now() - settle)
    return visible(events, user=user)


def event_feed_position(*, settle: timedelta) -> int:
    """The id of the newest settled event (0 if none). Reading the feed `after` it gives the
    events published from now on and those still settling (the last `settle` seconds'): none
    is missed, none older comes. It is a position in the one id sequence every client's feed
    shares, not an event, so it is not scoped to the caller: scoped, a quiet client's answer
    would scan the whole table backwards."""
    newest = JobEvent.objects.filter(created_at__lte=timezone.now() - settle).order_by("-id")
    return newest.values_list("id", flat=True).first() or 0


def job_stats(*, jobs: QuerySet[ExtractionJob], window: timedelta) -> dict[str, Any]:
    """Counts by status and extractor for jobs created in the window; success rate and
    turnaround percentiles for jobs completed in it."""
    since = timezone.now() - window
    created = jobs.filter(created_at__gte=since)
    by_status = dict(created.order_by().values_list("status").annotate(n=Count("pk")))
    by_extractor: dict[str, dict[str, int]] = {}
    for slug, status, n in (
        created.order_by().values_list("extractor__slug", "status").annotate(n=Count("pk"))
    ):
        by_extractor.setdefault(slug, {})[status] = n
    completed = jobs.filter(completed_at__gte=since)
    finished = dict(completed.order_by().values_list("status").annotate(n=Count("pk")))
    judged = sum(finished.get(s, 0) for s in (states.SUCCEEDED, states.FAILED, states.TIMED_OUT))
    return {
        "window_hours": window.total_seconds() / 3600,
        "since": since,
        "created_by_status": {code: by_status.get(code, 0) for code, *_ in states.STATUSES},
        "created_by_extractor": by_extractor,
        "completed": sum(finished.values()),
        "success_rate": finished.get(states.SUCCEEDED, 0) / judged if judged else None,
        "turnaround_seconds": _turnaround_percentiles(completed),
        "queue_by_priority": queue_by_priority(jobs),
    }


def queue_by_priority(jobs: QuerySet[ExtractionJob]) -> dict[str, dict[str, Any]]:
    """For each priority, now: its active and pending jobs, those due and not yet claimed, and
    how long the oldest of these has been due (the dispatcher's lag for that priority)."""
    now = timezone.now()
    due = Q(due_at__lte=now)
    counts = (
        jobs.filter(ACTIVE_STATUS)
        .order_by()
        .values_list("priority")
        .annotate(
            active=Count("pk"),
            pending=Count("pk", filter=Q(status=states.PENDING)),
            due=Count("pk", filter=due),
            oldest=Min("due_at", filter=due),
        )
    )
    rows = {priority: row for priority, *row in counts}
    queue = {}
    for priority in Priority:
        active, pending, due_count, oldest = rows.get(priority, (0, 0, 0, None))
        queue[priority.code] = {
            "active": active,
            "pending": pending,
            "due": due_count,
            "oldest_due_at": oldest,
            "oldest_due_seconds": (now - oldest).total_seconds() if oldest else None,
        }
    return queue


PERCENTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def _turnaround_percentiles(completed: QuerySet[ExtractionJob]) -> dict[str, float | None]:
    succeeded = completed.filter(status=states.SUCCEEDED).order_by()
    if connection.vendor != "postgresql":
        return _percentiles_in_python(succeeded)
    sql, params = succeeded.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT percentile_cont(%s) WITHIN GROUP "
            "(ORDER BY EXTRACT(EPOCH FROM j.completed_at - j.created_at)) "
            f"FROM {ExtractionJob._meta.db_table} j WHERE j.id IN ({sql})",
            [list(PERCENTILES.values()), *params],
        )
        (values,) = cursor.fetchone()
    return dict(zip(PERCENTILES, values or [None] * len(PERCENTILES), strict=True))


def _percentiles_in_python(succeeded: QuerySet[ExtractionJob]) -> dict[str, float | None]:
    """SQLite (the `make run` default) has no percentile_cont: the same linear interpolation
    over the window's turnarounds, read into memory (a development database is small)."""
    spans = sorted(
        (done - created).total_seconds()
        for created, done in succeeded.values_list("created_at", "completed_at")
    )
    if not spans:
        return dict.fromkeys(PERCENTILES)
    result = {}
    for name, fraction in PERCENTILES.items():
        position = fraction * (len(spans) - 1)
        low = int(position)
        high = min(low + 1, len(spans) - 1)
        result[name] = spans[low] + (spans[high] - spans[low]) * (position - low)
    return result


# How recently each kind of process must have beaten to count as alive: the cluster's beat is a
# scheduled task (every minute), the dispatcher beats from its loop.
LIVENESS_WINDOWS = {"cluster": timedelta(seconds=180), "dispatcher": timedelta(seconds=30)}


def heartbeats(*, kind: str, within: timedelta) -> list[ServiceHeartbeat]:
    return list(ServiceHeartbeat.objects.filter(kind=kind, beat_at__gte=timezone.now() - within))
