"""Priorities and fair share, end to end on a durable PostgreSQL (`make bench` runs it under
`PG_DURABLE=1 .ci/with_postgres.sh`): client A bulk-creates a backlog (bulk priority, the bulk
default); one second later client B creates single jobs (normal priority, the default), one after
another. The same stack as `bench.engine` (sandbox, two workers, one dispatcher).

It prints B's times from creation to `submitting` and to finished (median, p95, max), A's
throughput with B against A's throughput alone (a run before, same stack), and how much of A's
backlog was still waiting when B's last job was submitted.

    BENCH_FAIR_A_JOBS (20,000)  A's backlog
    BENCH_FAIR_B_JOBS (20)      B's single jobs
"""

import os
import statistics
import threading
import time

from bench import setup
from bench.engine import serve_samples, start_stack, stop_stack

A_JOBS = int(os.environ.get("BENCH_FAIR_A_JOBS", 20_000))
B_JOBS = int(os.environ.get("BENCH_FAIR_B_JOBS", 20))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def client(name: str):
    from django.contrib.auth import get_user_model

    from jobtracking.models import ActorType
    from jobtracking.services import Actor

    user, _ = get_user_model().objects.get_or_create(username=name)
    return Actor(ActorType.API, user)


def items(extractor, files: str, prefix: str, count: int) -> list:
    from jobtracking.services import NewJob

    return [
        NewJob(
            extractor=extractor,
            file_id=f"{prefix}-{n}",
            file_name="budget.csv",
            source_url=f"{files}/budget.csv",
        )
        for n in range(count)
    ]


def bulk_create(extractor, files: str, actor, prefix: str, count: int) -> None:
    from django.db import connection

    from jobtracking.services import job_create_many

    batch = items(extractor, files, prefix, count)
    for start in range(0, len(batch), 500):
        job_create_many(batch[start : start + 500], actor=actor)
    connection.close()


def finished(extractor, actor) -> bool:
    from jobtracking import states
    from jobtracking.models import ExtractionJob

    jobs = ExtractionJob.objects.filter(extractor=extractor, requested_by=actor.user)
    return not jobs.filter(status__in=states.ACTIVE).exists()


def throughput(extractor, actor, count: int) -> float:
    from django.db.models import Max, Min

    from jobtracking.models import ExtractionJob

    span = ExtractionJob.objects.filter(extractor=extractor, requested_by=actor.user).aggregate(
        first=Min("created_at"), last=Max("completed_at")
    )
    return count / (span["last"] - span["first"]).total_seconds()


def run(
    files: str,
    *,
    with_b: bool,
    a_count: int = A_JOBS,
    b_count: int = B_JOBS,
    stack_args: dict | None = None,
) -> dict:
    """One run on a fresh stack (`stack_args` for `start_stack`; two workers, one cluster, one
    dispatcher unless given): A's backlog of `a_count` jobs, then, with `with_b`, B's `b_count`
    singles. `bench.engine` calls it for its per-row fairness figure."""
    from bench.engine import new_extractor
    from jobtracking.models import ExtractionJob
    from tests.processes import wait_until

    stack = start_stack(**(stack_args or {"workers": 2, "clusters": 1, "dispatchers": 1}))
    try:
        extractor = new_extractor(stack.sandbox_url)
        a, b = client("bench-client-a"), client("bench-client-b")
        tag = time.time_ns()
        creator = threading.Thread(
            target=bulk_create, args=(extractor, files, a, f"a{tag}", a_count)
        )
        creator.start()
        b_jobs, a_waiting = [], None
        if with_b:
            from jobtracking.services import job_create

            time.sleep(1)
            b_jobs = [
                job_create(new, actor=b) for new in items(extractor, files, f"b{tag}", b_count)
            ]
            wait_until(lambda: finished(extractor, b), 600, "B's jobs")
            a_waiting = ExtractionJob.objects.filter(
                extractor=extractor, requested_by=a.user, status="pending"
            ).count()
        creator.join()
        wait_until(lambda: finished(extractor, a), 3600, "A's jobs")
    finally:
        stop_stack(stack)
    result = {"a_rate": throughput(extractor, a, a_count), "a_waiting": a_waiting}
    if b_jobs:
        result |= b_times([job.pk for job in b_jobs])
    return result


def b_times(job_ids) -> dict:
    from jobtracking.models import ExtractionJob, JobStatusChange

    submitting = dict(
        JobStatusChange.objects.filter(job_id__in=job_ids, to_status="submitting")
        .order_by("changed_at")
        .values_list("job_id", "changed_at")
    )
    jobs = ExtractionJob.objects.filter(pk__in=job_ids)
    to_submit = [(submitting[job.pk] - job.created_at).total_seconds() for job in jobs]
    to_finish = [(job.completed_at - job.created_at).total_seconds() for job in jobs]
    statuses = sorted({job.status_id for job in jobs})
    return {"to_submit": to_submit, "to_finish": to_finish, "b_statuses": statuses}


def describe(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} s, p95 {percentile(values, 0.95):.2f} s, "
        f"max {max(values):.2f} s"
    )


def main() -> None:
    setup()
    files, file_server = serve_samples()
    try:
        alone = run(files, with_b=False)
        shared = run(files, with_b=True)
    finally:
        file_server.terminate()
    print(f"\n== fairness: A bulk-creates {A_JOBS:,} jobs; 1 s later B creates {B_JOBS} singles")
    print(f"B creation -> submitting: {describe(shared['to_submit'])} (target p95 <= 2 s)")
    print(f"B creation -> finished:   {describe(shared['to_finish'])}; {shared['b_statuses']}")
    print(f"A's jobs still pending when B's last job finished: {shared['a_waiting']:,}")
    ratio = shared["a_rate"] / alone["a_rate"]
    print(
        f"A throughput: {shared['a_rate']:.1f} jobs/s with B, {alone['a_rate']:.1f} alone "
        f"-> {ratio:.2f}x (target >= 0.90x)"
    )


if __name__ == "__main__":
    main()
