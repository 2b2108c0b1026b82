"""The admin dashboard: jobs by status, throughput over time, failures, in-flight work.
Every query is bounded by an index (status, completed_at, the active-jobs partial index)."""

from datetime import timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.db.models.functions import TruncHour
from django.template.response import TemplateResponse
from django.utils import timezone

from jobtracking import states
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import ExtractionJob, Priority
from jobtracking.selectors import VIEW_ALL, queue_by_priority

CHART_WIDTH, CHART_HEIGHT = 720, 160


def _status_counts() -> list[tuple[str, int, bool]]:
    counts = []
    for code, label, terminal, _ in states.STATUSES:
        jobs = ExtractionJob.objects.filter(status=code)
        # Terminal statuses can hold millions of rows: estimated above 10,000, like the list.
        count = EstimatedCountPaginator(jobs, 1).count if terminal else jobs.count()
        counts.append((label, count, terminal))
    return counts


def _throughput(since) -> list[dict]:
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
    step = CHART_WIDTH / len(ordered)
    bars = []
    for index, (hour, by_status) in enumerate(ordered):
        ok = by_status.get(states.SUCCEEDED, 0)
        bad = sum(n for s, n in by_status.items() if s != states.SUCCEEDED)
        ok_height = CHART_HEIGHT * ok / peak
        bad_height = CHART_HEIGHT * bad / peak
        bars.append(
            {
                "x": round(index * step + 2, 1),
                "width": round(step - 4, 1),
                "ok_y": round(CHART_HEIGHT - ok_height, 1),
                "ok_height": round(ok_height, 1),
                "bad_y": round(CHART_HEIGHT - ok_height - bad_height, 1),
                "bad_height": round(bad_height, 1),
                "label": hour.strftime("%H:00"),
                "ok": ok,
                "bad": bad,
            }
        )
    return bars


def dashboard_view(request):
    # It describes every client's jobs (in-flight ids, failures): view and view-all.
    if not request.user.has_perms(["jobtracking.view_extractionjob", VIEW_ALL]):
        raise PermissionDenied
    now = timezone.now()
    active = ExtractionJob.objects.filter(status__in=sorted(states.ACTIVE))
    context = {
        **admin.site.each_context(request),
        "title": "Extraction jobs dashboard",
        "status_counts": _status_counts(),
        "bars": _throughput(now - timedelta(hours=24)),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
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
        "oldest": list(active.select_related("extractor").order_by("created_at")[:10]),
        "queue_by_priority": {
            code: {**row, "value": Priority.named(code).value}
            for code, row in queue_by_priority(ExtractionJob.objects.all()).items()
        },
        "now": now,
    }
    return TemplateResponse(request, "admin/jobtracking/dashboard.html", context)
