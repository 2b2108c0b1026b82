"""Reads: what a user may see, and figures about jobs."""

import contextlib
import datetime
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Count, Exists, Max, Min, OuterRef, Prefetch, Q, QuerySet
from django.db.models.functions import Trunc
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.utils import get_func_repr

from jobtracking import batch_states, states
from jobtracking.infra.archive_storage import read_record
from jobtracking.infra.queue import KIND_ORDER, task_kind
from jobtracking.models import (
    SHORT_ID,
    TURNAROUND,
    ArchivedJob,
    Batch,
    DeliveryAttempt,
    ExtractionJob,
    JobEvent,
    Priority,
    ServiceHeartbeat,
    WebhookDelivery,
    WebhookSubscription,
    status_in,
)

VIEW_ALL = "jobtracking.view_all_extractionjobs"
MANAGE_ALL = "jobtracking.manage_all_extractionjobs"


def sees_every_client(user: AbstractBaseUser) -> bool:
    """Whether `user` may see every client's jobs and what derives from them (view-all)."""
    return user.has_perm(VIEW_ALL)


# Whose an event is: its job's, its batch's, or (a usage event) its own `requested_by`'s; and
# so whose a webhook delivery is.
EVENT_OWNERS = ("job", "batch", "")
DELIVERY_OWNERS = tuple(f"event__{path}" if path else "event" for path in EVENT_OWNERS)


def visible(
    rows: QuerySet, *, user: AbstractBaseUser, via: str | tuple[str, ...] = "job"
) -> QuerySet:
    """The one scoping rule, for jobs and batches and everything derived from one (results,
    events, deliveries, audit rows): the rows whose job or batch `user` may see, reached through
    the relation path `via` ("" for jobs and batches themselves; several paths: through any of
    them, as an event is of a job or of a batch). A user sees the jobs and batches they
    requested, or every one with the view-all permission."""
    if sees_every_client(user):
        return rows
    paths = (via,) if isinstance(via, str) else via
    owned = Q()
    for path in paths:
        owned |= Q(**{f"{path}__requested_by" if path else "requested_by": user})
    return rows.filter(owned)


def job_list(*, user: AbstractBaseUser) -> QuerySet[ExtractionJob]:
    """The jobs `user` may see (`visible`)."""
    jobs = ExtractionJob.objects.select_related("extractor", "requested_by")
    return visible(jobs, user=user, via="")


def job_may_act(*, user: AbstractBaseUser, job: ExtractionJob) -> bool:
    """Whether `user` may cancel or requeue `job` (holding that action's permission too): their
    own job, or any with the manage-all permission. Seeing every job (view-all) is not enough."""
    return job.requested_by_id == user.pk or user.has_perm(MANAGE_ALL)


def job_may_act_on_batch(*, user: AbstractBaseUser, batch: Batch) -> bool:
    """`job_may_act`'s rule for a batch: its own client, or manage-all."""
    return batch.requested_by_id == user.pk or user.has_perm(MANAGE_ALL)


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


def archived_job_list(*, user: AbstractBaseUser) -> QuerySet[ArchivedJob]:
    """The purged jobs `user` may see (`visible`: the same rule as for live jobs)."""
    return visible(ArchivedJob.objects.order_by("-archived_at"), user=user, via="")


def archived_job_search(entries: QuerySet[ArchivedJob], term: str) -> QuerySet[ArchivedJob]:
    """Purged jobs whose id, file id or external id is `term`: each one an index lookup."""
    query = Q(file_id=term) | Q(external_job_id=term)
    with contextlib.suppress(ValueError):
        query |= Q(pk=uuid.UUID(term))
    return entries.filter(query)


def archived_job_record(entry: ArchivedJob) -> bytes:
    """The purged job's archived record: one JSON document, read from its place in the archive."""
    return read_record(entry.storage, entry.path, entry.offset, entry.job_id)


def event_list(*, user: AbstractBaseUser, settle: timedelta) -> QuerySet[JobEvent]:
    """Events of the jobs and batches `user` may see, and their own usage events, older than
    `settle` so that ids no longer appear out of commit order."""
    events = JobEvent.objects.filter(created_at__lte=timezone.now() - settle)
    return visible(events, user=user, via=EVENT_OWNERS)


def webhook_endpoint_list(*, user: AbstractBaseUser) -> QuerySet[WebhookSubscription]:
    """A client's own webhook subscriptions (the API's endpoints): never another's, even with
    the view-all permission (which lets a subscription receive every job's events)."""
    return WebhookSubscription.objects.filter(created_by=user)


def webhook_delivery_list(
    *, user: AbstractBaseUser, subscription: WebhookSubscription
) -> QuerySet[WebhookDelivery]:
    """A subscription's deliveries of events of jobs `user` may see (`visible`), each with its
    event and its attempts, oldest attempt first."""
    deliveries = WebhookDelivery.objects.filter(subscription=subscription).select_related("event")
    attempts = Prefetch(
        "attempt_log", queryset=DeliveryAttempt.objects.order_by("attempted_at", "id")
    )
    return visible(deliveries, user=user, via=DELIVERY_OWNERS).prefetch_related(attempts)


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
    judged = sum(finished.get(status, 0) for status in states.JUDGED)
    return {
        "window_hours": window.total_seconds() / 3600,
        "since": since,
        "created_by_status": {s.code: by_status.get(s.code, 0) for s in states.STATUSES},
        "created_by_extractor": by_extractor,
        "completed": sum(finished.values()),
        "success_rate": finished.get(states.SUCCEEDED, 0) / judged if judged else None,
        "turnaround_seconds": _turnaround_percentiles(completed),
        "queue_by_priority": queue_by_priority(jobs),
    }


def queue_by_priority(jobs: QuerySet[ExtractionJob]) -> dict[str, dict[str, Any]]:
    """For each priority, now: its active and pending jobs, those due and not yet claimed, and
    how long the oldest of these has been due (the dispatcher's lag for that priority). Only a
    job the dispatcher works on is due; one that waits for a person is only active."""
    now = timezone.now()
    due = Q(due_at__lte=now) & status_in(states.DISPATCHED)
    counts = (
        jobs.filter(status_in(states.ACTIVE))
        .order_by()
        .values_list("priority")
        .annotate(
            active=Count("pk"),
            pending=Count("pk", filter=status_in(active_groups()["pending"])),
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
    """Over the turnarounds (`TURNAROUND`: each job's current attempt) of the succeeded jobs."""
    succeeded = completed.filter(status=states.SUCCEEDED).order_by()
    if connection.vendor != "postgresql":
        return _percentiles_in_python(succeeded)
    sql, params = _turnarounds(succeeded).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT percentile_cont(%s) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM t.turnaround)) "
            f"FROM ({sql}) t(turnaround)",
            [list(PERCENTILES.values()), *params],
        )
        (values,) = cursor.fetchone()
    return dict(zip(PERCENTILES, values or [None] * len(PERCENTILES), strict=True))


def _turnarounds(jobs: QuerySet[ExtractionJob]) -> QuerySet:
    return jobs.values_list(TURNAROUND, flat=True)


def _percentiles_in_python(succeeded: QuerySet[ExtractionJob]) -> dict[str, float | None]:
    """SQLite (the `make run` default) has no percentile_cont: the same linear interpolation
    over the window's turnarounds, read into memory (a development database is small)."""
    spans = sorted(span.total_seconds() for span in _turnarounds(succeeded))
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


# Batches


# How many of a batch's failed jobs its page lists (their counts by error code are whole).
BATCH_FAILURES_SHOWN = 100


def batch_has_jobs(statuses: Collection[str]) -> Exists:
    """Whether the batch (the outer query's row) has a job in one of `statuses`."""
    return Exists(
        ExtractionJob.objects.filter(batch_id=OuterRef("pk"), status__in=sorted(statuses))
    )


def batch_status_filter(status: str) -> Q:
    """The batches whose `batch_status` is `status`, as a filter (each test an index probe)."""
    live = Q(cancelled_at__isnull=True)
    done = live & Q(closed_at__isnull=False) & ~batch_has_jobs(states.ACTIVE)
    return {
        batch_states.CANCELLED: Q(cancelled_at__isnull=False),
        batch_states.OPEN: live & Q(closed_at__isnull=True),
        batch_states.RUNNING: live & Q(closed_at__isnull=False) & batch_has_jobs(states.ACTIVE),
        batch_states.COMPLETED: done & ~batch_has_jobs(states.FAILURES),
        batch_states.COMPLETED_WITH_FAILURES: done & batch_has_jobs(states.FAILURES),
    }[status]


@dataclass
class BatchSummary:
    """A batch's aggregate, computed from its jobs (`batch_summaries`)."""

    by_status: dict[str, int] = field(
        default_factory=lambda: {status.code: 0 for status in states.STATUSES}
    )
    failures_by_code: dict[str, int] = field(default_factory=dict)
    first_created_at: datetime.datetime | None = None
    last_created_at: datetime.datetime | None = None
    first_completed_at: datetime.datetime | None = None
    last_completed_at: datetime.datetime | None = None
    # The first failed jobs (`BATCH_FAILURES_SHOWN`), when asked for.
    failed_jobs: list[ExtractionJob] | None = None

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def active(self) -> int:
        return sum(self.by_status[status] for status in states.ACTIVE)

    @property
    def failed(self) -> int:
        return sum(self.by_status[status] for status in states.FAILURES)

    @property
    def progress(self) -> float:
        """The share of its jobs that have ended, in percent."""
        total = self.total
        return round(100 * (total - self.active) / total, 1) if total else 0.0

    def status(self, batch: Batch) -> str:
        return batch_states.batch_status(
            closed=batch.closed_at is not None,
            cancelled=batch.cancelled_at is not None,
            active=self.active > 0,
            failures=self.failed > 0,
        )


def _earliest(a, b):
    return b if a is None or (b is not None and b < a) else a


def _latest(a, b):
    return b if a is None or (b is not None and b > a) else a


def batch_summaries(
    batch_ids: Collection[uuid.UUID], *, with_failed_jobs: bool = False
) -> dict[uuid.UUID, BatchSummary]:
    """The aggregates of these batches, in one query that the index `job_batch_status_idx`
    answers alone (counts by status and error code, first and last moments), and with
    `with_failed_jobs` their first failed jobs (one more query each)."""
    summaries = {pk: BatchSummary() for pk in batch_ids}
    rows = (
        ExtractionJob.objects.filter(batch_id__in=list(batch_ids))
        .order_by()
        .values_list("batch_id", "status", "error_code")
        .annotate(
            n=Count("*"),
            first_created=Min("created_at"),
            last_created=Max("created_at"),
            first_completed=Min("completed_at"),
            last_completed=Max("completed_at"),
        )
    )
    for batch_id, status, code, n, first_created, last_created, first_done, last_done in rows:
        summary = summaries[batch_id]
        summary.by_status[status] += n
        if status in states.FAILURES:
            key = code or status  # a cancelled job has no error code
            summary.failures_by_code[key] = summary.failures_by_code.get(key, 0) + n
        summary.first_created_at = _earliest(summary.first_created_at, first_created)
        summary.last_created_at = _latest(summary.last_created_at, last_created)
        summary.first_completed_at = _earliest(summary.first_completed_at, first_done)
        summary.last_completed_at = _latest(summary.last_completed_at, last_done)
    if with_failed_jobs:
        for pk, summary in summaries.items():
            summary.failed_jobs = batch_failed_jobs(pk) if summary.failed else []
    return summaries


def batch_failed_jobs(batch_id: uuid.UUID) -> list[ExtractionJob]:
    """The batch's first `BATCH_FAILURES_SHOWN` failed jobs, in the order they ended: chosen
    from the index alone, then read by their keys."""
    first = (
        ExtractionJob.objects.filter(batch_id=batch_id, status__in=sorted(states.FAILURES))
        .order_by("completed_at", "pk")
        .values("pk")[:BATCH_FAILURES_SHOWN]
    )
    return list(
        ExtractionJob.objects.filter(pk__in=first)
        .only("id", "status", "file_id", "file_name", "error_code", "error_message", "completed_at")
        .order_by("completed_at", "pk")
    )


def batch_summary(batch: Batch, *, with_failed_jobs: bool = False) -> BatchSummary:
    return batch_summaries([batch.pk], with_failed_jobs=with_failed_jobs)[batch.pk]


def batch_list(*, user: AbstractBaseUser) -> QuerySet[Batch]:
    """The batches `user` may see (`visible`: their own, or all with view-all)."""
    return visible(Batch.objects.select_related("requested_by"), user=user, via="")


def active_groups() -> dict[str, frozenset[str]]:
    """The groups the dashboard shows active jobs in, from the declarations: pending (waiting to
    be taken: dispatched, not yet in flight) and in flight (taken: on the way to the extractor or
    at it). An active job in neither, one that waits for a person, is counted by its status."""
    return {"pending": states.DISPATCHED - states.IN_FLIGHT, "in_flight": states.IN_FLIGHT}


def active_jobs_by_extractor(jobs: QuerySet[ExtractionJob]) -> dict[str, Any]:
    """Now, per extractor and in all: the pending jobs apart from those in flight
    (`active_groups`), with the creation time of the oldest of each; and the active jobs by
    status. One grouped pass over the active jobs (a partial index holds only them)."""
    groups = active_groups()
    rows = (
        jobs.filter(status_in(states.ACTIVE))
        .order_by()
        .values_list("extractor__slug", "status")
        .annotate(n=Count("pk"), oldest_at=Min("created_at"))
    )
    by_status = dict.fromkeys(sorted(states.ACTIVE), 0)
    extractors: dict[str, dict[str, Any]] = {}
    totals = {group: JobTally() for group in groups}
    for slug, status, n, oldest_at in rows:
        by_status[status] += n
        for group in (group for group, statuses in groups.items() if status in statuses):
            row = extractors.setdefault(
                slug, {"extractor": slug, **{name: JobTally() for name in groups}}
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
    oldest_at: datetime.datetime | None = None

    def add(self, count: int, oldest_at: datetime.datetime) -> None:
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
    (`jobtracking.infra.queue.task_kind`) and function, whether each function still exists
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
