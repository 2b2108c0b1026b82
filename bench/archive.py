"""Archive before purge against today's purge, in one sitting. Rounds alternate between three
`purge_jobs` runs, each over BENCH_ARCHIVE_JOBS (6,000) fresh finished jobs with their history,
events and results, each in a process of its own (its peak memory is its own):

- today: the purge as it was before archiving, from a copy of the code at
  BENCH_ARCHIVE_BASELINE (default: the parent of the commit that added the archive);
- off: this code with `JOBS_ARCHIVE_BEFORE_PURGE=0`;
- archive: this code, archiving to local files.

Then one archiving run over BENCH_ARCHIVE_SCALE (4) times as many jobs (flat memory: the same
peak), and "what happened to file X" (live jobs and the archive index) with every archived
job indexed.

    PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.archive      (also `make bench`)
"""

import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import setup

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("today", "off", "archive")


def purge_child(slug: str, archive_root: str) -> None:
    """In the child process: purge one extractor's jobs, print elapsed seconds and peak RSS."""
    setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.JOBS_RETENTION_DAYS = dict.fromkeys(settings.JOBS_RETENTION_DAYS, 0)
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": archive_root},
        },
    }
    started = time.perf_counter()
    call_command("purge_jobs", "--extractor", slug, "--batch-size", "2000", stdout=io.StringIO())
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"elapsed": elapsed, "peak_mib": peak}))


def baseline_tree() -> Path:
    """A copy of the code before the archive (this module runs there as a script, its imports
    resolved in the copy)."""
    ref = os.environ.get("BENCH_ARCHIVE_BASELINE") or (
        git(
            "log", "--diff-filter=A", "--format=%H", "--", "jobtracking/services/archive.py"
        ).split()[-1]
        + "^"
    )
    tree = Path(tempfile.mkdtemp(prefix="bench-archive-baseline-"))
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    print(f"today's purge: the code at {git('rev-parse', '--short', ref).strip()}")
    return tree


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout


def run_purge(slug: str, variant: str, archive_root: str, baseline: Path) -> dict:
    code = baseline if variant == "today" else ROOT
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "JOBS_ARCHIVE_BEFORE_PURGE": "1" if variant == "archive" else "0",
    }
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--purge", slug, archive_root],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    setup()
    from bench.data import add_finished_jobs_with_history
    from jobtracking.models import ArchivedJob, ExtractionJob
    from jobtracking.selectors import archived_job_search, job_search
    from tests.factories import ExtractorFactory

    count = int(os.environ.get("BENCH_ARCHIVE_JOBS", 6_000))
    rounds = int(os.environ.get("BENCH_ARCHIVE_ROUNDS", 3))
    scale = int(os.environ.get("BENCH_ARCHIVE_SCALE", 4))
    archive_root = tempfile.mkdtemp(prefix="bench-archive-")
    baseline = baseline_tree()
    stamp = int(time.time())

    def measured(variant: str, label: str, jobs: int) -> dict:
        extractor = ExtractorFactory(slug=f"bench-archive-{stamp}-{label}")
        rows = add_finished_jobs_with_history(extractor.pk, jobs, f"{label}-")
        result = run_purge(extractor.slug, variant, archive_root, baseline)
        assert not ExtractionJob.objects.filter(extractor=extractor).exists()
        result["rows_per_s"] = rows / result["elapsed"]
        print(
            f"  {label}: {jobs:,} jobs, {rows:,} rows in {result['elapsed']:.1f} s "
            f"({result['rows_per_s']:,.0f} rows/s); peak RSS {result['peak_mib']:.0f} MiB"
        )
        return result

    print(f"purge_jobs, {rounds} rounds of {count:,} jobs per variant, alternating:")
    runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for round_ in range(rounds):
        for variant in VARIANTS:
            runs[variant].append(measured(variant, f"{variant}{round_}", count))
    rate = {v: statistics.median(r["rows_per_s"] for r in runs[v]) for v in VARIANTS}
    print(
        "median rows/s: "
        + ", ".join(f"{v} {rate[v]:,.0f}" for v in VARIANTS)
        + f"; archive / today {rate['archive'] / rate['today']:.2f} (target >= 1.0), "
        f"archive / off {rate['archive'] / rate['off']:.2f}"
    )
    big = measured("archive", "archive-scaled", count * scale)
    peak = statistics.median(r["peak_mib"] for r in runs["archive"])
    print(
        f"peak RSS archiving {count:,} jobs: {peak:.0f} MiB (median); {count * scale:,} jobs: "
        f"{big['peak_mib']:.0f} MiB; ratio {big['peak_mib'] / peak:.2f} (flat: about 1.0)"
    )
    print(f"archive index: {ArchivedJob.objects.count():,} purged jobs")

    file_id = ArchivedJob.objects.order_by("?").values_list("file_id", flat=True)[0]
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        list(job_search(ExtractionJob.objects.all(), file_id))
        list(archived_job_search(ArchivedJob.objects.all(), file_id))
        timings.append((time.perf_counter() - started) * 1000)
    print(
        f"what happened to file {file_id!r} (live jobs and the archive index): "
        f"median {statistics.median(timings):.1f} ms, max {max(timings):.1f} ms (target < 1,000)"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--purge"]:
        purge_child(sys.argv[2], sys.argv[3])
    else:
        main()
