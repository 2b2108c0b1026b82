"""The delivery lane's rounds over a backlog: what claiming and recording a delivery costs
when few are due and when a receiver back from an outage has many waiting. No POST is made
(each is recorded as answered 204): this measures the lane's database work, which should not
grow with the backlog. Per delivery: the lane's CPU (this process) and its PostgreSQL
backend's, and the wall time; the ratio of the large backlog to the small one (target ~1.0x).

    BENCH_BACKLOG_SMALL (1,000) and BENCH_BACKLOG_LARGE (20,000): due deliveries at the start
        of a drain; a run of the small backlog is LARGE / SMALL drains of it, so that both
        runs send as many deliveries
    BENCH_BACKLOG_REPEATS (3): runs of each, alternating; medians are printed

`PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.delivery_backlog`
"""

import os
import statistics
import time
import uuid
from datetime import timedelta

from bench import setup
from bench.engine import cpu_seconds

SMALL = int(os.environ.get("BENCH_BACKLOG_SMALL", 1_000))
LARGE = int(os.environ.get("BENCH_BACKLOG_LARGE", 20_000))
REPEATS = int(os.environ.get("BENCH_BACKLOG_REPEATS", 3))


def backend_pid() -> int:
    """This connection's PostgreSQL backend (on this machine)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def backlog(subscription, job, payload: dict, size: int) -> None:
    """`size` due deliveries of as many events, each with a job's payload."""
    from django.utils import timezone

    from jobtracking.models import JobEvent, WebhookDelivery

    events = JobEvent.objects.bulk_create(
        JobEvent(job=job, type="job.succeeded", payload=payload) for _ in range(size)
    )
    now = timezone.now()
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(event=event, subscription=subscription, next_attempt_at=now)
        for event in events
    )


def drain(limit: int) -> tuple[int, float, float, float]:
    """Rounds of the lane, each answered 204, until nothing is due: the deliveries sent, the
    lane's CPU seconds, its backend's and the wall time."""
    from django.conf import settings
    from django.utils import timezone

    from jobtracking.services.deliveries import deliveries_claim_due, deliveries_record
    from jobtracking.webhooks.sending import Outcome

    lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
    lane, backend = [os.getpid()], [backend_pid()]
    cpu, backend_cpu = cpu_seconds(lane), cpu_seconds(backend)
    started, sent = time.perf_counter(), 0
    while deliveries := deliveries_claim_due(limit=limit, lease=lease)[0]:
        answered = Outcome(204, "", "", timezone.now(), 1)
        deliveries_record([(delivery, answered, None) for delivery in deliveries])
        sent += len(deliveries)
    return (
        sent,
        cpu_seconds(lane) - cpu,
        cpu_seconds(backend) - backend_cpu,
        time.perf_counter() - started,
    )


def run(subscription, job, payload: dict, size: int, limit: int) -> dict:
    """Drains of a backlog of `size` until LARGE deliveries were sent; per delivery costs."""
    totals = [0, 0.0, 0.0, 0.0]
    for _ in range(max(1, LARGE // size)):
        backlog(subscription, job, payload, size)
        totals = [total + part for total, part in zip(totals, drain(limit), strict=True)]
    sent, cpu, backend, wall = totals
    return {
        "sent": sent,
        "cpu_ms": 1000 * cpu / sent,
        "backend_ms": 1000 * backend / sent,
        "wall_ms": 1000 * wall / sent,
    }


def main() -> None:
    setup()
    from django.conf import settings

    from jobtracking.events import job_event_payload
    from jobtracking.models import ExtractionJob, WebhookSubscription
    from tests.factories import ExtractionJobFactory

    run_id = uuid.uuid4().hex[:8]  # factories count from 0 in each process
    made = ExtractionJobFactory(extractor__slug=f"bench-backlog-{run_id}", file_id=run_id)
    job = ExtractionJob.objects.select_related("extractor", "requested_by").get(pk=made.pk)
    payload = job_event_payload(job)
    subscription = WebhookSubscription.objects.create(
        url="http://127.0.0.1:9/hook",
        description="bench.delivery_backlog",
        all_event_types=True,
        all_jobs=True,
    )
    limit = settings.WEBHOOK_LANE_BATCH_SIZE
    runs: dict[int, list[dict]] = {SMALL: [], LARGE: []}
    try:
        for repeat in range(1, REPEATS + 1):
            for size in (SMALL, LARGE):
                runs[size].append(measured := run(subscription, job, payload, size, limit))
                print(
                    f"repeat {repeat}, backlog {size:,}: {measured['sent']:,} sent in rounds "
                    f"of {limit}; per delivery: lane CPU {measured['cpu_ms']:.3f} ms, "
                    f"PostgreSQL {measured['backend_ms']:.3f} ms, wall "
                    f"{measured['wall_ms']:.3f} ms"
                )
    finally:
        subscription.delete()
    print("\n| backlog | lane CPU ms a delivery | PostgreSQL ms | wall ms |")
    print("| --- | --- | --- | --- |")
    medians = {
        size: {key: statistics.median(each[key] for each in runs[size]) for key in runs[size][0]}
        for size in runs
    }
    for size, median in medians.items():
        print(
            f"| {size:,} | {median['cpu_ms']:.3f} | {median['backend_ms']:.3f} "
            f"| {median['wall_ms']:.3f} |"
        )
    small, large = medians[SMALL], medians[LARGE]
    print(
        f"large / small: lane CPU {large['cpu_ms'] / small['cpu_ms']:.2f}x, PostgreSQL "
        f"{large['backend_ms'] / small['backend_ms']:.2f}x, wall "
        f"{large['wall_ms'] / small['wall_ms']:.2f}x (target ~1.0x: a round's cost does not "
        "grow with the backlog)"
    )


if __name__ == "__main__":
    main()
