"""API speed as clients get it: single and bulk create through gunicorn, run as the Procfile runs
it (production settings, gthread workers), driven by concurrent keep-alive clients; the floor in
the same run (`bench.floor`: an authenticated DRF view doing one INSERT, in the same server); and
list/filter latency with 1,000,000 stored jobs through Django's request path in process. Bulk
creates have their own floor: a DRF view that inserts a bulk body's 500 items in one statement.

    make bench            (or: .ci/with_postgres.sh .venv/bin/python -m bench.api)

    BENCH_API_CLIENTS (4)          concurrent clients (processes, one keep-alive session each)
    BENCH_API_SINGLE (3,000)       single creates (and floor requests) in all
    BENCH_API_BULK_BATCHES (20)    bulk requests of 500
"""

import http.client
import json
import multiprocessing
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from bench import setup

CLIENTS = int(os.environ.get("BENCH_API_CLIENTS", 4))
PROCFILE = Path(__file__).resolve().parent.parent / "Procfile"


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"p50 {statistics.median(ordered) * 1000:6.1f} ms, p95 {p95 * 1000:6.1f} ms"


def serve(port: int) -> subprocess.Popen:
    """gunicorn with the Procfile's own command line, on loopback."""
    web = next(line for line in PROCFILE.read_text().splitlines() if line.startswith("web:"))
    # The shell's ${NAME:-default}, with PORT ours.
    variables = {**os.environ, "PORT": str(port)}
    command = re.sub(
        r"\$\{(\w+):-([^}]*)\}", lambda m: variables.get(m[1], m[2]), web.removeprefix("web:")
    )
    argv = [a.replace("0.0.0.0", "127.0.0.1") for a in shlex.split(command)]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.floor_settings",
        "DJANGO_SECRET_KEY": "bench-only",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        # The per-client throttle (6,000/min by default) would cap one client well below this.
        "API_THROTTLE_RATE": "10000000/min",
        "LOG_LEVEL": "WARNING",
    }
    argv[0] = str(Path(sys.executable).parent / argv[0])
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _client(args) -> int:
    """One keep-alive connection (http.client: a lighter client than requests, so that less of
    the two cores goes to the load generator)."""
    url, token, kind, count, prefix, extractor = args
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    for n in range(count):
        if kind == "bulk":
            body = {"jobs": [job(extractor, f"{prefix}-{n}-{i}", i) for i in range(500)]}
        else:
            body = job(extractor, f"{prefix}-{n}", n)
        connection.request("POST", parts.path, json.dumps(body), headers)
        response = connection.getresponse()
        payload = response.read()
        assert response.status in (200, 201), payload[:300]
    connection.close()
    return count


def job(extractor: str, file_id: str, n: int) -> dict:
    return {
        "extractor": extractor,
        "file_id": file_id,
        "source_url": f"https://93.184.216.34/{file_id}.pdf",
        "metadata": {"grant": n},
    }


def drive(url: str, token: str, kind: str, requests_total: int, extractor: str, tag: str) -> float:
    """Requests per second from CLIENTS concurrent keep-alive clients."""
    per_client = max(1, requests_total // CLIENTS)
    work = [(url, token, kind, per_client, f"{tag}-{c}", extractor) for c in range(CLIENTS)]
    context = multiprocessing.get_context("spawn")
    # The clock starts once every client process has started: a Python start-up each would
    # otherwise take the server's cores during the run.
    ready = context.Barrier(CLIENTS + 1)
    with context.Pool(CLIENTS, initializer=ready.wait) as pool:
        ready.wait()
        started = time.perf_counter()
        done = sum(pool.map(_client, work))
        return done / (time.perf_counter() - started)


def cpu(server: subprocess.Popen) -> tuple[float, float]:
    """CPU seconds so far of the web server's processes and of PostgreSQL's."""
    from bench.engine import postgres_cpu_seconds, tree_cpu_seconds

    return tree_cpu_seconds([server]), postgres_cpu_seconds()


def through_gunicorn(token: str, extractor: str, stamp: int) -> None:
    from bench.floor import create_table
    from tests.processes import answers, free_port, wait_until

    create_table()
    port = free_port()
    server = serve(port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{base}/healthz"), 60, "gunicorn")
        drive(f"{base}/bench/floor/", token, "single", CLIENTS * 20, extractor, f"w{stamp}")
        drive(f"{base}/api/v1/jobs/", token, "single", CLIENTS * 20, extractor, f"w{stamp}")

        def measure(path: str, kind: str, count: int, tag: str) -> tuple[float, float, float]:
            """Requests/s, and CPU ms per request of the web server and of PostgreSQL."""
            before = cpu(server)
            rate = drive(f"{base}{path}", token, kind, count, extractor, tag)
            web, db = (after - first for after, first in zip(cpu(server), before, strict=True))
            return rate, 1000 * web / count, 1000 * db / count

        def against_floor(
            kind: str, path: str, count: int, rounds: int
        ) -> tuple[list, list, float]:
            """Medians of `measure` for the floor and the endpoint, measured in turns so that both
            see the same machine, and the median of each round's ratio (endpoint rate / floor
            rate, a pair back to back): this machine's speed drifts within a minute."""
            samples = {"floor": [], "endpoint": []}
            for r in range(rounds):
                for name, url in (
                    ("floor", f"/bench/floor/{path}"),
                    ("endpoint", f"/api/v1/jobs/{path}"),
                ):
                    samples[name].append(measure(url, kind, count, f"{name[0]}{kind}{stamp}{r}"))
            ratios = [
                endpoint[0] / floor[0]
                for floor, endpoint in zip(samples["floor"], samples["endpoint"], strict=True)
            ]
            floor, endpoint = (
                [statistics.median(column) for column in zip(*samples[name], strict=True)]
                for name in ("floor", "endpoint")
            )
            return floor, endpoint, statistics.median(ratios)

        singles = int(os.environ.get("BENCH_API_SINGLE", 3000))
        rounds = 6
        floor, create, ratio = against_floor("single", "", singles // rounds, rounds)
        print(f"through gunicorn ({PROCFILE.name} web line), {CLIENTS} keep-alive clients:")
        print(
            f"  floor (DRF view, one INSERT): {floor[0]:7.0f} requests/s; CPU per request: "
            f"gunicorn {floor[1]:.2f} ms, PostgreSQL {floor[2]:.2f} ms"
        )
        print(
            f"  single create: {create[0]:7.0f} jobs/s = {ratio:.2f}x the floor (the median "
            f"of {rounds} rounds' ratios, {create[0] / floor[0]:.2f}x by the medians; targets "
            f">= 300 jobs/s and >= 0.50x); CPU per request: gunicorn {create[1]:.2f} ms, "
            f"PostgreSQL {create[2]:.2f} ms"
        )
        batches = int(os.environ.get("BENCH_API_BULK_BATCHES", 20))
        floor, create, ratio = against_floor("bulk", "bulk/", batches // 2, 2)
        floor, create = ([rate * 500, web / 500, db / 500] for rate, web, db in (floor, create))
        print(
            f"  bulk floor (DRF view, the 500 items in one INSERT): {floor[0]:7.0f} items/s; "
            f"CPU per item: gunicorn {floor[1]:.2f} ms, PostgreSQL {floor[2]:.2f} ms"
        )
        print(
            f"  bulk create: {create[0]:7.0f} jobs/s = {ratio:.2f}x the bulk floor "
            f"(500 a request; target >= 5,000 jobs/s); CPU per job: gunicorn {create[1]:.2f} ms, "
            f"PostgreSQL {create[2]:.2f} ms"
        )
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    setup()
    from django.contrib.auth.models import Permission
    from django.utils import timezone
    from rest_framework.test import APIClient

    from bench.data import add_terminal_jobs
    from jobtracking.services.tokens import token_issue
    from tests.factories import ExtractorFactory, UserFactory

    stamp = int(time.time())
    user = UserFactory(username=f"bench-{stamp}")
    for codename in ("view_extractionjob", "add_extractionjob", "view_all_extractionjobs"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = APIClient(SERVER_NAME="localhost")
    token = token_issue(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    extractor = ExtractorFactory(slug=f"bench-api-{stamp}")

    through_gunicorn(token, extractor.slug, stamp)

    stored = int(os.environ.get("BENCH_LARGE_JOBS", 1_000_000))
    add_terminal_jobs(extractor.pk, stored, f"l{stamp}-", requested_by_id=user.pk)
    day_ago = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    week_ago = (timezone.now() - timedelta(days=7)).isoformat().replace("+00:00", "Z")
    queries = {
        "list (newest first)": "",
        "status=failed": "?status=failed",
        "status=pending&status=failed": "?status=pending&status=failed",
        f"extractor={extractor.slug}": f"?extractor={extractor.slug}",
        "error_code=extraction_failed": "?error_code=extraction_failed",
        "created in the last day": f"?created_after={day_ago}",
        "completed in a week, failed": f"?completed_after={week_ago}&status=failed",
        "search file id": f"?search=l{stamp}-4242",
        "requested_by": f"?requested_by={user.username}",
    }
    print(f"list/filter with {stored:,} jobs stored (50 a page, 100 requests each):")
    for label, query in queries.items():
        samples = []
        for _ in range(100):
            started = time.perf_counter()
            response = client.get("/api/v1/jobs/" + query)
            samples.append(time.perf_counter() - started)
            assert response.status_code == 200, response.content[:300]
        next_page = response.json()["next"]
        print(f"  {label:<32} {percentiles(samples)}")
    samples = []
    for _ in range(100):
        started = time.perf_counter()
        assert client.get(next_page).status_code == 200
        samples.append(time.perf_counter() - started)
    print(f"  {'second page (cursor)':<32} {percentiles(samples)}")


if __name__ == "__main__":
    main()
