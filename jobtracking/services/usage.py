"""Usage: the billable pages of every attempt that reached an extractor, and their daily sums.

- `usage_row` is called by the state machine (`transitions._apply`) for each job a move ends,
  which writes the batch's rows with its other rows in the transition's own transaction
  (`services.moves_written`): a batch of the engine adds no statement per job, and an attempt
  is counted exactly when it ends (requeues and resubmissions as new jobs are counted again;
  they are paid again).
- The pages: a succeeded attempt's result counted by the extractor's rules
  (`extraction.registry.billable_pages`); a failed or cancelled one, what the extractor says it
  billed; when it says nothing (Azure on a failed analysis, a cancel or deadline of ours), 0
  pages, marked `rule`: Azure charges for analysed pages only, and a job we end without its word
  yields nothing we could count. An attempt that took a reused result (`services.reuse`) reached
  no extractor: 0 pages, marked `reused`, with its source's billed pages as `pages_saved`; it is
  not a billed attempt (`models.BILLED_ATTEMPT`).
- `usage_roll_up` (a schedule, every minute) folds unrolled rows into `UsageDaily` and
  `UsageMonthly`. Readers add
  the rows not yet folded (`usage_selectors`), so the totals never wait for it.
"""

from collections import defaultdict
from datetime import UTC, datetime

from django.db import connection, transaction
from django.db.models import Sum

from jobtracking import states
from jobtracking.infra.metrics import USAGE_PAGES
from jobtracking.models import (
    BILLED_ATTEMPT,
    ExtractionJob,
    UsageCountedBy,
    UsageDaily,
    UsageMonthly,
    UsageRecord,
    UsageSums,
)

ROLL_UP_CHUNK = 20_000
# An extractor's word on its pages is taken up to what the column holds: a hostile count must
# not make the batch's INSERT fail (it would cost the job its result).
MAX_PAGES = 2**31 - 1
# A sum row's key, and its sums in the order the rollup computes them.
KEY_COLUMNS = ("day", "client_key", "extractor_id", "model_id")
SUM_COLUMNS = ("pages", "pages_saved", "attempts")
# Daily rows per upsert: seven parameters each, within PostgreSQL's 65,535 and SQLite's 32,766.
UPSERT_ROWS = 2_000


def usage_row(
    job: ExtractionJob, billed_pages: int | None, now: datetime, *, saved_pages: int | None = None
) -> UsageRecord | None:
    """The usage of the attempt `job` has just ended (its status is the end), or None when the
    attempt never reached the extractor (no external job) and took no reused result.
    `saved_pages`: the attempt took a reused result, which saved its source's pages."""
    if job.status_id not in states.TERMINAL:
        return None
    pages_saved = 0
    if saved_pages is not None:
        pages, pages_saved, counted_by = 0, min(saved_pages, MAX_PAGES), UsageCountedBy.REUSED
    elif not job.external_job_id:
        return None
    elif billed_pages is None:
        pages, counted_by = 0, UsageCountedBy.RULE
    else:
        pages = min(billed_pages, MAX_PAGES)
        succeeded = job.status_id == states.SUCCEEDED
        counted_by = UsageCountedBy.RESULT if succeeded else UsageCountedBy.EXTRACTOR
    return UsageRecord(
        job_id=job.pk,
        attempt=job.attempt,
        client_id=job.requested_by_id,
        extractor=job.extractor,
        model_id=job.extractor.model_id,
        outcome=job.status_id,
        pages=pages,
        pages_saved=pages_saved,
        counted_by=counted_by,
        recorded_at=now,
        day=now.astimezone(UTC).date(),
    )


def usage_count_on_commit(rows: list[UsageRecord]) -> None:
    """Count the pages of the rows the caller's transaction writes, once it commits."""
    if paid := [row for row in rows if row.pages]:
        transaction.on_commit(lambda: _count(paid))


def _count(rows: list[UsageRecord]) -> None:
    for row in rows:
        USAGE_PAGES.labels(extractor=row.extractor.slug, model=row.model_id).inc(row.pages)


def usage_roll_up() -> int:
    """Fold usage rows not yet rolled up into `UsageDaily`, a chunk per transaction, until none
    is left; returns how many were folded. Concurrent runs take disjoint rows (`SKIP LOCKED`)
    and add to the daily rows with an upsert, so two schedules never count a row twice."""
    folded = 0
    while chunk := _roll_up_chunk():
        folded += chunk
    return folded


def _roll_up_chunk() -> int:
    with transaction.atomic():
        ids = list(
            UsageRecord.objects.select_for_update(skip_locked=True)
            .filter(rolled_up=False)
            .values_list("pk", flat=True)[:ROLL_UP_CHUNK]
        )
        if not ids:
            return 0
        taken = UsageRecord.objects.filter(pk__in=ids)
        sums = list(
            taken.values_list("day", "client_id", "extractor_id", "model_id")
            .order_by()
            .annotate(
                pages_sum=Sum("pages"), saved_sum=Sum("pages_saved"), attempts=Sum(BILLED_ATTEMPT)
            )
        )
        taken.update(rolled_up=True)
        by_month: defaultdict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
        for day, client, extractor, model, *counts in sums:
            month = by_month[day.replace(day=1), client, extractor, model]
            for index, count in enumerate(counts):
                month[index] += count
        months = [(*key, *counts) for key, counts in by_month.items()]
        for model, rows in ((UsageDaily, sums), (UsageMonthly, months)):
            for start in range(0, len(rows), UPSERT_ROWS):
                _add_to(model, rows[start : start + UPSERT_ROWS])
    return len(ids)


def _add_to(model: type[UsageSums], sums: list[tuple]) -> None:
    """Add (day, client, extractor, model, pages, pages saved, attempts) sums to the rows of
    `model`, creating the missing ones: one upsert (PostgreSQL and SQLite both speak `ON
    CONFLICT … DO UPDATE`)."""
    table = connection.ops.quote_name(model._meta.db_table)
    row = "(" + ", ".join(["%s"] * (len(KEY_COLUMNS) + len(SUM_COLUMNS))) + ")"
    params = [
        value
        for day, client, extractor, model, *counts in sums
        for value in (day, client or 0, extractor, model, *counts)
    ]
    additions = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in SUM_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(KEY_COLUMNS + SUM_COLUMNS)}) "
            f"VALUES {', '.join([row] * len(sums))} "
            f"ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {additions}",
            params,
        )
