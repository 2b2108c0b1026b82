"""Reads: what a user may see, and figures about jobs."""

import contextlib
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Count, Min, Q, QuerySet
from django.db.models.functions import Trunc
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.utils import get_func_repr

from jobtracking import states
from jobtracking.engine.queue import KIND_ORDER, task_kind
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


def active_jobs_by_extractor(jobs: QuerySet[ExtractionJob]) -> dict[str, Any]:
    """Now, per extractor and in all: the pending jobs (waiting to be taken) apart from those in
    flight (taken: on the way to the extractor or at it), with the creation time of the oldest of
    each; and the active jobs by status. One grouped pass over the active jobs (a partial index
    holds only them)."""
    rows = (
        jobs.filter(ACTIVE_STATUS)
        .order_by()
        .values_list("extractor__slug", "status")
        .annotate(n=Count("pk"), oldest_at=Min("created_at"))
    )
    by_status = dict.fromkeys(sorted(states.ACTIVE), 0)
    extractors: dict[str, dict[str, Any]] = {}
    totals = {"pending": JobTally(), "in_flight": JobTally()}
    for slug, status, n, oldest_at in rows:
        by_status[status] += n
        group = "pending" if status == states.PENDING else "in_flight"
        row = extractors.setdefault(
            slug, {"extractor": slug, "pending": JobTally(), "in_flight": JobTally()}
        )
        row[group].add(n, oldest_at)
        totals[group].add(n, oldest_at)
    return {
        "by_extractor": [extractors[slug] for slug in sorted(extractors)],
        "by_status": by_status,
        **totals,
    }


@dataclass
class JobTally:
    """How many jobs, and when the oldest of them was created."""

    count: int = 0
    oldest_at: datetime | None = None

    def add(self, count: int, oldest_at: datetime) -> None:
        self.count += count
        self.oldest_at = min(self.oldest_at or oldest_at, oldest_at)


THROUGHPUT_UNITS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}


def job_throughput(jobs: QuerySet[ExtractionJob], *, unit: str, count: int) -> list[dict]:
    """Jobs created, succeeded and otherwise finished (failed, timed out, cancelled) in each of
    the last `count` minutes or hours (`unit`), oldest first; the last one is under way. Two
    grouped queries, each a range scan of an index (`job_created_idx`, `job_completed_idx`)."""
    step = THROUGHPUT_UNITS[unit]
    now = timezone.localtime()
    current = now.replace(second=0, microsecond=0, **({"minute": 0} if unit == "hour" else {}))
    start = current - step * (count - 1)
    buckets = {
        start + step * index: {"created": 0, "succeeded": 0, "not_succeeded": 0}
        for index in range(count)
    }
    finished = (
        jobs.filter(completed_at__gte=start)
        .annotate(at=Trunc("completed_at", unit))
        .order_by()
        .values_list("at")
        .annotate(ok=Count("pk", filter=Q(status=states.SUCCEEDED)), all=Count("pk"))
    )
    for at, ok, total in finished:
        if at in buckets:
            buckets[at]["succeeded"] += ok
            buckets[at]["not_succeeded"] += total - ok
    created = (
        jobs.filter(created_at__gte=start)
        .annotate(at=Trunc("created_at", unit))
        .order_by()
        .values_list("at")
        .annotate(n=Count("pk"))
    )
    for at, total in created:
        if at in buckets:
            buckets[at]["created"] += total
    return [{"at": at, **counts} for at, counts in buckets.items()]


def broker_tasks_waiting(*, read: int) -> dict[str, Any]:
    """The tasks waiting in django-q2's broker (not taken by a cluster): how many, by kind
    (`jobtracking.engine.queue.task_kind`) and function, whether each function still exists
    (a task whose function is gone fails when run), and when the oldest was enqueued. Learning
    a task's function means unsigning and unpickling it: only the oldest `read` are decoded."""
    waiting = OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lte=timezone.now())
    functions: Counter[str] = Counter()
    oldest = None
    for row in waiting.order_by("id")[:read]:
        task = row.task  # {"id": "*BadSignature"} when it cannot be decoded
        functions[get_func_repr(task.get("func")) or "(unreadable)"] += 1
        oldest = oldest or task.get("started")
    decoded = functions.total()
    total = waiting.count() if decoded == read else decoded
    kinds: dict[str, dict[str, Any]] = {kind: {"count": 0, "functions": []} for kind in KIND_ORDER}
    scheduled = _scheduled_functions() if functions else set()
    for func, n in functions.most_common():
        kind = kinds[task_kind(func, scheduled)]
        kind["count"] += n
        kind["functions"].append({"name": func, "count": n, "exists": _importable(func)})
    return {
        "total": total,
        "read": decoded,
        "partial": total > decoded,
        "oldest_enqueued_at": oldest,
        "kinds": kinds,
    }


def _scheduled_functions() -> set[str]:
    """The last names of the functions django-q2's schedules run: their tasks are housekeeping."""
    return {path.rpartition(".")[2] for path in Schedule.objects.values_list("func", flat=True)}


def _importable(path: str) -> bool:
    try:
        import_string(path)
    except ImportError:
        return False
    return True
