import json

from django.core.management.base import BaseCommand, CommandError

from jobtracking.api.renderers import FastJSONRenderer
from jobtracking.api.views import stats_answer, stats_window
from jobtracking.errors import JobValidationError
from jobtracking.models import ExtractionJob


class Command(BaseCommand):
    help = (
        "Print what GET /api/v1/stats/ answers, over every job: counts by status and extractor, "
        "success rate and turnaround percentiles over a window, and the queue by priority."
    )

    def add_arguments(self, parser):
        parser.add_argument("--window-hours", default="24", help="1 to 720 (default 24)")
        parser.add_argument(
            "--format", choices=("table", "json"), default="table", help="table (default) or json"
        )

    def handle(self, *args, **options):
        try:
            window = stats_window(str(options["window_hours"]))
        except JobValidationError as error:
            raise CommandError(f"--window-hours: {error.fields['window_hours']}") from None
        # An operator at the shell sees every job, as the view-all permission does.
        stats = stats_answer(ExtractionJob.objects.all(), window)
        if options["format"] == "json":
            self.stdout.write(FastJSONRenderer().render(stats).decode())
            return
        self.stdout.write("\n".join(table_lines(json.loads(FastJSONRenderer().render(stats)))))


def table_lines(stats: dict) -> list[str]:
    """The stats as aligned plain-text tables (the JSON's values, as the API writes them)."""
    statuses = list(stats["created_by_status"])
    lines = [f"Jobs created in the last {stats['window_hours']:g} h (since {stats['since']})", ""]
    rows = [["extractor", *statuses]]
    rows.append(["all", *(str(stats["created_by_status"][s]) for s in statuses)])
    for slug, counts in sorted(stats["created_by_extractor"].items()):
        rows.append([slug, *(str(counts.get(s, 0)) for s in statuses)])
    lines += _table(rows)
    rate = stats["success_rate"]
    turnaround = "  ".join(
        f"{name} {_seconds(value)}" for name, value in stats["turnaround_seconds"].items()
    )
    lines += [
        "",
        f"Completed: {stats['completed']}   success rate: "
        + ("-" if rate is None else f"{100 * rate:.1f} %"),
        f"Turnaround: {turnaround}",
        "",
        "Queue now, by priority:",
    ]
    rows = [["priority", "active", "pending", "due", "oldest due"]]
    for priority, queue in stats["queue_by_priority"].items():
        rows.append(
            [
                priority,
                str(queue["active"]),
                str(queue["pending"]),
                str(queue["due"]),
                _seconds(queue["oldest_due_seconds"]),
            ]
        )
    return lines + _table(rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if n == 0 else cell.rjust(w)
            for n, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
