"""Where the workers' CPU goes: `bench.engine`'s 2-worker run, sampled by py-spy (every process
of the cluster, CPU time only), then the functions that took the most of it, inclusive, in CPU
milliseconds a job.

    PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.profile_workers

    BENCH_PROFILE_JOBS (3,000)  jobs in the run
    BENCH_PROFILE_TOP (40)      functions listed
    BENCH_PROFILE_OUT           also keep the collapsed stacks (for a flame graph) in this file

py-spy is not a dependency of the project: `.venv/bin/pip install py-spy` first.
"""

import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import setup
from bench.engine import (
    Monitor,
    create_jobs,
    new_extractor,
    serve_samples,
    start_stack,
    stop_stack,
    tree_cpu_seconds,
)

RATE = 250  # samples a second


def collapsed_totals(path: Path) -> tuple[Counter, int]:
    """Samples in which each function appears (once per stack) and the samples in all."""
    inclusive: Counter = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        total += samples
        frames = {
            frame.split(" (")[0] + " " + frame.rpartition("/")[2].split(":")[0]
            for frame in stack.split(";")[1:]
        }
        for frame in frames:
            inclusive[frame] += samples
    return inclusive, total


def main() -> None:
    setup()
    from tests.processes import wait_until

    spy = shutil.which("py-spy") or str(Path(os.sys.executable).parent / "py-spy")
    count = int(os.environ.get("BENCH_PROFILE_JOBS", 3_000))
    top = int(os.environ.get("BENCH_PROFILE_TOP", 40))
    monitor = Monitor(os.environ["DATABASE_URL"])
    files, file_server = serve_samples()
    stack = start_stack(workers=2, clusters=1, dispatchers=1)
    out = Path(os.environ.get("BENCH_PROFILE_OUT") or tempfile.mktemp(suffix=".txt"))
    try:
        extractor = new_extractor(stack.sandbox_url)
        cluster = stack.clusters[0]
        recorder = subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(cluster.pid),
                "--subprocesses",
                "--rate",
                str(RATE),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(2)
        before = tree_cpu_seconds(stack.clusters)
        started = time.perf_counter()
        create_jobs(extractor, count, files)
        wait_until(lambda: monitor.active(extractor.pk) == 0, 3600, "every job to finish")
        wall = time.perf_counter() - started
        cpu_ms = 1000 * (tree_cpu_seconds(stack.clusters) - before) / count
        recorder.send_signal(2)
        recorder.wait(timeout=60)
    finally:
        stop_stack(stack)
        file_server.terminate()
    inclusive, total = collapsed_totals(out)
    print(f"{count:,} jobs in {wall:.1f} s; workers' CPU {cpu_ms:.2f} ms a job; {total:,} samples")
    print("inclusive CPU ms a job (share of the workers' samples):")
    for frame, samples in inclusive.most_common(top):
        share = samples / total
        print(f"  {share * cpu_ms:6.2f}  {100 * share:5.1f} %  {frame}")
    print(f"collapsed stacks: {out}")


if __name__ == "__main__":
    main()
