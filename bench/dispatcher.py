"""Dispatcher claim cost: claiming 1,000 due jobs with 10,000 vs 1,000,000 jobs stored.

make bench            (or: .ci/with_postgres.sh .venv/bin/python -m bench.dispatcher)
"""

import os
import statistics
import time
from datetime import timedelta
from unittest import mock

from bench import setup


def main() -> None:
    setup()
    from django.utils import timezone

    from bench.data import add_due_jobs, add_terminal_jobs
    from jobtracking.engine import dispatcher
    from jobtracking.models import ExtractionJob
    from tests.factories import ExtractorFactory

    due, small, large = 1000, 10_000, int(os.environ.get("BENCH_LARGE_JOBS", 1_000_000))
    extractor = ExtractorFactory(slug=f"bench-dispatch-{int(time.time())}")
    add_due_jobs(extractor.pk, due, "due-")

    def claim_time() -> float:
        samples = []
        for _ in range(7):
            ExtractionJob.objects.filter(extractor=extractor, status="pending").update(
                due_at=timezone.now() - timedelta(seconds=1), claimed_at=None
            )
            # Measure the claim itself; enqueueing is the broker's cost, not the claim's.
            with mock.patch.object(dispatcher, "enqueue_batches"):
                started = time.perf_counter()
                claimed = dispatcher.claim_due_jobs(batch_size=due, lease=timedelta(seconds=30))
                samples.append(time.perf_counter() - started)
            assert len(claimed) == due
        return statistics.median(samples)

    add_terminal_jobs(extractor.pk, small - due, "small-")
    at_small = claim_time()
    print(f"claim {due} due jobs with {small:>9,} stored: {at_small * 1000:8.1f} ms")
    started = time.perf_counter()
    add_terminal_jobs(extractor.pk, large - small, "large-")
    print(f"  (inserted {large - small:,} terminal jobs in {time.perf_counter() - started:.0f} s)")
    at_large = claim_time()
    print(f"claim {due} due jobs with {large:>9,} stored: {at_large * 1000:8.1f} ms")
    print(f"ratio large/small: {at_large / at_small:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
