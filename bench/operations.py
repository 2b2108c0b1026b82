"""Operations at scale: requeue of the failed jobs among BENCH_OPS_JOBS (1,000,000 → 100,000
failed) by filter, then purge of them all (rows/s and peak memory of the purging process).

    make bench            (or: .ci/with_postgres.sh .venv/bin/python -m bench.operations)
"""

import io
import os
import resource
import time

from bench import setup


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from bench.data import add_terminal_jobs
    from jobtracking.models import ExtractionJob
    from tests.factories import ExtractorFactory

    count = int(os.environ.get("BENCH_OPS_JOBS", 1_000_000))
    extractor = ExtractorFactory(slug=f"bench-ops-{int(time.time())}")
    add_terminal_jobs(extractor.pk, count, "ops-")
    failed = ExtractionJob.objects.filter(extractor=extractor, status="failed").count()

    started = time.perf_counter()
    call_command(
        "requeue_jobs",
        "--status",
        "failed",
        "--extractor",
        extractor.slug,
        "--reason",
        "bench",
        "--batch-size",
        "1000",
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    elapsed = time.perf_counter() - started
    print(
        f"requeue_jobs: {failed:,} failed jobs of {count:,} in {elapsed:.1f} s "
        f"({failed / elapsed:,.0f} jobs/s)"
    )

    # Make everything purgeable: the requeued jobs are cancelled (terminal) first, and the
    # retention window is zero days for every status.
    ExtractionJob.objects.filter(extractor=extractor, status="pending").update(
        status="cancelled", completed_at="2000-01-01T00:00:00Z", due_at=None, claimed_at=None
    )
    settings.JOBS_RETENTION_DAYS = dict.fromkeys(settings.JOBS_RETENTION_DAYS, 0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobtracking_jobstatuschange")
        (history_rows,) = cursor.fetchone()
    before = peak_rss_mib()
    started = time.perf_counter()
    call_command(
        "purge_jobs",
        "--extractor",
        extractor.slug,
        "--batch-size",
        "2000",
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    elapsed = time.perf_counter() - started
    rows = count + history_rows
    print(
        f"purge_jobs: {count:,} jobs (+{history_rows:,} history rows) in {elapsed:.1f} s "
        f"({rows / elapsed:,.0f} rows/s); peak memory {peak_rss_mib():.0f} MiB "
        f"(before the purge: {before:.0f} MiB)"
    )
    assert not ExtractionJob.objects.filter(extractor=extractor).exists()


if __name__ == "__main__":
    main()
