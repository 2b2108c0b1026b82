"""A batch's aggregate as `GET /api/v1/batches/<id>/` computes it from its jobs (the index
`job_batch_status_idx`), with 10,000 jobs in the batch and many more jobs stored beside it,
through Django's request path in process; and the completion check each terminal transition of
a batch's job runs after its commit (`batch_completion.batches_complete`). First, on a durable
PostgreSQL, the batch rows (`bench.batch_runs`): the engine's rate with and without a batch, and
`batch.completed`'s latency.

    PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.batches

    BENCH_BATCH_JOBS (10,000)        jobs in each measured batch
    BENCH_BATCH_BACKGROUND (200,000) other jobs stored (no batch)
    BENCH_BATCH_RUN_JOBS (10,000)    jobs in each batch row's run; 0 leaves those rows out (their
                                     other knobs: see `bench.batch_runs`)
"""

import itertools
import os
import statistics
import time

from bench import batch_runs, setup

JOBS = int(os.environ.get("BENCH_BATCH_JOBS", 10_000))
BACKGROUND = int(os.environ.get("BENCH_BATCH_BACKGROUND", 200_000))
REQUESTS = 200


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"p50 {statistics.median(ordered) * 1000:6.2f} ms, p95 {p95 * 1000:6.2f} ms"


def timed(action, times: int = REQUESTS) -> list[float]:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def deltas(batches: dict) -> str:
    """What the other design would read: a row of (-1 from, +1 to) per transition, four
    transitions a job (pending → submitting → submitted → processing → an end), summed by
    status. A temporary table, as that design would index it."""
    from django.db import connection

    batch = batches["a tenth failed"]
    moves = ["pending", "submitting", "submitted", "processing", "succeeded"]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE bench_delta (batch_id uuid, status text, n int)")
        for before, after in itertools.pairwise(moves):
            cursor.execute(
                "INSERT INTO bench_delta SELECT %s, s, d FROM generate_series(1, %s), "
                "(VALUES (%s, -1), (%s, 1)) v(s, d)",
                [batch.pk, JOBS, before, after],
            )
        cursor.execute("CREATE INDEX ON bench_delta (batch_id, status) INCLUDE (n)")
        cursor.execute("VACUUM ANALYZE bench_delta")

        def read() -> None:
            cursor.execute(
                "SELECT status, sum(n) FROM bench_delta WHERE batch_id = %s GROUP BY status",
                [batch.pk],
            )
            cursor.fetchall()

        return percentiles(timed(read))


def main() -> None:
    setup()
    if batch_runs.JOBS:
        # First, as `bench.engine` runs them: on a database with no other jobs stored.
        batch_runs.batch_rows()
    from django.contrib.auth.models import Permission
    from django.db import connection
    from django.db.models import Count, Max, Min
    from rest_framework.test import APIClient

    from bench.data import add_batch_jobs, add_terminal_jobs
    from jobtracking.models import Batch, ExtractionJob
    from jobtracking.selectors import batch_summary
    from jobtracking.services.batch_completion import batches_complete
    from jobtracking.services.tokens import token_issue
    from tests.factories import ExtractorFactory, UserFactory

    stamp = int(time.time())
    user = UserFactory(username=f"bench-batches-{stamp}")
    user.user_permissions.add(Permission.objects.get(codename="view_extractionjob"))
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(user=user)}")
    extractor = ExtractorFactory(slug=f"bench-batches-{stamp}")
    add_terminal_jobs(extractor.pk, BACKGROUND, f"bg{stamp}-", requested_by_id=user.pk)
    shapes = {"a tenth failed": 10, "every job failed": 1}
    batches = {}
    for label, failed_every in shapes.items():
        batch = Batch.objects.create(requested_by=user, closed_at=None)
        add_batch_jobs(
            extractor.pk, batch.pk, JOBS, f"b{stamp}-{failed_every}-", user.pk, failed_every
        )
        batches[label] = batch
    with connection.cursor() as cursor:
        # As autovacuum leaves a table at rest: the visibility map lets index-only scans skip
        # the heap.
        cursor.execute(f"VACUUM ANALYZE {ExtractionJob._meta.db_table}")
    stored = ExtractionJob.objects.count()
    print(
        f"GET /api/v1/batches/<id>/ with {JOBS:,} jobs in the batch, {stored:,} stored "
        f"({REQUESTS} requests each):"
    )
    for label, batch in batches.items():
        url = f"/api/v1/batches/{batch.pk}/"
        assert client.get(url).json()["total"] == JOBS
        print(f"  {label:<32} {percentiles(timed(lambda url=url: client.get(url)))}")
    for label, batch in batches.items():
        alone = timed(lambda batch=batch: batch_summary(batch, with_failed_jobs=True))
        print(f"  {'queries only, ' + label:<32} {percentiles(alone)}")
    plan = (
        ExtractionJob.objects.filter(batch_id__in=[batches["a tenth failed"].pk])
        .order_by()
        .values_list("batch_id", "status", "error_code")
        .annotate(n=Count("*"), first=Min("created_at"), last=Max("completed_at"))
        .explain()
    )
    scans = [line.strip(" ->") for line in plan.splitlines() if "Scan" in line]
    print(f"  the aggregate's plan: {'; '.join(scans)}")
    listed = timed(lambda: client.get("/api/v1/batches/"))
    print(f"  {'list (both batches)':<32} {percentiles(listed)}")
    print(f"the alternative, append-only deltas (uncompacted): {deltas(batches)}")
    running = batches["a tenth failed"]
    Batch.objects.filter(pk=running.pk).update(closed_at=running.created_at)
    check = timed(lambda: batches_complete([running.pk]), times=1000)
    print(f"completion check after a job's terminal move (batch running): {percentiles(check)}")


if __name__ == "__main__":
    main()
