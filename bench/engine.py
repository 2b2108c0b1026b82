"""End-to-end engine throughput on a durable PostgreSQL (run under `PG_DURABLE=1
.ci/with_postgres.sh`, as `make bench` does): jobs through the sandbox with no added latency, and
what each job cost.

Per run it prints wall time and jobs/s; per job, SQL statements (pg_stat_statements), commits
(pg_stat_database), CPU milliseconds by process (workers, dispatcher, PostgreSQL, sandbox, the
creating process) and extractor calls (sandbox counters), with the duplicate submissions, early
polls and 429 answers the sandbox saw (the extractor and the sandbox set no rate limits here); and
the kernel's listen-queue counters over the run (`TcpExt` ListenOverflows, ListenDrops and
TCPSynRetrans from /proc/net/netstat: system-wide, so anything else on the machine counts too).
The floor is measured in the same run: no-op django-q2 tasks through the same cluster settings.

The scaling table runs 2, 4 and 8 workers (one cluster, one dispatcher), two clusters of two workers
with two dispatchers, and 8 workers with a compute slot each (the A/B of
`jobtracking.infra.compute_slots`: as before the slots), alternating: each round runs the five in
that order, each on a fresh stack, and per row it prints the median jobs/s, every run's, and the
median as a ratio of the 2-worker row's (the main run's row beside it, as a ratio of the same).
After the throughput rounds come the fairness rounds, the same five stack settings in the same order
(one round by default): `bench.fairness`'s run, smaller, where client A bulk-creates a backlog and
one second later client B creates single jobs one after another; the row shows B's p95 from creation
to `submitting` (the median over the fairness rounds). Then the webhook rows (`bench.webhooks`):
runs with a healthy and with a hanging webhook receiver, against runs with no subscription in the
same sitting. Then the busy machine: the scaling runs and the webhook rows again, beside one
CPU-bound process of the benchmark's own; a last table puts both sittings' ratios side by side.

    BENCH_E2E_JOBS (10,000)       jobs in the main run (2 workers)
    BENCH_SCALE_JOBS (3,000)      jobs in each scaling run (lowered from 5,000 when the rounds
                                  came, to keep the engine's part of `make bench` near ten
                                  minutes on 2 cores); 0 leaves the scaling table out
    BENCH_SCALE_ROUNDS (2)        rounds of the four scaling runs
    BENCH_SCALE_FAIR_A_JOBS (3,000)  A's backlog in each fairness run; 0 leaves them out
    BENCH_SCALE_FAIR_B_JOBS (20)  B's single jobs in each fairness run
    BENCH_SCALE_FAIR_ROUNDS (1)   rounds of the four fairness runs
    BENCH_FLOOR_TASKS (2,000)     no-op tasks for the floor
    BENCH_CREATE (bulk)           how jobs are created: bulk (500 a call) or single
    BENCH_LOG_LEVEL, BENCH_LOG_DIR  the processes' log level (WARNING) and a folder for their logs
    BENCH_WEBHOOK_JOBS (2,000)    jobs in each webhook run; 0 leaves the webhook rows out (their
                                  other knobs: see `bench.webhooks`)
    BENCH_BUSY (1)                0 leaves the busy machine's sitting out
"""

import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import requests

from bench import setup
from bench.off import swapped

SAMPLES = Path(__file__).resolve().parent.parent / "extraction" / "sandbox" / "samples"
MONITOR_ROLE = "bench_monitor"
# PostgreSQL's own foreign-key checks, run by triggers after each insert or update (reported at
# the top level by pg_stat_statements); no statement of ours reads "FROM ONLY".
FK_CHECK = "SELECT % FROM ONLY %"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CREATE = os.environ.get("BENCH_CREATE", "bulk")
BULK = 500  # jobs a call, as `POST /jobs/bulk/` and `POST /batches/{id}/jobs/` take at most
TCP_COUNTERS = ("ListenOverflows", "ListenDrops", "TCPSynRetrans")
# The scaling table's rows, in the order each round runs them; the first is the base of the ratios.
# The last row is the A/B of the compute slots (`jobtracking.infra.compute_slots`): 8 workers with
# a slot for each, as before the slots came.
SCALING = (
    ("2 workers", {"workers": 2, "clusters": 1, "dispatchers": 1}),
    ("4 workers", {"workers": 4, "clusters": 1, "dispatchers": 1}),
    ("8 workers", {"workers": 8, "clusters": 1, "dispatchers": 1}),
    ("2 clusters x 2 workers + 2 dispatchers", {"workers": 2, "clusters": 2, "dispatchers": 2}),
    ("8 workers, a slot each", {"workers": 8, "clusters": 1, "dispatchers": 1, "slots": 8}),
)
# Both sittings' targets: these rows over the 2-worker row, the webhook rows over no subscription.
SCALING_TARGETS = ("4 workers", "8 workers", "2 clusters x 2 workers + 2 dispatchers")
BUSY = os.environ.get("BENCH_BUSY", "1") != "0"


def noop() -> None:
    """The floor's task: the cost of a django-q2 round trip and nothing else."""


def serve_samples() -> tuple[str, subprocess.Popen]:
    """The sample files, for the jobs' source URLs, from a process of their own: served from this
    one, every fetch would wait for the GIL behind the loop that creates the jobs."""
    from tests.processes import answers, free_port, wait_until

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.files", str(port), str(SAMPLES)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{url}/budget.csv"), 30, "the sample file server")
    return url, server


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes, their reaped children included."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICKS


def tree_cpu_seconds(processes) -> float:
    """CPU of these processes and all their descendants."""
    from tests.processes import descendants

    return cpu_seconds([pid for p in processes for pid in (p.pid, *descendants(p.pid))])


def tcp_counters() -> dict[str, int]:
    """The kernel's TcpExt counters of refused connections (a full listen queue) and of SYNs sent
    again, for the whole network namespace."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], map(int, values.split()[1:]), strict=True))
            return {name: table.get(name, 0) for name in TCP_COUNTERS}
    return dict.fromkeys(TCP_COUNTERS, 0)


def tcp_delta(before: dict[str, int]) -> dict[str, int]:
    after = tcp_counters()
    return {name: after[name] - before[name] for name in TCP_COUNTERS}


def machine_cpu_seconds() -> float:
    """CPU time every process on the machine used, all cores together (/proc/stat): less the
    stack's own over a run, what else ran beside it."""
    user, nice, system, _idle, _iowait, irq, softirq = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    )
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def postgres_cpu_seconds() -> float:
    """CPU of the throwaway cluster's postmaster and its backends."""
    from tests.processes import descendants

    pid_file = Path(os.environ["TEST_PG_DATA"]) / "postmaster.pid"
    postmaster = int(pid_file.read_text().split()[0])
    return cpu_seconds([postmaster, *descendants(postmaster)])


class Monitor:
    """A connection of its own role, so that its statements are left out of the counts."""

    def __init__(self, url: str) -> None:
        admin = psycopg.connect(url, autocommit=True)
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [MONITOR_ROLE])
        if not exists.fetchone():
            admin.execute(f"CREATE ROLE {MONITOR_ROLE} LOGIN SUPERUSER")
        admin.close()
        self.db = psycopg.connect(url.replace("postgres@", f"{MONITOR_ROLE}@"), autocommit=True)
        self.queries = 0

    def one(self, sql: str, params=()):
        self.queries += 1
        return self.db.execute(sql, params).fetchone()

    def reset(self) -> None:
        self.one("SELECT pg_stat_statements_reset()")
        self.one("SELECT pg_stat_reset()")
        self.queries = 0

    def statements(self) -> tuple[int, int]:
        """Statements the processes sent, and those PostgreSQL ran inside them (the foreign key
        checks of the inserts and updates)."""
        top, nested = self.one(
            "SELECT coalesce(sum(calls) FILTER (WHERE query NOT LIKE %s), 0), "
            "coalesce(sum(calls) FILTER (WHERE query LIKE %s), 0) FROM pg_stat_statements "
            "WHERE userid <> (SELECT oid FROM pg_roles WHERE rolname = %s)",
            [FK_CHECK, FK_CHECK, MONITOR_ROLE],
        )
        return int(top), int(nested)

    def top(self, count: int) -> list[tuple[int, str]]:
        """The most frequent statements: where the per-job count comes from."""
        self.queries += 1
        return self.db.execute(
            "SELECT calls, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
            "WHERE query NOT LIKE %s AND userid <> (SELECT oid FROM pg_roles WHERE rolname = %s) "
            "ORDER BY calls DESC LIMIT %s",
            [FK_CHECK, MONITOR_ROLE, count],
        ).fetchall()

    def commits(self) -> int:
        # Statistics reach pg_stat_database when a backend reports them; ask for a fresh view.
        self.one("SELECT pg_stat_clear_snapshot()")
        (commits,) = self.one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(commits) - self.queries  # each of our own autocommit queries is a commit

    def active(self, extractor_id: int) -> int:
        (count,) = self.one(
            "SELECT count(*) FROM jobtracking_extractionjob WHERE extractor_id = %s AND "
            "status_id NOT IN ('succeeded', 'failed', 'timed_out', 'cancelled')",
            [extractor_id],
        )
        return count

    def queued(self) -> int:
        return self.one("SELECT count(*) FROM django_q_ormq")[0]


@dataclass
class Stack:
    sandbox_url: str
    clusters: list
    dispatchers: list
    sandbox: object

    def cpu(self) -> dict[str, float]:
        return {
            "workers": tree_cpu_seconds(self.clusters),
            "dispatcher": tree_cpu_seconds(self.dispatchers),
            "postgres": postgres_cpu_seconds(),
            "sandbox": tree_cpu_seconds([self.sandbox]),
            "creator": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
        }


def start_stack(
    *, workers: int, clusters: int, dispatchers: int, slots: int = 0, sandbox_args=(), off=""
) -> Stack:
    """`slots`: the machine's compute slots (0, the default: its cores); `off`: an engine feature
    every process of the stack runs without (`bench.off`), for an A/B's "without" runs."""
    from tests.processes import answers, free_port, start_command, wait_until

    port = free_port()
    env = {
        "OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",  # the sample files are on loopback
        "Q_SYNC": "0",
        "Q_WORKERS": str(workers),
        "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        "JOBS_COMPUTE_SLOTS": str(slots),
    }
    if off:
        env |= {"DJANGO_SETTINGS_MODULE": "bench.off_settings", "BENCH_OFF": off}
    sandbox = start_command("run_sandbox_extractor", "--port", str(port), *sandbox_args, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{url}/healthz"), 30, "the sandbox")
    logs = os.environ.get("BENCH_LOG_DIR")

    def log(name: str) -> Path | None:
        return Path(logs) / f"{name}.log" if logs else None

    stack = Stack(
        sandbox_url=url,
        clusters=[
            start_command("run_workers", env=env, log=log(f"cluster{n}")) for n in range(clusters)
        ],
        dispatchers=[
            start_command("run_dispatcher", env=env, log=log(f"dispatcher{n}"))
            for n in range(dispatchers)
        ],
        sandbox=sandbox,
    )
    time.sleep(3)  # clusters up: the measured run starts with its workers ready
    return stack


def stop_stack(stack: Stack) -> None:
    from tests.processes import stop

    for process in [*stack.clusters, *stack.dispatchers, stack.sandbox]:
        stop(process)


def new_extractor(url: str, **limits):
    from extraction.models import Adapter
    from tests.factories import ExtractorFactory

    return ExtractorFactory(
        slug=f"bench-e2e-{time.time_ns()}",
        adapter=Adapter.SANDBOX,
        base_url=url,
        poll_initial_interval=timedelta(milliseconds=500),
        poll_max_interval=timedelta(seconds=5),
        max_submit_attempts=50,
        max_poll_errors=50,
        **limits,
    )


def job_chunks(extractor, count: int, files: str) -> list[list]:
    """`count` jobs' `NewJob`s, the sample files in turn, in calls of `BULK`."""
    from jobtracking.services import NewJob

    names = sorted(p.name for p in SAMPLES.iterdir())
    items = [
        NewJob(
            extractor=extractor,
            file_id=f"bench-{n}",
            file_name=names[n % len(names)],
            source_url=f"{files}/{names[n % len(names)]}",
        )
        for n in range(count)
    ]
    return [items[start : start + BULK] for start in range(0, count, BULK)]


def create_jobs(extractor, count: int, files: str) -> None:
    """Through the bulk service, `BULK` a call (as `POST /jobs/bulk/` does), or one at a time with
    BENCH_CREATE=single."""
    from jobtracking.services import Actor, job_create, job_create_many

    for chunk in job_chunks(extractor, count, files):
        if CREATE == "single":
            for new in chunk:
                job_create(new, actor=Actor.system())
        else:
            job_create_many(chunk, actor=Actor.system())


def run_jobs(
    monitor: Monitor,
    files: str,
    count: int,
    label: str,
    stack_args: dict,
    create=create_jobs,
    **limits,
):
    """`count` jobs through a fresh stack, created by `create(extractor, count, files)`, timed
    from the start of their creation until none is active. What `create` returns, if anything, is
    called once the figures are read and before the stack stops (to wait for what the jobs'
    end sets off)."""
    from extraction.sandbox.server import control_headers
    from tests.processes import wait_until

    stack = start_stack(**stack_args)
    try:
        extractor = new_extractor(stack.sandbox_url, **limits)
        requests.post(
            f"{stack.sandbox_url}/_sandbox/reset", headers=control_headers(), timeout=10
        ).raise_for_status()
        monitor.reset()
        before = stack.cpu()
        machine = machine_cpu_seconds()
        tcp = tcp_counters()
        started = time.perf_counter()
        settle = create(extractor, count, files)
        created = time.perf_counter() - started
        wait_until(lambda: monitor.active(extractor.pk) == 0, 3600, "every job to finish")
        elapsed = time.perf_counter() - started
        after = stack.cpu()
        machine = machine_cpu_seconds() - machine
        tcp = tcp_delta(tcp)
        (statements, nested), commits = monitor.statements(), monitor.commits()
        top = monitor.top(8)
        stats = requests.get(
            f"{stack.sandbox_url}/_sandbox/stats", headers=control_headers(), timeout=10
        ).json()
        if settle is not None:
            settle()
    finally:
        stop_stack(stack)
    from django.db.models import Count

    from jobtracking.models import ExtractionJob

    outcome = dict(
        ExtractionJob.objects.filter(extractor=extractor)
        .values_list("status")
        .annotate(n=Count("id"))
    )
    cpu = {name: 1000 * (after[name] - before[name]) / count for name in after}
    ours = sum(after[name] - before[name] for name in after)
    return {
        "label": label,
        "extractor": extractor.pk,
        "jobs": count,
        "created_s": created,
        "wall_s": elapsed,
        "rate": count / elapsed,
        "statements": statements / count,
        "nested": nested / count,
        "commits": commits / count,
        "cpu": cpu,
        "stats": stats,
        "outcome": outcome,
        "top": top,
        "tcp": tcp,
        # Cores that other processes kept busy during the run, on average: the noise.
        "others_cores": max(0.0, machine - ours) / elapsed,
    }


def engine_cpu(run: dict) -> float:
    """CPU ms a job of the engine's processes and PostgreSQL: all but the stand-in extractor."""
    return sum(ms for name, ms in run["cpu"].items() if name != "sandbox")


def feature_ab(
    feature: str, name: str, count: int, rounds: int, shown: Callable[[int], tuple[int, str]]
) -> list[dict]:
    """The engine's rate with an engine feature against without, in one sitting: `count` jobs a
    run through a fresh stack of two workers and a dispatcher, each round a run without the
    feature (every process, this one's creation included, on `bench.off`'s stand-ins) and one
    with it, the order swapped each round so that the machine's drift favours neither side.
    `shown(extractor id)` counts what a run wrote that shows the feature, and says it: a run
    without must show nothing and a run with it something, or the A/B measured one thing twice.
    Prints every run and the median of the rounds' ratios (the figure: each round's two runs are
    back to back, the least touched by the drift, as in bench.api), the ratio of the medians and
    of the engine's CPU a job; returns the runs."""
    monitor = Monitor(os.environ["DATABASE_URL"])
    files, file_server = serve_samples()
    stack = {"workers": 2, "clusters": 1, "dispatchers": 1}
    runs: dict[bool, list[dict]] = {False: [], True: []}
    try:
        for round_ in range(1, rounds + 1):
            for on in (False, True) if round_ % 2 else (True, False):
                label = f"{'with' if on else 'without'} {name}"
                with contextlib.nullcontext() if on else swapped(feature):
                    run = run_jobs(
                        monitor, files, count, label, stack if on else stack | {"off": feature}
                    )
                found, said = shown(run["extractor"])
                assert bool(found) == on, f"{label}: {said}"
                runs[on].append(run)
                print(
                    f"round {round_}, {label}: {run['rate']:.1f} jobs/s; CPU ms a job "
                    f"{engine_cpu(run):.2f} (workers {run['cpu']['workers']:.2f}, PostgreSQL "
                    f"{run['cpu']['postgres']:.2f}); {run['statements']:.1f} statements, "
                    f"{run['commits']:.2f} commits a job; {said}; {run['outcome']}; others kept "
                    f"{run['others_cores']:.2f} cores busy; load average {os.getloadavg()[0]:.1f}"
                )
    finally:
        file_server.terminate()
    with_, without = (statistics.median(run["rate"] for run in runs[on]) for on in (True, False))
    ratios = [w["rate"] / wo["rate"] for w, wo in zip(runs[True], runs[False], strict=True)]
    cpu_with, cpu_without = (statistics.median(map(engine_cpu, runs[on])) for on in (True, False))
    print(
        f"engine with {name}, {count:,} jobs a run: median of the rounds' ratios "
        f"{statistics.median(ratios):.3f}x (rounds: {', '.join(f'{r:.3f}' for r in ratios)}; "
        f"target >= 0.95x); medians {with_:.1f} jobs/s with, {without:.1f} without -> "
        f"{with_ / without:.3f}x; CPU ms a job {cpu_with:.2f} with, {cpu_without:.2f} without -> "
        f"{cpu_without / cpu_with:.3f}x"
    )
    return [*runs[False], *runs[True]]


def floor(monitor: Monitor, tasks: int) -> float:
    """No-op tasks/s through a two-worker cluster with the engine's settings."""
    from django_q.tasks import async_task

    from tests.processes import wait_until

    stack = start_stack(workers=2, clusters=1, dispatchers=0)
    try:
        started = time.perf_counter()
        for _ in range(tasks):
            async_task("bench.engine.noop")
        wait_until(lambda: monitor.queued() == 0, 3600, "the no-op tasks")
        return tasks / (time.perf_counter() - started)
    finally:
        stop_stack(stack)


def report(run: dict, floor_rate: float) -> None:
    stats = run["stats"]
    requests_ = stats["requests"]
    jobs = run["jobs"]
    posts = requests_.get("POST", 0) / jobs
    gets = requests_.get("GET", 0) / jobs
    cpu = ", ".join(f"{name} {ms:.1f}" for name, ms in run["cpu"].items())
    print(f"\n== {run['label']}: {jobs:,} jobs, created {CREATE}")
    print(
        f"wall {run['wall_s']:.1f} s -> {run['rate']:.1f} jobs/s "
        f"({run['rate'] / floor_rate:.2f}x the no-op floor of {floor_rate:.1f} tasks/s); "
        f"creation took {run['created_s']:.1f} s"
    )
    print(f"outcome: {run['outcome']}")
    print(
        f"per job: {run['statements']:.1f} SQL statements (target <= 15; plus "
        f"{run['nested']:.1f} foreign-key checks PostgreSQL runs inside them), "
        f"{run['commits']:.2f} commits (target <= 4)"
    )
    print(f"CPU ms per job: {cpu}")
    print("most frequent statements (calls per job):")
    for calls, query in run["top"]:
        print(f"  {calls / jobs:6.2f}  {query[:110]}")
    faults = stats.get("faults", {})
    print(
        f"extractor calls per job: {posts + gets:.2f} (submit {posts:.2f}, polls + result "
        f"{gets:.2f}; target 3.00); duplicate keys {len(stats['duplicate_keys'])}, early polls "
        f"{len(stats['early_polls'])}, 429 answers {faults.get('rate_limited', 0)}"
    )
    print(f"TCP over the run (system-wide): {describe_tcp(run['tcp'])}")


def checks(run: dict) -> tuple[int, int, int]:
    """What must stay 0: early polls, duplicate submissions, 429 answers."""
    stats = run["stats"]
    return (
        len(stats["early_polls"]),
        len(stats["duplicate_keys"]),
        stats.get("faults", {}).get("rate_limited", 0),
    )


def describe_tcp(tcp: dict[str, int]) -> str:
    return ", ".join(f"{name} {tcp[name]}" for name in TCP_COUNTERS)


def scaling_runs(monitor: Monitor, files: str, count: int, rounds: int) -> dict[str, list[dict]]:
    """The scaling rows' throughput runs, round after round, each round in `SCALING`'s order."""
    runs: dict[str, list[dict]] = {label: [] for label, _ in SCALING}
    for round_ in range(1, rounds + 1):
        for label, stack_args in SCALING:
            run = run_jobs(monitor, files, count, label, stack_args)
            runs[label].append(run)
            early, duplicates, throttled = checks(run)
            print(
                f"scaling round {round_}, {label}: {count:,} jobs in {run['wall_s']:.1f} s -> "
                f"{run['rate']:.1f} jobs/s; {run['outcome']}; early polls {early}, duplicate "
                f"keys {duplicates}, 429 answers {throttled}; {describe_tcp(run['tcp'])}"
            )
    return runs


def fairness_runs(files: str, a_jobs: int, b_jobs: int, rounds: int) -> dict[str, list[dict]]:
    """The scaling rows' fairness runs (`bench.fairness`'s, smaller), after the throughput rounds
    and in the same order."""
    from bench.fairness import describe, percentile, run

    runs: dict[str, list[dict]] = {label: [] for label, _ in SCALING}
    for round_ in range(1, rounds + 1):
        for label, stack_args in SCALING:
            tcp = tcp_counters()
            result = run(files, with_b=True, a_count=a_jobs, b_count=b_jobs, stack_args=stack_args)
            result |= {"tcp": tcp_delta(tcp), "p95": percentile(result["to_submit"], 0.95)}
            runs[label].append(result)
            print(
                f"fairness round {round_}, {label}: B creation -> submitting "
                f"{describe(result['to_submit'])}; B {result['b_statuses']}; A "
                f"{result['a_rate']:.1f} jobs/s with B, {result['a_waiting']:,} of A's jobs "
                f"pending when B was done; {describe_tcp(result['tcp'])}"
            )
    return runs


def scaling_ratios(runs: dict[str, list[dict]]) -> dict[str, float]:
    """Each row's median rate over the 2-worker row's."""
    medians = {
        label: statistics.median(run["rate"] for run in rows) for label, rows in runs.items()
    }
    return {label: rate / medians[SCALING[0][0]] for label, rate in medians.items()}


def scaling_table(
    main_run: dict | None,
    runs: dict[str, list[dict]],
    fair: dict[str, list[dict]],
    floor_rate: float,
) -> None:
    base_runs = runs.get(SCALING[0][0])
    base = statistics.median(run["rate"] for run in base_runs) if base_runs else None
    print(
        "\n| run | jobs | jobs/s (median) | runs (jobs/s) | vs 2 workers | vs floor "
        "| statements/job | commits/job | B p95 to submitting | early polls / duplicates / 429 "
        "| ListenOverflows / ListenDrops / TCPSynRetrans |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def row(label: str, rows: list[dict], fairness: list[dict]) -> None:
        p95 = "-"
        if fairness:
            p95s = [result["p95"] for result in fairness]
            p95 = f"{statistics.median(p95s):.2f} s"
            if len(p95s) > 1:
                p95 += " (" + ", ".join(f"{value:.2f}" for value in p95s) + ")"
        if not rows:
            print(f"| {label} | - | - | - | - | - | - | - | {p95} | - | - |")
            return
        rate = statistics.median(run["rate"] for run in rows)
        each = ", ".join(f"{run['rate']:.1f}" for run in rows)
        ratio = f"{rate / base:.2f}x" if base else "-"
        sums = [sum(values) for values in zip(*(checks(run) for run in rows), strict=True)]
        tcp = [sum(run["tcp"][name] for run in rows) for name in TCP_COUNTERS]
        print(
            f"| {label} | {rows[0]['jobs']:,} | {rate:.1f} | {each} | {ratio} "
            f"| {rate / floor_rate:.2f}x "
            f"| {statistics.median(run['statements'] for run in rows):.1f} "
            f"| {statistics.median(run['commits'] for run in rows):.2f} | {p95} "
            f"| {' / '.join(map(str, sums))} | {' / '.join(map(str, tcp))} |"
        )

    for label, _ in SCALING:
        row(label, runs.get(label, []), fair.get(label, []))
    if main_run:
        row("main run (2 workers)", [main_run], [])
    print(
        "(median over the rounds; vs 2 workers: a row's median over the 2-worker row's; checks "
        "and TCP counters summed over the rounds. Targets: 2 workers >= 200 jobs/s; 4 and 8 "
        "workers and 2 x 2 >= 0.95x; B p95 <= 2 s; 0 early polls, duplicates and 429 answers)"
    )


def sitting_ratios(monitor: Monitor, files: str, runs: dict[str, list[dict]]) -> dict[str, float]:
    """The scaling ratios of a sitting's runs, with its webhook rows run after them."""
    found = scaling_ratios(runs) if runs else {}
    if int(os.environ.get("BENCH_WEBHOOK_JOBS", 2_000)):
        from bench.webhooks import webhook_rows

        found |= webhook_rows(monitor, files)
    return found


def sittings_table(sittings: dict[str, dict[str, float]]) -> None:
    from bench.webhooks import ROWS

    rows = [*SCALING_TARGETS, SCALING[-1][0], *(label for label, mode in ROWS if mode)]
    print("\n| sitting | " + " | ".join(rows) + " |")
    print("| --- |" + " --- |" * len(rows))
    for name, found in sittings.items():
        cells = [f"{found[label]:.2f}x" if label in found else "-" for label in rows]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        "(scaling rows over 2 workers, webhook rows over no subscription, medians. Targets in "
        "both sittings: 4 and 8 workers and 2 x 2 >= 0.95x; webhooks >= 0.90x)"
    )


@contextlib.contextmanager
def busy_core():
    """One process of ours beside the stack that keeps a core busy: what other containers, a web
    process or a burst of deliveries take from a production machine."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def main() -> None:
    setup()
    from django.db import connection

    started = time.perf_counter()
    monitor = Monitor(os.environ["DATABASE_URL"])
    files, file_server = serve_samples()
    try:
        count = int(os.environ.get("BENCH_E2E_JOBS", 10_000))
        scale = int(os.environ.get("BENCH_SCALE_JOBS", 3_000))
        rounds = int(os.environ.get("BENCH_SCALE_ROUNDS", 2))
        fair_a = int(os.environ.get("BENCH_SCALE_FAIR_A_JOBS", 3_000))
        fair_b = int(os.environ.get("BENCH_SCALE_FAIR_B_JOBS", 20))
        fair_rounds = int(os.environ.get("BENCH_SCALE_FAIR_ROUNDS", 1))
        floor_rate = floor(monitor, int(os.environ.get("BENCH_FLOOR_TASKS", 2_000)))
        print(f"no-op floor: {floor_rate:.1f} django-q2 tasks/s (2 workers)")
        one = {"clusters": 1, "dispatchers": 1}
        main_run = run_jobs(monitor, files, count, "2 workers", {"workers": 2, **one})
        report(main_run, floor_rate)
        print()
        runs = scaling_runs(monitor, files, scale, rounds) if scale else {}
        fair = fairness_runs(files, fair_a, fair_b, fair_rounds) if fair_a and fair_b else {}
        if fair:
            print(
                f"(fairness runs: A bulk-creates {fair_a:,} jobs; 1 s later B creates {fair_b} "
                "singles, one after another)"
            )
        scaling_table(main_run, runs, fair, floor_rate)
        sittings = {"quiet": sitting_ratios(monitor, files, runs)}
        if BUSY:
            print("\n== The busy machine: the same rows beside one CPU-bound process of ours")
            with busy_core():
                busy_runs = scaling_runs(monitor, files, scale, rounds) if scale else {}
                scaling_table(None, busy_runs, {}, floor_rate)
                sittings["busy"] = sitting_ratios(monitor, files, busy_runs)
        sittings_table(sittings)
        print(f"\nbench.engine in all: {time.perf_counter() - started:.0f} s")
    finally:
        connection.close()
        file_server.terminate()


if __name__ == "__main__":
    main()
