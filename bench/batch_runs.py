"""The batch rows of `bench.batches`: the engine's rate for jobs in one closed batch, as a ratio
of the same number of jobs with no batch in the same sitting (target >= 0.90x), and how long
after the batch's last job ended `batch.completed` was published (target <= 1 s).

Runs alternate no batch, batch, round after round, each on a fresh stack (two workers, one
dispatcher, as `bench.engine`'s main run) with a fresh extractor, and each timed as
`bench.engine.run_jobs` times its runs: from the start of the jobs' creation until none is
active. Both create the same jobs `BULK` (500) a call, through the services the API calls: with
no batch `job_create_many` (`POST /jobs/bulk/`); in a batch `batch_create` with the first 500
(`POST /batches/`), `batch_add_jobs` with the rest (`POST /batches/{id}/jobs/`), then
`batch_close` (`POST /batches/{id}/close/`). Keep `BENCH_CREATE` at its default (bulk): with
`single` the no-batch runs would create one job a call and the batch runs would not.

Per run: jobs/s, SQL statements and commits per job, CPU ms per job by process, and the cores
other processes on the machine kept busy on average (the noise: /proc/stat less the run's own
processes); for a batch run the completion checks run (calls of `batch_completion`'s UPDATE),
the `batch.completed` events (exactly one expected) and the latency: the event's `created_at`
minus the latest `completed_at` of the batch's jobs (the stamp of a job's terminal transition).
The table's footnote adds the ratio of the rows' CPU per job (every process of the stack): what
the rate ratio would be on a CPU-bound machine with nothing else running.

    BENCH_BATCH_RUN_JOBS (10,000)  jobs in each run; 0 leaves the rows out of `bench.batches`
    BENCH_BATCH_ROUNDS (2)         rounds of no batch, batch
    BENCH_BATCH_SETTLE (30)        seconds a batch run waits for `batch.completed` once its
                                   jobs have ended

The rows alone: `PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.batch_runs`.
"""

import os
import statistics
import time

from bench import setup
from bench.engine import Monitor, create_jobs, job_chunks, run_jobs, serve_samples

JOBS = int(os.environ.get("BENCH_BATCH_RUN_JOBS", 10_000))
ROUNDS = int(os.environ.get("BENCH_BATCH_ROUNDS", 2))
SETTLE = float(os.environ.get("BENCH_BATCH_SETTLE", 30))
STACK = {"workers": 2, "clusters": 1, "dispatchers": 1}
ROWS = ("no batch", "one closed batch")


def create_batch(extractor, count: int, files: str):
    """The jobs in one batch, made as a client makes it: created with the first call's jobs,
    the others added a call at a time, then closed."""
    from jobtracking.services import Actor
    from jobtracking.services.batches import NewBatch, batch_add_jobs, batch_close, batch_create

    first, *rest = job_chunks(extractor, count, files)
    batch = batch_create(NewBatch(), first, actor=Actor.system()).batch
    for chunk in rest:
        batch_add_jobs(batch_id=batch.pk, items=chunk, actor=Actor.system())
    return batch_close(batch_id=batch.pk)


def completion(monitor: Monitor, batch) -> dict:
    """Wait (at most SETTLE seconds) for the batch's `batch.completed`; its latency after the
    last job's end, the events published and the completion checks run."""
    from django.db.models import Max

    from jobtracking import states
    from jobtracking.infra.rows import table
    from jobtracking.models import Batch, ExtractionJob, JobEvent

    events = JobEvent.objects.filter(batch=batch, type=states.BATCH_COMPLETED)
    deadline = time.monotonic() + SETTLE
    while not events.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    published = sorted(events.values_list("created_at", flat=True))
    last = ExtractionJob.objects.filter(batch=batch).aggregate(at=Max("completed_at"))["at"]
    (checks,) = monitor.one(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE %s",
        [f"UPDATE {table(Batch)} SET %NOT EXISTS%"],
    )
    return {
        "events": len(published),
        "latency_s": (published[0] - last).total_seconds() if published else None,
        "checks": int(checks),
    }


def measure(monitor: Monitor, files: str, label: str) -> dict:
    if label == ROWS[0]:
        return run_jobs(monitor, files, JOBS, label, STACK, create=create_jobs)
    done: dict = {}

    def create(extractor, count: int, files: str):
        batch = create_batch(extractor, count, files)
        return lambda: done.update(completion(monitor, batch))

    return run_jobs(monitor, files, JOBS, label, STACK, create=create) | done


def latency(run: dict) -> str:
    if run["latency_s"] is None:
        return f"NOT published within {SETTLE:.0f} s"
    return f"{run['latency_s']:.3f} s"


def report(run: dict, round_: int) -> None:
    cpu = ", ".join(f"{name} {ms:.1f}" for name, ms in run["cpu"].items())
    print(
        f"batches, round {round_}, {run['label']}: {run['jobs']:,} jobs in {run['wall_s']:.1f} s "
        f"-> {run['rate']:.1f} jobs/s (creation {run['created_s']:.1f} s); {run['outcome']}; "
        f"{run['statements']:.2f} statements, {run['commits']:.2f} commits a job; CPU ms a job: "
        f"{cpu}; other processes kept {run['others_cores']:.2f} cores busy"
    )
    if "events" in run:
        print(
            f"  batch.completed {latency(run)} after the last job's end; {run['events']} "
            f"event(s); {run['checks']:,} completion checks ({run['checks'] / run['jobs']:.3f} "
            "a job)"
        )


def rows_table(runs: list[dict]) -> None:
    by_label = {label: [run for run in runs if run["label"] == label] for label in ROWS}
    base = statistics.median(run["rate"] for run in by_label[ROWS[0]])
    pairs = zip(by_label[ROWS[0]], by_label[ROWS[1]], strict=True)
    per_round = ", ".join(f"{batch['rate'] / alone['rate']:.2f}x" for alone, batch in pairs)
    cpu = {
        label: statistics.median(sum(run["cpu"].values()) for run in rows)
        for label, rows in by_label.items()
    }
    print(
        "\n| run | jobs | jobs/s (median) | runs (jobs/s) | vs no batch | statements/job "
        "| commits/job | CPU ms/job | others' cores | completion checks/job "
        "| batch.completed after the last job |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label in ROWS:
        rows = by_label[label]
        rate = statistics.median(run["rate"] for run in rows)
        each = ", ".join(f"{run['rate']:.1f}" for run in rows)
        others = ", ".join(f"{run['others_cores']:.2f}" for run in rows)
        checks = latencies = "-"
        if label != ROWS[0]:
            checks = f"{statistics.median(run['checks'] / run['jobs'] for run in rows):.3f}"
            latencies = ", ".join(latency(run) for run in rows)
        print(
            f"| {label} | {JOBS:,} | {rate:.1f} | {each} | {rate / base:.2f}x "
            f"| {statistics.median(run['statements'] for run in rows):.2f} "
            f"| {statistics.median(run['commits'] for run in rows):.2f} "
            f"| {cpu[label]:.1f} "
            f"| {others} | {checks} "
            f"| {latencies} |"
        )
    print(
        f"(median over {ROUNDS} rounds; batch/no batch round by round: {per_round}; by CPU a "
        f"job, the ratio with the machine to ourselves: {cpu[ROWS[0]] / cpu[ROWS[1]]:.2f}x. "
        "Targets: >= 0.90x; batch.completed <= 1 s after the last job's end)"
    )


def batch_rows() -> None:
    """The rows, printed run by run and then as a table."""
    monitor = Monitor(os.environ["DATABASE_URL"])
    files, file_server = serve_samples()
    try:
        runs: list[dict] = []
        for round_ in range(1, ROUNDS + 1):
            for label in ROWS:
                runs.append(measure(monitor, files, label))
                report(runs[-1], round_)
        rows_table(runs)
    finally:
        file_server.terminate()


if __name__ == "__main__":
    setup()
    batch_rows()
