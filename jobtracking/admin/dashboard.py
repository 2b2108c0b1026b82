"""The admin dashboard: jobs by status, throughput over time, failures, in-flight work, and
whether the workers and the dispatcher are alive, what waits in the broker and the webhook
delivery lane, and which circuits hold work. The page refreshes its body in place: it fetches
itself with `?partial=1` every few seconds. Every query is bounded by an index (status,
completed_at, the active-jobs and due-deliveries partial indexes) or a small table (heartbeats,
circuits, the broker queue, of which at most `BROKER_TASKS_READ` rows are decoded)."""

from datetime import timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min, Q
from django.db.models.functions import TruncHour
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.utils import get_func_repr

from jobtracking import states
from jobtracking.admin.circuits import circuit_error, circuit_state
from jobtracking.admin.common import ago, moment, span
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import (
    CircuitState,
    DeliveryState,
    ExtractionJob,
    ExtractorHealth,
    Priority,
    ReceiverHealth,
    ServiceHeartbeat,
    WebhookDelivery,
)
from jobtracking.selectors import LIVENESS_WINDOWS, VIEW_ALL, queue_by_priority

CHART_WIDTH, CHART_HEIGHT, AXIS_WIDTH = 720, 160, 40
REFRESH_SECONDS = 5
LIVENESS_HISTORY = timedelta(days=1)
# Broker tasks by what they run: job batches, other job work, and housekeeping (schedules).
JOB_BATCH_TASKS = {"jobtracking.engine.tasks.process_jobs", "jobtracking.engine.tasks.process_job"}
OTHER_JOB_TASKS = {"jobtracking.engine.tasks.cancel_at_extractor"}
# Each waiting task is unsigned and unpickled to learn its kind: the first ones tell enough.
BROKER_TASKS_READ = 1000


def _status_counts() -> list[dict]:
    changelist = reverse("admin:jobtracking_extractionjob_changelist")
    counts = []
    for code, label, terminal, _ in states.STATUSES:
        jobs = ExtractionJob.objects.filter(status=code)
        # Terminal statuses can hold millions of rows: estimated above 10,000, like the list.
        count = EstimatedCountPaginator(jobs, 1).count if terminal else jobs.count()
        counts.append(
            {
                "label": label,
                "count": count,
                "estimated": terminal and count >= 10000,
                "url": f"{changelist}?status={code}",
            }
        )
    return counts


def _ticks(peak: int) -> list[dict]:
    """Three gridlines (0, half, top) with their values, for the chart's y-axis."""
    return [
        {"value": round(peak * share), "y": round(CHART_HEIGHT * (1 - share), 1)}
        for share in (0, 0.5, 1)
    ]


def _throughput(since) -> dict:
    rows = (
        ExtractionJob.objects.filter(completed_at__gte=since)
        .annotate(hour=TruncHour("completed_at"))
        .order_by()
        .values("hour", "status")
        .annotate(n=Count("pk"))
    )
    hours = {
        since.replace(minute=0, second=0, microsecond=0) + timedelta(hours=h): {} for h in range(25)
    }
    for row in rows:
        hours.setdefault(row["hour"], {})[row["status"]] = row["n"]
    ordered = sorted(hours.items())[-24:]
    peak = max((sum(v.values()) for _, v in ordered), default=0) or 1
    step = (CHART_WIDTH - AXIS_WIDTH) / len(ordered)
    bars = []
    for index, (hour, by_status) in enumerate(ordered):
        ok = by_status.get(states.SUCCEEDED, 0)
        bad = sum(n for s, n in by_status.items() if s != states.SUCCEEDED)
        ok_height = CHART_HEIGHT * ok / peak
        bad_height = CHART_HEIGHT * bad / peak
        x = AXIS_WIDTH + index * step + 2
        bars.append(
            {
                "x": round(x, 1),
                "middle": round(x + (step - 4) / 2, 1),
                "width": round(step - 4, 1),
                "ok_y": round(CHART_HEIGHT - ok_height, 1),
                "ok_height": round(ok_height, 1),
                "bad_y": round(CHART_HEIGHT - ok_height - bad_height, 1),
                "bad_height": round(bad_height, 1),
                "total_y": round(max(CHART_HEIGHT - ok_height - bad_height - 3, 10), 1),
                "label": timezone.localtime(hour).strftime("%H:00"),
                "ok": ok,
                "bad": bad,
                "total": ok + bad,
            }
        )
    return {"bars": bars, "ticks": _ticks(peak), "peak": peak}


def _liveness(now) -> tuple[list[dict], list[str]]:
    """Every process that has beaten in the last day, alive when within its kind's window; and
    the kinds with no live process at all. (A machine gone for longer is history, not news.)"""
    beats = ServiceHeartbeat.objects.filter(beat_at__gte=now - LIVENESS_HISTORY).order_by(
        "kind", "-beat_at"
    )
    rows = []
    for beat in beats:
        window = LIVENESS_WINDOWS.get(beat.kind, timedelta(minutes=3))
        rows.append(
            {
                "kind": beat.kind,
                "name": beat.name,
                "age": ago(beat.beat_at, now),
                "alive": now - beat.beat_at <= window,
                "window": span(window),
            }
        )
    missing = set(LIVENESS_WINDOWS) - {row["kind"] for row in rows if row["alive"]}
    return rows, sorted(missing)


def _lag(seconds: float | None) -> str:
    return span(timedelta(seconds=seconds)) if seconds is not None else "none"


def _broker_tasks(now) -> dict:
    """Tasks waiting in the broker (not taken by a cluster), by kind. Only the first
    `BROKER_TASKS_READ` are decoded; `read` says how many were."""
    waiting = OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lte=now)
    kinds = {"batches": 0, "job_tasks": 0, "housekeeping": 0}
    read = 0
    for task in waiting.order_by("id")[:BROKER_TASKS_READ]:
        func = get_func_repr(task.task.get("func"))
        if func in JOB_BATCH_TASKS:
            kinds["batches"] += 1
        elif func in OTHER_JOB_TASKS:
            kinds["job_tasks"] += 1
        else:
            kinds["housekeeping"] += 1
        read += 1
    total = waiting.count() if read == BROKER_TASKS_READ else read
    return {"total": total, "read": read, "partial": total > read, **kinds}


def _delivery_lane(now) -> dict:
    """The webhook delivery lane's backlog: pending deliveries due now, and how long the oldest
    pending one has waited since it was created (one pass over the pending rows)."""
    backlog = WebhookDelivery.objects.filter(state=DeliveryState.PENDING).aggregate(
        due=Count("pk", filter=Q(next_attempt_at__lte=now)), oldest=Min("created_at")
    )
    oldest = backlog["oldest"]
    return {
        "due": backlog["due"],
        "oldest": _lag((now - oldest).total_seconds() if oldest else None),
    }


def _circuits(now) -> list[dict]:
    """Circuits that hold work (open or paused); a closed one is the norm, not news."""
    holding = ~Q(state=CircuitState.CLOSED)
    extractors = ExtractorHealth.objects.filter(holding).select_related("extractor")
    receivers = ReceiverHealth.objects.filter(holding).select_related("subscription")
    named = [("extractor", h.extractor.slug, h) for h in extractors.order_by("extractor__slug")]
    named += [
        ("receiver", f"{h.subscription_id}: {h.subscription.url}", h)
        for h in receivers.order_by("subscription_id")
    ]
    return [
        {
            "kind": kind,
            "name": name,
            "state": circuit_state(health, now),
            "probe": moment(health.probe_at) if health.state == CircuitState.OPEN else "—",
            "error": circuit_error(health, now),
        }
        for kind, name, health in named
    ]


def _queue(queue_rows: dict, now) -> dict:
    """Tasks waiting in the broker, and the due jobs the dispatcher has not handed out yet: the
    oldest one's wait is the dispatcher's lag."""
    lags = [row["oldest_due_seconds"] for row in queue_rows.values()]
    broker = _broker_tasks(now)
    return {
        "broker_tasks": broker["total"],
        "broker": broker,
        "due": sum(row["due"] for row in queue_rows.values()),
        "lag": _lag(max((value for value in lags if value is not None), default=None)),
    }


def _oldest(active, now) -> list[dict]:
    rows = []
    for job in active.select_related("extractor").order_by("created_at")[:10]:
        if job.due_at is None:
            due = "—"
        elif job.due_at <= now:
            due = f"{moment(job.due_at)} ({span(now - job.due_at)} overdue)"
        else:
            due = f"{moment(job.due_at)} (in {span(job.due_at - now)})"
        rows.append({"job": job, "age": ago(job.created_at, now), "due": due})
    return rows


def dashboard_view(request):
    # It describes every client's jobs (in-flight ids, failures): view and view-all.
    if not request.user.has_perms(["jobtracking.view_extractionjob", VIEW_ALL]):
        raise PermissionDenied
    now = timezone.now()
    active = ExtractionJob.objects.filter(status__in=sorted(states.ACTIVE))
    queue_rows = queue_by_priority(ExtractionJob.objects.all())
    liveness, missing = _liveness(now)
    context = {
        **admin.site.each_context(request),
        "title": "Extraction jobs dashboard",
        "status_counts": _status_counts(),
        "chart": _throughput(now - timedelta(hours=24)),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "axis_width": AXIS_WIDTH,
        "failures": list(
            ExtractionJob.objects.filter(completed_at__gte=now - timedelta(days=7))
            .exclude(error_code="")
            .order_by()
            .values("error_code")
            .annotate(n=Count("pk"))
            .order_by("-n")
        ),
        "in_flight": list(
            active.order_by()
            .values("extractor__slug", "status")
            .annotate(n=Count("pk"))
            .order_by("extractor__slug", "status")
        ),
        "oldest": _oldest(active, now),
        "queue_by_priority": {
            code: {
                **row,
                "value": Priority.named(code).value,
                "lag": _lag(row["oldest_due_seconds"]),
            }
            for code, row in queue_rows.items()
        },
        "queue": _queue(queue_rows, now),
        "deliveries": _delivery_lane(now),
        "circuits": _circuits(now),
        "liveness": liveness,
        "missing": missing,
        "refresh_seconds": REFRESH_SECONDS,
        "now": now,
        "updated": moment(now),
    }
    template = "dashboard_body" if request.GET.get("partial") else "dashboard"
    return TemplateResponse(request, f"admin/jobtracking/{template}.html", context)
