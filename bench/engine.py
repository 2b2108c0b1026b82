"""End-to-end throughput: N jobs through the sandbox (no added latency) with two workers, and
the extractor calls each job cost.

    make bench            (BENCH_E2E_JOBS=10000 by default)
"""

import functools
import os
import threading
import time
from datetime import timedelta
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

from bench import setup

SAMPLES = Path(__file__).resolve().parent.parent / "extraction" / "sandbox" / "samples"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def serve_samples() -> str:
    handler = functools.partial(QuietHandler, directory=str(SAMPLES))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    setup()
    from django.db import connection
    from django.db.models import Count

    from extraction.models import Adapter
    from jobtracking import states
    from jobtracking.models import ExtractionJob
    from jobtracking.services import Actor, job_create
    from tests.factories import ExtractorFactory
    from tests.processes import answers, free_port, start_command, stop, wait_until

    count = int(os.environ.get("BENCH_E2E_JOBS", 10_000))
    workers = os.environ.get("Q_WORKERS", "2")
    files = serve_samples()
    port = free_port()
    sandbox_url = f"http://127.0.0.1:{port}"
    env = {"Q_SYNC": "0", "Q_WORKERS": workers}
    processes = [
        start_command("run_sandbox_extractor", "--port", str(port), env=env),
        start_command("run_workers", env=env),
        start_command("run_dispatcher", env=env),
    ]
    try:
        wait_until(lambda: answers(f"{sandbox_url}/healthz"), 30, "the sandbox")
        extractor = ExtractorFactory(
            slug=f"bench-e2e-{int(time.time())}",
            adapter=Adapter.SANDBOX,
            base_url=sandbox_url,
            poll_initial_interval=timedelta(milliseconds=500),
            poll_max_interval=timedelta(seconds=5),
        )
        started = time.perf_counter()
        names = sorted(p.name for p in SAMPLES.iterdir())
        for n in range(count):
            name = names[n % len(names)]
            job_create(
                extractor=extractor,
                actor=Actor.system(),
                file_id=f"bench-{n}",
                file_name=name,
                source_url=f"{files}/{name}",
            )
        created = time.perf_counter() - started
        active = ExtractionJob.objects.filter(extractor=extractor, status__in=states.ACTIVE)
        wait_until(lambda: not active.exists(), 3600, "every job to finish")
        elapsed = time.perf_counter() - started
        outcome = dict(
            ExtractionJob.objects.filter(extractor=extractor)
            .values_list("status")
            .annotate(n=Count("id"))
        )
        stats = requests.get(f"{sandbox_url}/_sandbox/stats", timeout=10).json()
        calls = sum(stats["requests"].values())
        print(
            f"{count:,} jobs, {workers} workers: created in {created:.1f} s, "
            f"all finished after {elapsed:.1f} s ({count / elapsed:.0f} jobs/s; target 10,000 "
            f"in <= 120 s)"
        )
        print(f"outcome: {outcome}")
        print(
            f"extractor calls per job: {calls / count:.2f} "
            f"(submit {stats['requests'].get('POST', 0) / count:.2f}, "
            f"polls + result {stats['requests'].get('GET', 0) / count:.2f}); "
            f"expected 3 = submit + 1 poll + 1 result"
        )
        connection.close()
    finally:
        for process in processes:
            stop(process)


if __name__ == "__main__":
    main()
