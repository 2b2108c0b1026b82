"""The admin dashboard: whether the workers and the dispatcher are alive, what waits in the
broker (by kind) and the webhook delivery lane, pending jobs apart from in-flight ones, jobs
created and finished per minute over the last hour and per hour over a day, jobs by status,
failures, and which circuits hold work. The page refreshes its body in place: it fetches itself
with `?partial=1` every few seconds. Every query is bounded by an index (status, created_at,
completed_at, the active-jobs and due-deliveries partial indexes) or a small table (heartbeats,
circuits, schedules, the broker queue, of which at most `BROKER_TASKS_READ` rows are decoded)."""

from datetime import timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min, Q
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

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
from jobtracking.selectors import (
    LIVENESS_WINDOWS,
    VIEW_ALL,
    active_groups,
    active_jobs_by_extractor,
    broker_tasks_waiting,
    job_throughput,
    queue_by_priority,
)

# The charts' drawing area in SVG units (they scale to their column), the y-axis's labels on
# its left, room above for the top tick's label and the busiest bar's value (10-unit glyphs
# 3 units above it: 12 was a fraction short, and the value was cut at some widths), and below
# for the time labels.
CHART_WIDTH, CHART_HEIGHT, AXIS_WIDTH, CHART_TOP, CHART_BOTTOM = 600, 160, 40, 16, 22
# A phone's column is about 350 px: a chart drawn 600 units wide would shrink its 12-unit labels
# to 7 px there, so each chart is drawn a second time this wide, shown on narrow screens only
# (dashboard.css), with half as many time labels.
NARROW_CHART_WIDTH = 330
TIME_LABEL_WIDTH = 40  # "23:59" in the labels' font: a label is drawn only where it fits
REFRESH_SECONDS = 5
LIVENESS_HISTORY = timedelta(days=1)
# Each waiting task is unsigned and unpickled to learn its kind: the first ones tell enough.
BROKER_TASKS_READ = 1000
OLDEST_SHOWN = 5


def _status_counts(active_by_status: dict[str, int]) -> list[dict]:
    changelist = reverse("admin:jobtracking_extractionjob_changelist")
    counts = []
    for status in states.STATUSES:
        jobs = ExtractionJob.objects.filter(status=status.code)
        # Terminal statuses can hold millions of rows: estimated above 10,000, like the list.
        count = (
            EstimatedCountPaginator(jobs, 1).count
            if status.terminal
            else active_by_status[status.code]
        )
        counts.append(
            {
                "label": status.label,
                "count": count,
                "estimated": status.terminal and count >= 10000,
                "url": f"{changelist}?status={status.code}",
            }
        )
    return counts


def _ticks(peak: int) -> list[dict]:
    """Three gridlines (0, half, top) with their values, for the chart's y-axis."""
    return [
        {"value": round(peak * share), "y": round(CHART_HEIGHT * (1 - share), 1)}
        for share in (0, 0.5, 1)
    ]


TIME_FORMATS = {"minute": "%H:%M", "hour": "%H:00"}


def _chart(buckets: list[dict], *, unit: str, label_every: int) -> dict:
    """The chart drawn for wide screens and for phones (`_drawing`)."""
    return {
        "wide": _drawing(buckets, unit=unit, label_every=label_every, width=CHART_WIDTH),
        "narrow": _drawing(
            buckets, unit=unit, label_every=label_every * 2, width=NARROW_CHART_WIDTH
        ),
    }


def _drawing(buckets: list[dict], *, unit: str, label_every: int, width: int) -> dict:
    """Stacked bars (succeeded, not succeeded) per bucket with the jobs created as a line, on
    a y-axis whose top is the busiest bucket, `width` units wide. Buckets at round times (every
    `label_every` minutes or hours) name their time below."""
    peak = max(max(b["succeeded"] + b["not_succeeded"], b["created"]) for b in buckets) or 1
    step = (width - AXIS_WIDTH) / len(buckets)
    gap = min(4, step / 4)
    bars = []
    for index, bucket in enumerate(buckets):
        ok, bad = bucket["succeeded"], bucket["not_succeeded"]
        ok_height = CHART_HEIGHT * ok / peak
        bad_height = CHART_HEIGHT * bad / peak
        x = AXIS_WIDTH + index * step + gap / 2
        at = timezone.localtime(bucket["at"])
        round_time = getattr(at, unit) % label_every == 0
        bars.append(
            {
                "x": round(x, 1),
                "middle": round(x + (step - gap) / 2, 1),
                "width": round(step - gap, 1),
                "ok_y": round(CHART_HEIGHT - ok_height, 1),
                "ok_height": round(ok_height, 1),
                "bad_y": round(CHART_HEIGHT - ok_height - bad_height, 1),
                "bad_height": round(bad_height, 1),
                "total_y": round(CHART_HEIGHT - ok_height - bad_height - 3, 1),
                "created_y": round(CHART_HEIGHT * (1 - bucket["created"] / peak), 1),
                "label": at.strftime(TIME_FORMATS[unit]),
                "show_label": round_time and x + TIME_LABEL_WIDTH <= width,
                "ok": ok,
                "bad": bad,
                "total": ok + bad,
                "created": bucket["created"],
            }
        )
    return {
        "bars": bars,
        "ticks": _ticks(peak),
        "created_points": " ".join(f"{bar['middle']},{bar['created_y']}" for bar in bars),
        "view_box": f"0 {-CHART_TOP} {width} {CHART_TOP + CHART_HEIGHT + CHART_BOTTOM}",
        "width": width,
    }


def _rates(minutes: list[dict]) -> list[dict]:
    """Jobs finished and created per minute, over the last 5 whole minutes and the last hour
    (`minutes` holds 60 whole minutes, then the one under way)."""
    rates = []
    for label, window in (("last 5 min", minutes[-6:-1]), ("last hour", minutes[:-1])):
        finished = sum(b["succeeded"] + b["not_succeeded"] for b in window)
        created = sum(b["created"] for b in window)
        rates.append(
            {
                "label": label,
                "finished": round(finished / len(window), 1),
                "created": round(created / len(window), 1),
            }
        )
    return rates


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


def _broker(now) -> dict:
    broker = broker_tasks_waiting(read=BROKER_TASKS_READ)
    oldest = broker["oldest_enqueued_at"]
    return {**broker, "oldest": f"{moment(oldest)}, {ago(oldest, now)}" if oldest else "—"}


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


def _dispatch(queue_rows: dict) -> dict:
    """The due jobs the dispatcher has not handed out yet: the oldest one's wait is its lag."""
    lags = [row["oldest_due_seconds"] for row in queue_rows.values()]
    return {
        "due": sum(row["due"] for row in queue_rows.values()),
        "lag": _lag(max((value for value in lags if value is not None), default=None)),
    }


def _active(active: dict, now) -> dict:
    """Pending jobs apart from in-flight ones: how many, since when, and the oldest of each."""
    shown = {}
    for group, statuses in active_groups().items():
        oldest_at = active[group].oldest_at
        shown[group] = {
            "count": active[group].count,
            "oldest": f"{ago(oldest_at, now)} ({moment(oldest_at)})" if oldest_at else "—",
            "jobs": _oldest(ExtractionJob.objects.filter(status__in=sorted(statuses)), now),
        }
    shown["by_extractor"] = [
        {
            "extractor": row["extractor"],
            **{
                group: {"count": row[group].count, "oldest": ago(row[group].oldest_at, now)}
                for group in ("pending", "in_flight")
            },
        }
        for row in active["by_extractor"]
    ]
    return shown


def _oldest(jobs, now) -> list[dict]:
    rows = []
    for job in jobs.select_related("extractor").order_by("created_at")[:OLDEST_SHOWN]:
        if job.due_at is None:
            due = "—"
        elif job.due_at <= now:
            due = f"{moment(job.due_at)} ({span(now - job.due_at)} overdue)"
        else:
            due = f"{moment(job.due_at)} (in {span(job.due_at - now)})"
        rows.append(
            {"job": job, "short_id": str(job.pk)[-12:], "age": ago(job.created_at, now), "due": due}
        )
    return rows


def dashboard_view(request):
    # It describes every client's jobs (in-flight ids, failures): view and view-all.
    if not request.user.has_perms(["jobtracking.view_extractionjob", VIEW_ALL]):
        raise PermissionDenied
    now = timezone.now()
    jobs = ExtractionJob.objects.all()
    queue_rows = queue_by_priority(jobs)
    liveness, missing = _liveness(now)
    minutes = job_throughput(jobs, unit="minute", count=61)  # 60 whole ones, and this one
    active = active_jobs_by_extractor(jobs)
    context = {
        **admin.site.each_context(request),
        "title": "Extraction jobs dashboard",
        "zone": timezone.localtime(now).tzname(),
        "status_counts": _status_counts(active["by_status"]),
        "per_minute": _chart(minutes, unit="minute", label_every=10),
        "rates": _rates(minutes),
        "per_hour": _chart(job_throughput(jobs, unit="hour", count=24), unit="hour", label_every=3),
        "axis_width": AXIS_WIDTH,
        "chart_height": CHART_HEIGHT,
        "failures": list(
            ExtractionJob.objects.filter(completed_at__gte=now - timedelta(days=7))
            .exclude(error_code="")
            .order_by()
            .values("error_code")
            .annotate(n=Count("pk"))
            .order_by("-n")
        ),
        "active": _active(active, now),
        "queue_by_priority": {
            code: {
                **row,
                "value": Priority.named(code).value,
                "lag": _lag(row["oldest_due_seconds"]),
            }
            for code, row in queue_rows.items()
        },
        "dispatch": _dispatch(queue_rows),
        "broker": _broker(now),
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
