"""Usage in the staff console: the price table (every change logged with who and why), and the
usage page: pages a day over a month by client or extractor (a chart drawn as the dashboard
draws its charts: server-side SVG, no library), the month's lines, and their CSV export."""

import calendar
import csv
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, timedelta

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import StreamingHttpResponse
from django.template.response import TemplateResponse

from jobtracking.admin.common import LoggedWithReason, reason_field
from jobtracking.admin.dashboard import AXIS_WIDTH, CHART_BOTTOM, CHART_HEIGHT, CHART_TOP, _ticks
from jobtracking.admin.export import Echo, csv_safe
from jobtracking.models import UsagePrice
from jobtracking.usage_selectors import (
    UsageLine,
    usage_client_scope,
    usage_regrouped,
    usage_summary,
)

CSV_GROUPS = ["client", "extractor", "model", "day"]
CHART_WIDTH = 720
SERIES_SHOWN = 6  # the biggest; the rest are drawn together as "others"
COLOURS = ["#0d6efd", "#198754", "#fd7e14", "#6f42c1", "#d63384", "#20c997", "#6c757d"]


class UsagePriceForm(forms.ModelForm):
    reason = reason_field("the price is set or changed")

    class Meta:
        model = UsagePrice
        fields = ["extractor", "model_id", "effective_from", "price_per_1000_pages", "currency"]


@admin.register(UsagePrice)
class UsagePriceAdmin(LoggedWithReason, admin.ModelAdmin):
    """Prices per extractor and model from a day on. A price is never deleted (past usage is
    priced by it); a new price is a new row from its first day; a correction is logged."""

    form = UsagePriceForm
    list_display = [
        "extractor",
        "model_shown",
        "effective_from",
        "price_per_1000_pages",
        "currency",
    ]
    list_filter = ["extractor", "currency"]
    list_select_related = ["extractor"]

    @admin.display(description="model", ordering="model_id")
    def model_shown(self, price: UsagePrice) -> str:
        return price.model_id or "(all models)"

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


def usage_csv(lines: Iterable[UsageLine], keys: list[str]) -> Iterator[list]:
    """The header, then a row per line: the groups, pages, jobs, pages saved, cost and
    currency."""
    yield [*keys, "pages", "jobs", "pages_saved", "cost", "currency"]
    for line in lines:
        groups = [csv_safe(line.group[key]) for key in keys]
        yield [
            *groups,
            line.pages,
            line.jobs,
            line.pages_saved,
            line.cost if line.cost is not None else "",
            line.currency or "",
        ]


def month_days(month: date) -> tuple[date, date]:
    last = calendar.monthrange(month.year, month.month)[1]
    return month, month.replace(day=last)


def _month(request) -> date:
    raw = request.GET.get("month", "")
    try:
        return datetime.strptime(raw, "%Y-%m").date() if raw else _this_month()
    except ValueError:
        return _this_month()


def _this_month() -> date:
    return datetime.now(UTC).date().replace(day=1)


def _chart(lines: list[UsageLine], by: str, start: date, end: date) -> dict:
    """Stacked bars of pages per day, one colour per series (the biggest `SERIES_SHOWN`, then
    the others together)."""
    totals: defaultdict[str, int] = defaultdict(int)
    for line in lines:
        totals[str(line.group[by])] += line.pages
    shown = sorted(totals, key=lambda name: -totals[name])[:SERIES_SHOWN]
    names = shown + (["others"] if len(totals) > len(shown) else [])
    per_day: defaultdict[date, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for line in lines:
        name = str(line.group[by])
        per_day[line.group["day"]][name if name in shown else "others"] += line.pages
    days = [start + timedelta(days=n) for n in range((end - start).days + 1)]
    peak = max((sum(per_day[day].values()) for day in days), default=0) or 1
    step = (CHART_WIDTH - AXIS_WIDTH) / len(days)
    bars = []
    for index, day in enumerate(days):
        x, top = AXIS_WIDTH + index * step + 1, CHART_HEIGHT
        for name in names:
            height = CHART_HEIGHT * per_day[day][name] / peak
            top -= height
            if height:
                bars.append(
                    {
                        "x": round(x, 1),
                        "y": round(top, 1),
                        "width": round(step - 2, 1),
                        "height": round(height, 1),
                        "colour": COLOURS[names.index(name)],
                        "title": f"{day}: {name}, {per_day[day][name]} pages",
                    }
                )
    labels = [
        {"x": round(AXIS_WIDTH + i * step, 1), "text": f"{day:%d}"}
        for i, day in enumerate(days)
        if day.day % 5 == 1
    ]
    return {
        "bars": bars,
        "labels": labels,
        "ticks": _ticks(peak),
        "legend": [{"name": n, "colour": COLOURS[i]} for i, n in enumerate(names)],
        "view_box": f"0 {-CHART_TOP} {CHART_WIDTH} {CHART_TOP + CHART_HEIGHT + CHART_BOTTOM}",
        "width": CHART_WIDTH,
    }


def usage_view(request):
    """The usage page: `?month=YYYY-MM` (this month by default), `?by=client|extractor`;
    `?export=csv` downloads the month by client, extractor, model and day."""
    if not request.user.has_perm("jobtracking.view_extractionjob"):
        raise PermissionDenied
    month = _month(request)
    start, end = month_days(month)
    client = usage_client_scope(request.user)
    if request.GET.get("export") == "csv":
        lines = usage_summary(client=client, start=start, end=end, group_by=CSV_GROUPS)
        writer = csv.writer(Echo())
        response = StreamingHttpResponse(
            (writer.writerow(row) for row in usage_csv(lines, CSV_GROUPS)), content_type="text/csv"
        )
        response["Content-Disposition"] = f'attachment; filename="usage-{month:%Y-%m}.csv"'
        return response
    by = "extractor" if request.GET.get("by") == "extractor" else "client"
    columns = ["client", "extractor", "model"] if by == "client" else ["extractor", "model"]
    # One read by day serves both the chart (by `by` and day) and the month's lines.
    daily = usage_summary(client=client, start=start, end=end, group_by=[*columns, "day"])
    context = {
        **admin.site.each_context(request),
        "title": f"Usage, {month:%B %Y}",
        "month": f"{month:%Y-%m}",
        "previous": f"{month - timedelta(days=1):%Y-%m}",
        "next": f"{end + timedelta(days=1):%Y-%m}",
        "by": by,
        "chart": _chart(daily, by, start, end),
        "axis_width": AXIS_WIDTH,
        "chart_height": CHART_HEIGHT,
        "lines": usage_regrouped(daily, columns),
        "columns": columns,
    }
    return TemplateResponse(request, "admin/jobtracking/usage.html", context)
