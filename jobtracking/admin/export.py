"""The jobs list's CSV export: a header people read, client text made safe for spreadsheets,
moments in ISO 8601 UTC ("Z", as the API writes them), streamed a chunk of rows at a time."""

import csv
from collections.abc import Callable, Iterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from jobtracking.models import TURNAROUND, ExtractionJob, Priority
from jobtracking.representation import moment

# A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value):
    """Text that a spreadsheet would run as a formula gets a leading quote; other values pass."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _seconds(value) -> float | None:
    return round(value.total_seconds(), 3) if value is not None else None


def _as_is(value):
    return value


# (header, what the query reads, how the value is written). The turnaround is the model's rule
# (`TURNAROUND`: the current attempt's), as in the API, the job list and the stats.
CSV_COLUMNS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("Job ID", "id", _as_is),
    ("Status", "status_id", _as_is),
    ("Extractor", "extractor__slug", _as_is),
    ("File ID", "file_id", _as_is),
    ("File name", "file_name", _as_is),
    ("Priority", "priority", lambda value: Priority(value).code),
    ("Attempt", "attempt", _as_is),
    # Who asked: the API client or staff member; empty for a command's or the system's jobs.
    ("Requested by", "requested_by__username", _as_is),
    ("Error code", "error_code", _as_is),
    ("Error message", "error_message", _as_is),
    ("Created (UTC)", "created_at", moment),
    ("Requeued (UTC)", "requeued_at", moment),
    ("Completed (UTC)", "completed_at", moment),
    ("Turnaround (seconds)", "turnaround", _seconds),
]


class Echo:
    def write(self, value):
        return value


def _lines(jobs: QuerySet[ExtractionJob]) -> Iterator[str]:
    writer = csv.writer(Echo())
    yield writer.writerow([header for header, _source, _write in CSV_COLUMNS])
    rows = (
        jobs.annotate(turnaround=TURNAROUND)
        .order_by("-created_at")
        .values_list(*(source for _header, source, _write in CSV_COLUMNS))
        .iterator(chunk_size=2000)
    )
    for row in rows:
        yield writer.writerow(
            [
                csv_safe(write(value))
                for value, (_header, _source, write) in zip(row, CSV_COLUMNS, strict=True)
            ]
        )


def jobs_csv_response(jobs: QuerySet[ExtractionJob]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_lines(jobs), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="extraction-jobs.csv"'
    return response
