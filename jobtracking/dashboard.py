"""The admin dashboard: jobs by status, throughput over time, failures, in-flight work, and
whether the workers and the dispatcher are alive. The page refreshes its body in place: it
fetches itself with `?partial=1` every few seconds. Every query is bounded by an index (status,
completed_at, the active-jobs partial index) or a small table (heartbeats, the broker queue)."""

from datetime import timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.db.models.functions import TruncHour
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django_q.brokers import get_broker

from jobtracking import states
from jobtracking.admin.common import ago, moment, span
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import ExtractionJob, Priority, ServiceHeartbeat
from jobtracking.selectors import LIVENESS_WINDOWS, VIEW_ALL, queue_by_priority

CHART_WIDTH, CHART_HEIGHT, AXIS_WIDTH = 720, 160, 40
REFRESH_SECONDS = 5
LIVENESS_HISTORY = timedelta(days=1)


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


def _queue(queue_rows: dict) -> dict:
    """Tasks waiting in the broker, and the due jobs the dispatcher has not handed out yet: the
    oldest one's wait is the dispatcher's lag."""
    lags = [row["oldest_due_seconds"] for row in queue_rows.values()]
    return {
        "broker_tasks": get_broker().queue_size(),
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
        "queue": _queue(queue_rows),
        "liveness": liveness,
        "missing": missing,
        "refresh_seconds": REFRESH_SECONDS,
        "now": now,
        "updated": moment(now),
    }
    template = "dashboard_body" if request.GET.get("partial") else "dashboard"
    return TemplateResponse(request, f"admin/jobtracking/{template}.html", context)
