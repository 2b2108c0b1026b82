"""The audit chain's cost and its verification at scale (docs/audit.md, docs/performance.md).

1. The engine with hash-chained history against without, in one sitting (the figure against the
   target, >= 0.95x): BENCH_AUDIT_ENGINE_JOBS jobs a run through the sandbox on a fresh
   two-worker stack, alternating runs without chaining and with it for BENCH_AUDIT_ENGINE_ROUNDS
   rounds (`bench.engine.feature_ab`). "Without" swaps the function that links a row,
   `jobtracking.audit.chain_change`, where the state machine imports it, for one that leaves
   the row's hashes and the job's head empty (`bench.off`'s "chaining": a toggle of the
   benchmarks only, the product has none), in the workers, the dispatcher and this process's
   creation. Each run's audit rows are counted: all chained with, none without.
2. The engine's writes alone, with chaining against without: each round bulk-creates
   BENCH_AUDIT_JOBS jobs (500 a call) and moves them through the lifecycle the engine drives
   (submitting, submitted, processing, succeeded), BENCH_AUDIT_BATCH jobs a transaction through
   `jobs_transition`, as the engine's tasks do, in this process. The rounds alternate (with,
   without, without, with, …); the ratio is of the medians. No extractor calls, workers or
   dispatcher: the chaining is a larger share of these writes than of the engine's, so this
   ratio is a floor of part 1's.
3. `verify_audit` over BENCH_AUDIT_ROWS audit rows (10,000,000), five a job, generated inside
   PostgreSQL (generate_series; sha256 over the canonical text as verify_audit's own SQL writes
   it) with a checkpoint over them: the time of the command, and rows/s.

    PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.audit   (part of `make bench`)
    BENCH_AUDIT_ENGINE_JOBS (3,000; 0 leaves part 1 out)  BENCH_AUDIT_ENGINE_ROUNDS (3)
    BENCH_AUDIT_JOBS (2,000)  BENCH_AUDIT_BATCH (100)  BENCH_AUDIT_ROUNDS (6; 0 leaves part 2 out)
    BENCH_AUDIT_ROWS (10,000,000; 0 leaves part 3 out)
"""

import io
import itertools
import os
import statistics
import time
from contextlib import nullcontext

from bench import setup
from bench.engine import feature_ab
from bench.off import swapped

ENGINE_JOBS = int(os.environ.get("BENCH_AUDIT_ENGINE_JOBS", 3_000))
ENGINE_ROUNDS = int(os.environ.get("BENCH_AUDIT_ENGINE_ROUNDS", 3))
JOBS = int(os.environ.get("BENCH_AUDIT_JOBS", 2_000))
BATCH = int(os.environ.get("BENCH_AUDIT_BATCH", 100))
ROUNDS = int(os.environ.get("BENCH_AUDIT_ROUNDS", 6))
ROWS = int(os.environ.get("BENCH_AUDIT_ROWS", 10_000_000))
LIFECYCLE = ("submitting", "submitted", "processing", "succeeded")
# What the engine records on a poll's audit row.
DETAILS = {"external_status": "running", "http_status": 200, "progress": 50}


def chained_rows(extractor_id: int) -> tuple[int, str]:
    """A run's chained audit rows (a hash written), and how many it wrote."""
    from django.db.models import Count, Q

    from jobtracking.models import JobStatusChange

    rows = JobStatusChange.objects.filter(job__extractor_id=extractor_id).aggregate(
        all=Count("id"), chained=Count("id", filter=~Q(hash=""))
    )
    return rows["chained"], f"{rows['chained']:,} of {rows['all']:,} audit rows chained"


def engine_ratio() -> None:
    from jobtracking.models import ExtractionJob

    runs = feature_ab("chaining", "chaining", ENGINE_JOBS, ENGINE_ROUNDS, chained_rows)
    # The runs without chaining left unchained rows: gone before verify_audit's part.
    ExtractionJob.objects.filter(extractor_id__in=[run["extractor"] for run in runs]).delete()


def writes_round(extractor, round_number: int) -> tuple[float, float]:
    """Jobs/s through creation and four moves each, and this process's CPU ms a job (on a
    busy machine, where commits wait on others' work, the steadier of the two)."""
    from jobtracking.services import SYSTEM, Move, NewJob, job_create_many, jobs_transition
    from jobtracking.services.transitions import Actor

    api = Actor("api")
    news = [
        NewJob(
            extractor=extractor,
            file_id=f"audit-{round_number}-{n}",
            source_url=f"https://files.example.org/{n}.pdf",
        )
        for n in range(JOBS)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    ids = []
    for start in range(0, JOBS, 500):
        outcomes = job_create_many(news[start : start + 500], actor=api)
        ids += [outcome.job.pk for outcome in outcomes]
    previous = "pending"
    for status in LIFECYCLE:
        for start in range(0, JOBS, BATCH):
            moves = [
                Move(pk, status, expected_from=(previous,), details=DETAILS)
                for pk in ids[start : start + BATCH]
            ]
            jobs_transition(moves, actor=SYSTEM)
        previous = status
    return JOBS / (time.perf_counter() - started), (time.process_time() - cpu) * 1000 / JOBS


def writes_ratio() -> None:
    from tests.factories import ExtractorFactory

    extractor = ExtractorFactory(slug=f"bench-audit-{int(time.time())}")
    rates, cpu = {True: [], False: []}, {True: [], False: []}
    order = [True, False, False, True] * ((ROUNDS + 1) // 2)
    writes_round(extractor, -1)  # warm: prepared statements, caches
    for n, on in enumerate(order[: ROUNDS * 2]):
        with nullcontext() if on else swapped("chaining"):
            rate, ms = writes_round(extractor, n)
        rates[on].append(rate)
        cpu[on].append(ms)
    with_, without = statistics.median(rates[True]), statistics.median(rates[False])
    cpu_with, cpu_without = statistics.median(cpu[True]), statistics.median(cpu[False])
    print(
        f"engine writes alone, {JOBS:,} jobs x (create + {len(LIFECYCLE)} moves), {BATCH} a "
        f"transaction, {ROUNDS} rounds each: with chaining {with_:,.0f} jobs/s (median), "
        f"without {without:,.0f} jobs/s; ratio {with_ / without:.3f} (a floor of the engine's); "
        f"CPU of this process {cpu_with:.2f} against {cpu_without:.2f} ms a job, ratio "
        f"{cpu_without / cpu_with:.3f}; load average {os.getloadavg()[0]:.1f}"
    )
    print("  with:    " + ", ".join(f"{r:,.0f}" for r in rates[True]))
    print("  without: " + ", ".join(f"{r:,.0f}" for r in rates[False]))
    # The rounds without chaining left unchained rows: gone before verify_audit's part.
    extractor.jobs.all().delete()


def generate_history(extractor_id: int, rows: int) -> int:
    """`rows` audit rows, five for each of rows / 5 new jobs, chained, with each job's head, and
    one checkpoint's leaves over them (signed by the benchmark's key)."""
    from django.db import connection

    from bench.data import add_terminal_jobs
    from jobtracking.models import ExtractionJob, JobStatusChange
    from jobtracking.services.audit_verification import canonical_sql

    jobs = rows // 5
    add_terminal_jobs(extractor_id, jobs, "audit-")
    change, job = JobStatusChange._meta.db_table, ExtractionJob._meta.db_table
    steps = (None, "pending", "submitting", "submitted", "processing", "succeeded")
    head, tail = canonical_sql()  # verify_audit's own, over columns of the same names
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE heads AS SELECT id, created_at, repeat('0', 64) AS hash "
            f"FROM {job} WHERE extractor_id = %s",
            [extractor_id],
        )
        for k, (from_status, to_status) in enumerate(itertools.pairwise(steps)):
            cursor.execute(
                "CREATE TEMP TABLE step AS SELECT job_id, changed_at, prev_hash, "
                f"encode(sha256(convert_to({head} || '{{}}' || {tail}, 'UTF8')), 'hex') AS hash "
                "FROM (SELECT h.id AS job_id, NULL::int AS actor_id, 'system' AS actor_type, "
                f"1 AS attempt, h.created_at + interval '{k} seconds' AS changed_at, "
                "%s::text AS from_status_id, %s::text AS to_status_id, h.hash AS prev_hash, "
                "'' AS reason FROM heads h) c ORDER BY job_id",
                [from_status, to_status],
            )
            cursor.execute(
                f"INSERT INTO {change} (job_id, from_status_id, to_status_id, attempt, "
                "changed_at, actor_type, reason, details, prev_hash, hash) "
                "SELECT job_id, %s, %s, 1, changed_at, 'system', '', '{}', prev_hash, hash "
                "FROM step ORDER BY job_id",
                [from_status, to_status],
            )
            cursor.execute("UPDATE heads h SET hash = s.hash FROM step s WHERE s.job_id = h.id")
            cursor.execute("DROP TABLE step")
        cursor.execute(f"UPDATE {job} j SET audit_head = h.hash FROM heads h WHERE h.id = j.id")
        cursor.execute(f"ANALYZE {change}")
    return jobs


def verify_at_scale() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    from django.core.management import call_command
    from django.test.utils import override_settings

    from jobtracking.models import JobStatusChange
    from jobtracking.services.audit_checkpoints import audit_checkpoint_create
    from tests.factories import ExtractorFactory

    key = Ed25519PrivateKey.generate()
    os.environ["AUDIT_SIGNING_KEY"] = key.private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption()
    ).hex()
    extractor = ExtractorFactory(slug=f"bench-audit-verify-{int(time.time())}")
    started = time.perf_counter()
    jobs = generate_history(extractor.pk, ROWS)
    with override_settings(AUDIT_CHECKPOINT_LAG_SECONDS=0):
        checkpoint = audit_checkpoint_create()
    made = time.perf_counter() - started
    total = JobStatusChange.objects.count()
    print(
        f"generated {ROWS:,} audit rows of {jobs:,} jobs and a checkpoint of "
        f"{len(checkpoint.leaves):,} leaves in {made:.0f} s ({total:,} rows in the table)"
    )
    out = io.StringIO()
    cpu, started = time.process_time(), time.perf_counter()
    call_command("verify_audit", stdout=out)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"verify_audit over {total:,} rows: {elapsed:.1f} s ({total / elapsed:,.0f} rows/s, "
        f"{cpu:.1f} CPU s in this process; target <= 120 s at 10,000,000; load average "
        f"{os.getloadavg()[0]:.1f}): {out.getvalue().strip()}"
    )
    if total < 10_000_000:
        print(f"  at 10,000,000 rows, linearly: {elapsed * 10_000_000 / total:.0f} s")


def main() -> None:
    setup()
    if ENGINE_JOBS:
        engine_ratio()
    if ROUNDS:
        writes_ratio()
    if ROWS:
        verify_at_scale()


if __name__ == "__main__":
    main()
