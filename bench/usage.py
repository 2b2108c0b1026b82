"""Usage: the month's summary at 10,000,000 jobs' usage, and the engine's rate with usage
recording against without, in one sitting (run under `PG_DURABLE=1 .ci/with_postgres.sh`, as
`make bench` does).

1. Summary. 10,000,000 usage rows (one per job attempt: 500 clients, 3 extractors, over the last
   365 days) are generated in SQL and folded into daily sums as the rollup folds them, plus an
   unrolled tail of `BENCH_USAGE_TAIL` rows today (what a minute of the engine at full rate
   leaves between two rollups), with a price per extractor and a model's own price from the
   first of the month before last. It prints the p50 and p95 of `usage_summary` for every
   client (target p95 <= 100 ms): last month by client and by client, extractor and model
   (month sums), this month so far and the last 30 days by client (day sums), all taken in
   turn, round after round, in several sittings (p95: the median of the sittings', with the
   worst and the pooled one beside it), with the load average; then how fast the rollup
   folds the tail.
2. Engine. `BENCH_USAGE_JOBS` jobs through the sandbox on a fresh two-worker stack, without usage
   recording (`bench.off`'s "usage") and with it, alternating for `BENCH_USAGE_ROUNDS` rounds
   (`bench.engine.feature_ab`); it prints every run's jobs/s, the median of the rounds' ratios
   (target >= 0.95x) and the ratio of the medians, and the usage rows each run wrote (one per
   job with recording, none without).

    BENCH_USAGE_ROWS (10,000,000)  usage rows generated; BENCH_USAGE_TAIL (6,000) unrolled
    BENCH_USAGE_QUERIES (50)       summaries timed per grouping and sitting
    BENCH_USAGE_SITTINGS (5)       sittings: p95 is the median of theirs (the worst printed too)
    BENCH_USAGE_PORTABLE (1)       also time the portable summary (SQLite's; PostgreSQL's before
                                   its one statement), interleaved: before and after in one run
    BENCH_USAGE_JOBS (3,000)       jobs a run; BENCH_USAGE_ROUNDS (3) rounds; 0 jobs: no runs
"""

import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from bench import setup
from bench.engine import feature_ab

ROWS = int(os.environ.get("BENCH_USAGE_ROWS", 10_000_000))
TAIL = int(os.environ.get("BENCH_USAGE_TAIL", 6_000))
QUERIES = int(os.environ.get("BENCH_USAGE_QUERIES", 50))
SITTINGS = int(os.environ.get("BENCH_USAGE_SITTINGS", 5))
PORTABLE = os.environ.get("BENCH_USAGE_PORTABLE", "1") == "1"
JOBS = int(os.environ.get("BENCH_USAGE_JOBS", 3_000))
ROUNDS = int(os.environ.get("BENCH_USAGE_ROUNDS", 3))
CLIENTS, DAYS = 500, 365


def generate(count: int, *, rolled_up: bool, days: int, first: int) -> None:
    """`count` usage rows, ids `first`…, spread evenly over the last `days` days, clients and
    extractors in turn (sequential job ids: the unique index takes them in order)."""
    from django.db import connection

    from jobtracking.models import UsageRecord

    table = UsageRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH c AS (SELECT array_agg(id ORDER BY id) AS ids FROM auth_user
                       WHERE username LIKE 'usage-client-%%'),
                 e AS (SELECT array_agg(id ORDER BY id) AS ids, array_agg(model_id ORDER BY id)
                       AS models FROM extraction_extractor WHERE slug LIKE 'usage-bench-%%')
            INSERT INTO {table} (job_id, attempt, client_id, extractor_id, model_id, outcome,
                                 pages, counted_by, recorded_at, day, rolled_up)
            SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(n), 12, '0'))::uuid, 1,
                   c.ids[1 + n %% cardinality(c.ids)], e.ids[1 + n %% 3], e.models[1 + n %% 3],
                   'succeeded', 1 + n %% 7, 'result', t, (t AT TIME ZONE 'UTC')::date, %s
            FROM c, e, generate_series(%s::bigint, %s::bigint) AS n,
                 LATERAL (SELECT now() - (n - %s) * %s * interval '1 second' AS t) AS m
            """,
            [rolled_up, first, first + count - 1, first, days * 86400 / count],
        )


def fold_generated() -> None:
    """The daily sums of the generated rows, as the rollup would have written them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobtracking_usagedaily (day, client_key, extractor_id, model_id, pages, "
            "attempts) SELECT day, coalesce(client_id, 0), extractor_id, model_id, sum(pages), "
            "count(*) FROM jobtracking_usagerecord WHERE rolled_up GROUP BY 1, 2, 3, 4"
        )
        cursor.execute(
            "INSERT INTO jobtracking_usagemonthly (day, client_key, extractor_id, model_id, "
            "pages, attempts) SELECT date_trunc('month', day)::date, client_key, extractor_id, "
            "model_id, sum(pages), sum(attempts) FROM jobtracking_usagedaily GROUP BY 1, 2, 3, 4"
        )
        cursor.execute("ANALYZE jobtracking_usagerecord")
        cursor.execute("ANALYZE jobtracking_usagedaily")
        cursor.execute("ANALYZE jobtracking_usagemonthly")


def prepare() -> None:
    from django.contrib.auth import get_user_model

    from jobtracking.models import UsagePrice
    from tests.factories import ExtractorFactory

    get_user_model().objects.bulk_create(
        get_user_model()(username=f"usage-client-{n}") for n in range(CLIENTS)
    )
    today = datetime.now(UTC).date()
    for n, model in enumerate(("prebuilt-read", "prebuilt-layout", "prebuilt-invoice")):
        extractor = ExtractorFactory(slug=f"usage-bench-{n}", model_id=model)
        # A price for all its models a year ago, and its model's own from the first of the
        # month before last: the summary prices each day by the one in force.
        changed = (today.replace(day=1) - timedelta(days=40)).replace(day=1)
        for since, model_id, price in (
            (today - timedelta(days=DAYS), "", "1.5"),
            (changed, model, "10"),
        ):
            UsagePrice.objects.create(
                extractor=extractor,
                model_id=model_id,
                effective_from=since,
                price_per_1000_pages=Decimal(price),
            )
    started = time.perf_counter()
    generate(ROWS, rolled_up=True, days=DAYS, first=1)
    fold_generated()
    seconds = time.perf_counter() - started
    print(f"generated {ROWS:,} usage rows and their daily sums in {seconds:.0f} s")
    generate(TAIL, rolled_up=False, days=1, first=ROWS + 1)


def portable_summary(*, client, start, end, group_by):
    """`usage_summary` as SQLite answers it (and as PostgreSQL did before its statement):
    grouped by price in the database, priced, added up and named in Python."""
    from jobtracking import usage_selectors as selectors

    keys = list(dict.fromkeys(group_by))
    prices = selectors._price_table()
    sources = selectors._sources(client, start, end, prices, by_day="day" in keys)
    return selectors._summed_in_python(sources, keys, prices)


def load() -> str:
    with open("/proc/loadavg") as averages:
        return " ".join(averages.read().split()[:3])


def summary_timings() -> None:
    from jobtracking.models import UsageDaily
    from jobtracking.services.usage import usage_roll_up
    from jobtracking.usage_selectors import usage_summary

    today = datetime.now(UTC).date()
    this_month = today.replace(day=1)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    print(f"daily rows: {UsageDaily.objects.count():,}; unrolled tail: {TAIL:,} rows")
    asked = (
        (last_month, this_month - timedelta(days=1), ["client"]),
        (last_month, this_month - timedelta(days=1), ["client", "extractor", "model"]),
        (this_month, today, ["client"]),
        (today - timedelta(days=29), today, ["client"]),
    )
    paths = {"statement": usage_summary}
    if PORTABLE:
        paths["portable"] = portable_summary
    runs = [(path, ask) for path in paths for ask in asked]
    lines = {}
    for path, (start, end, group_by) in runs:  # warm up; the same lines either way
        found = paths[path](client=None, start=start, end=end, group_by=group_by)
        lines.setdefault((start, end, *group_by), sorted(map(repr, found)))
        assert lines[start, end, *group_by] == sorted(map(repr, found)), "the paths disagree"
    # Every sitting runs the summaries in turn, a different one first each round, so that a
    # burst of load on the shared machine touches them all alike; a p95 is taken per sitting
    # and per summary, and the median of the sittings' p95s is the figure, beside the worst.
    times: dict[tuple, list[list[float]]] = {run: [] for run in range(len(runs))}
    print(f"load average before: {load()}")
    for sitting in range(SITTINGS):
        for run in times:
            times[run].append([])
        for round_ in range(QUERIES):
            for offset in range(len(runs)):
                run = (round_ + offset) % len(runs)
                path, (start, end, group_by) = runs[run]
                began = time.perf_counter()
                paths[path](client=None, start=start, end=end, group_by=group_by)
                times[run][sitting].append(1000 * (time.perf_counter() - began))
        print(f"sitting {sitting + 1} of {SITTINGS} done, load average {load()}")
    print(f"load average after: {load()}")
    for run, sittings in times.items():
        path, (start, end, group_by) = runs[run]
        p95s = [statistics.quantiles(samples, n=20)[-1] for samples in sittings]
        every = [sample for samples in sittings for sample in samples]
        p95 = statistics.median(p95s)
        print(
            f"summary {start} to {end} by {','.join(group_by)} ({path}): "
            f"{len(lines[start, end, *group_by])} lines, p50 {statistics.median(every):.1f} ms, "
            f"p95 {p95:.1f} ms ({p95 / 100:.2f}x the 100 ms target; median of {SITTINGS} "
            f"sittings' p95s: {', '.join(f'{v:.1f}' for v in p95s)}; "
            f"worst {max(p95s):.1f}, all {len(every)} samples' p95 "
            f"{statistics.quantiles(every, n=20)[-1]:.1f})"
        )
    began = time.perf_counter()
    folded = usage_roll_up()
    seconds = time.perf_counter() - began
    rate = folded / seconds
    print(f"rollup: folded {folded:,} rows in {seconds * 1000:.0f} ms ({rate:,.0f} rows/s)")


def usage_rows(extractor_id: int) -> tuple[int, str]:
    """A run's usage rows: one a job with recording, none without."""
    from jobtracking.models import UsageRecord

    rows = UsageRecord.objects.filter(extractor_id=extractor_id).count()
    return rows, f"{rows:,} usage rows"


def main() -> None:
    setup()
    from django.db import connection

    try:
        prepare()
        summary_timings()
        if JOBS:
            feature_ab("usage", "usage recording", JOBS, ROUNDS, usage_rows)
    finally:
        connection.close()


if __name__ == "__main__":
    main()
