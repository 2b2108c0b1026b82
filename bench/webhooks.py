"""The webhook rows of `bench.engine`: the engine's rate with one subscription whose receiver
answers 204 at once (healthy) and with one whose receiver accepts connections and never answers
(hanging), each as a ratio of runs with no subscription in the same sitting (target >= 0.90x).
Runs alternate none, healthy, hanging, round after round, each on a fresh stack (two workers,
one dispatcher, as the engine's main run) with a fresh set of jobs; the receiver is
`bench.receiver`, a process of its own, and the subscription (every event type) is deleted after
its run.

Per run: jobs/s; CPU ms a job of the workers, the dispatcher (with its delivery lane),
PostgreSQL and the sandbox; deliveries made during the run and per second, and those pending or
dead at its end; the age of the oldest pending delivery then (the lag); the tasks waiting in the
broker then and the most seen during the run. A healthy run then waits a bounded time for its
pending deliveries and prints how long they took.

Every wait is bounded: a run not done within its limit is reported with the jobs done by then,
and its leftovers (active jobs, queued tasks) are cleared so that the next run starts clean.

    BENCH_WEBHOOK_JOBS (2,000)  jobs in each run; 0 leaves the rows out of `bench.engine`
    BENCH_WEBHOOK_ROUNDS (2)    rounds of none, healthy, hanging
    BENCH_WEBHOOK_TIMEOUT       a run's limit in seconds (default: 3x the first no-subscription
                                run, at least 30 s; that run itself 600 s)
    BENCH_WEBHOOK_DRAIN (30)    seconds a healthy run waits for its pending deliveries

The rows alone: `PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.webhooks`.
"""

import os
import statistics
import subprocess
import sys
import time

import requests

from bench import setup
from bench.engine import CREATE, Monitor, create_jobs, new_extractor, start_stack, stop_stack

JOBS = int(os.environ.get("BENCH_WEBHOOK_JOBS", 2_000))
ROUNDS = int(os.environ.get("BENCH_WEBHOOK_ROUNDS", 2))
TIMEOUT = os.environ.get("BENCH_WEBHOOK_TIMEOUT")
DRAIN = float(os.environ.get("BENCH_WEBHOOK_DRAIN", 30))
# (label, receiver mode): no receiver means no subscription.
ROWS = (("no subscription", None), ("healthy receiver", "ok"), ("hanging receiver", "hang"))


def start_receiver(mode: str) -> tuple[str, subprocess.Popen]:
    from tests.processes import answers, free_port, wait_until

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.receiver", "--mode", mode, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{url}/_stats"), 30, "the webhook receiver")
    return url, process


def received(url: str) -> dict:
    """The receiver's counters (-1 each if it does not answer)."""
    try:
        return requests.get(f"{url}/_stats", timeout=5).json()
    except requests.RequestException:
        return {"requests": -1, "open": -1, "cpu_s": 0.0}


def deliveries(subscription) -> dict:
    """The subscription's deliveries by state, and the age of its oldest pending one."""
    from django.db.models import Count, Min
    from django.utils import timezone

    from jobtracking.models import DeliveryState, WebhookDelivery

    rows = WebhookDelivery.objects.filter(subscription=subscription)
    states = dict(rows.order_by().values_list("state").annotate(n=Count("id")))
    oldest = rows.filter(state=DeliveryState.PENDING).aggregate(at=Min("created_at"))["at"]
    return {
        "total": sum(states.values()),
        "delivered": states.get(DeliveryState.DELIVERED, 0),
        "pending": states.get(DeliveryState.PENDING, 0),
        "dead": states.get(DeliveryState.DEAD, 0),
        "lag_s": (timezone.now() - oldest).total_seconds() if oldest else 0.0,
    }


def delivery_updates() -> tuple[int, int]:
    """Updates of deliveries' rows so far, and how many of them were heap-only (no index
    entry added). Each backend reports its counts when it ends, so read after the stack stops."""
    from django.db import connection

    from jobtracking.models import WebhookDelivery

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
            [WebhookDelivery._meta.db_table],
        )
        return cursor.fetchone()


def clear(extractor, subscription) -> int:
    """Leave nothing for the next run: the subscription and its deliveries, the run's unfinished
    jobs (cancelled), and the broker's waiting tasks. Returns the jobs cancelled."""
    from django_q.models import OrmQ

    from jobtracking import states
    from jobtracking.errors import ApplicationError
    from jobtracking.models import ExtractionJob
    from jobtracking.services import Actor, job_cancel

    if subscription is not None:
        subscription.delete()
    active = ExtractionJob.objects.filter(extractor=extractor, status__in=states.ACTIVE)
    cancelled = 0
    for job_id in active.values_list("pk", flat=True):
        try:
            job_cancel(job_id=job_id, actor=Actor.system(), reason="bench run over its limit")
            cancelled += 1
        except ApplicationError:  # it finished meanwhile: nothing to clear
            pass
    # The stack is stopped: whatever waits in the broker belongs to the run just measured (its
    # deliveries' tasks, a cut-short run's job tasks), and would run as the next run's work.
    OrmQ.objects.all().delete()
    return cancelled


def run(monitor: Monitor, files: str, mode: str | None, label: str, limit: float) -> dict:
    from jobtracking.models import WebhookSubscription
    from tests.processes import stop

    receiver = start_receiver(mode) if mode else None
    stack = start_stack(workers=2, clusters=1, dispatchers=1)
    updates = delivery_updates()
    subscription = extractor = None
    result: dict = {"label": label, "mode": mode, "jobs": JOBS, "limit_s": limit}
    try:
        extractor = new_extractor(stack.sandbox_url)
        if receiver:
            subscription = WebhookSubscription.objects.create(
                url=f"{receiver[0]}/hook",
                description="bench.webhooks",
                all_event_types=True,
                all_jobs=True,
            )
        before = stack.cpu()
        started = time.perf_counter()
        create_jobs(extractor, JOBS, files)
        result["created_s"] = time.perf_counter() - started
        peak = 0
        while True:
            left = monitor.active(extractor.pk)
            peak = max(peak, monitor.queued())
            elapsed = time.perf_counter() - started
            if left == 0 or elapsed > limit:
                break
            time.sleep(0.2)
        after = stack.cpu()
        result |= {
            "cpu": {name: 1000 * (after[name] - before[name]) / JOBS for name in after},
            "wall_s": elapsed,
            "done": JOBS - left,
            "rate": (JOBS - left) / elapsed,
            "timed_out": left > 0,
            "broker": monitor.queued(),
            "broker_peak": peak,
        }
        if subscription:
            result["deliveries"] = deliveries(subscription)
            result["received"] = received(receiver[0])
        if mode == "ok":
            drain_started = time.perf_counter()
            while deliveries(subscription)["pending"] and (
                time.perf_counter() - drain_started < DRAIN
            ):
                time.sleep(0.2)
            result["drain_s"] = time.perf_counter() - drain_started
            result["drained"] = deliveries(subscription)
            result["received_drained"] = received(receiver[0])
    finally:
        stop_stack(stack)
        result["updates"] = [
            now - then for now, then in zip(delivery_updates(), updates, strict=True)
        ]
        if receiver:
            stop(receiver[1])
        if extractor is not None:
            result["cancelled"] = clear(extractor, subscription)
    return result


def report(run: dict, round_: int) -> None:
    print(f"\n== webhooks, round {round_}, {run['label']}: {run['jobs']:,} jobs, created {CREATE}")
    if run["timed_out"]:
        print(
            f"TIMED OUT after {run['wall_s']:.1f} s (limit {run['limit_s']:.0f} s): "
            f"{run['done']:,} of {run['jobs']:,} jobs done -> {run['rate']:.1f} jobs/s; "
            f"{run['cancelled']:,} cancelled afterwards"
        )
    else:
        print(
            f"wall {run['wall_s']:.1f} s -> {run['rate']:.1f} jobs/s; "
            f"creation took {run['created_s']:.1f} s"
        )
    print(
        f"broker: {run['broker']:,} tasks waiting at the end, at most {run['broker_peak']:,} "
        "during the run"
    )
    print("CPU ms a job: " + ", ".join(f"{name} {ms:.2f}" for name, ms in run["cpu"].items()))
    if "deliveries" not in run:
        return
    made, got = run["deliveries"], run["received"]
    print(
        f"deliveries: {made['total']:,} ({made['total'] / run['jobs']:.2f} a job); "
        f"{made['delivered']:,} delivered during the run ({made['delivered'] / run['wall_s']:.1f}"
        f"/s), {made['pending']:,} pending, {made['dead']:,} dead at its end; oldest pending "
        f"{made['lag_s']:.1f} s old; the receiver got {got['requests']:,} requests"
        + (f", {got['open']:,} held open" if run["mode"] == "hang" else "")
        + f" and spent {1000 * got['cpu_s'] / max(got['requests'], 1):.2f} ms of CPU a request"
    )
    updated, hot = run["updates"]
    print(f"deliveries' rows updated {updated:,} times, {hot / max(updated, 1):.0%} heap-only")
    if "drained" in run:
        drained = run["drained"]
        state = (
            "drained"
            if not drained["pending"]
            else f"NOT drained ({drained['pending']:,} pending, oldest {drained['lag_s']:.1f} s)"
        )
        print(
            f"after the jobs: {state} in {run['drain_s']:.1f} s (limit {DRAIN:.0f} s); "
            f"{drained['delivered']:,} delivered, the receiver got "
            f"{run['received_drained']['requests']:,} requests"
        )


def ratios(runs: list[dict]) -> dict[str, float]:
    """Each row's median rate over the no-subscription row's."""
    by_label = {label: [run for run in runs if run["label"] == label] for label, _ in ROWS}
    medians = {
        label: statistics.median(run["rate"] for run in rows) for label, rows in by_label.items()
    }
    return {label: rate / medians[ROWS[0][0]] for label, rate in medians.items()}


def table(runs: list[dict]) -> None:
    by_label = {label: [run for run in runs if run["label"] == label] for label, _ in ROWS}
    versus = ratios(runs)
    print(
        "\n| webhooks | runs | jobs | jobs/s (median) | vs no subscription | delivered/s "
        "(median) | oldest pending at end (max) | broker at end / peak (max) | drain (max) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, mode in ROWS:
        rows = by_label[label]
        rate = statistics.median(run["rate"] for run in rows)
        timed_out = sum(run["timed_out"] for run in rows)
        count = f"{len(rows)}" + (f" ({timed_out} timed out)" if timed_out else "")
        delivered = lag = drain = "-"
        if mode:
            made = [run["deliveries"] for run in rows]
            per_s = [m["delivered"] / run["wall_s"] for m, run in zip(made, rows, strict=True)]
            delivered = f"{statistics.median(per_s):.1f}"
            lag = f"{max(m['lag_s'] for m in made):.1f} s"
        if mode == "ok":
            worst = max(rows, key=lambda run: run["drain_s"])
            drain = f"{worst['drain_s']:.1f} s" + ("" if not worst["drained"]["pending"] else "+")
        broker = max(run["broker"] for run in rows)
        peak = max(run["broker_peak"] for run in rows)
        print(
            f"| {label} | {count} | {JOBS:,} | {rate:.1f} | {versus[label]:.2f}x | {delivered} "
            f"| {lag} | {broker:,} / {peak:,} | {drain} |"
        )
    print("(target: >= 0.90x each; a drain ending in + did not finish within its limit)")


def webhook_rows(monitor: Monitor, files: str) -> dict[str, float]:
    """The rows, printed run by run and then as a table; returns their ratios."""
    runs: list[dict] = []
    limit = float(TIMEOUT) if TIMEOUT else 600.0
    for round_ in range(1, ROUNDS + 1):
        for label, mode in ROWS:
            runs.append(run(monitor, files, mode, label, limit))
            report(runs[-1], round_)
            if not TIMEOUT and len(runs) == 1:
                limit = max(30.0, 3 * runs[0]["wall_s"])
    table(runs)
    return ratios(runs)


def main() -> None:
    from bench.engine import serve_samples

    setup()
    monitor = Monitor(os.environ["DATABASE_URL"])
    files, file_server = serve_samples()
    try:
        webhook_rows(monitor, files)
    finally:
        file_server.terminate()


if __name__ == "__main__":
    main()
