"""API speed: single create, bulk create, and list/filter latency with 1,000,000 stored jobs.

Requests go through Django's full request path (middleware, authentication, serializers) in
process, without an HTTP server in front.

    make bench            (or: .ci/with_postgres.sh .venv/bin/python -m bench.api)
"""

import os
import statistics
import time
from datetime import timedelta

from bench import setup


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"p50 {statistics.median(ordered) * 1000:6.1f} ms, p95 {p95 * 1000:6.1f} ms"


def main() -> None:
    setup()
    from django.contrib.auth.models import Permission
    from django.utils import timezone
    from rest_framework.test import APIClient

    from bench.data import add_terminal_jobs
    from jobtracking.api.auth import token_issue
    from tests.factories import ExtractorFactory, UserFactory

    stamp = int(time.time())
    user = UserFactory(username=f"bench-{stamp}")
    for codename in ("view_extractionjob", "add_extractionjob", "view_all_extractionjobs"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(user=user)}")
    extractor = ExtractorFactory(slug=f"bench-api-{stamp}")

    def job(n: int, prefix: str) -> dict:
        return {
            "extractor": extractor.slug,
            "file_id": f"{prefix}-{n}",
            "source_url": f"https://93.184.216.34/{prefix}/{n}.pdf",
            "metadata": {"grant": n},
        }

    singles = int(os.environ.get("BENCH_API_SINGLE", 2000))
    started = time.perf_counter()
    for n in range(singles):
        response = client.post("/api/v1/jobs/", job(n, f"s{stamp}"), format="json")
        assert response.status_code == 201, response.content
    elapsed = time.perf_counter() - started
    print(f"single create: {singles / elapsed:7.0f} jobs/s ({singles} requests; target >= 500)")

    batches = int(os.environ.get("BENCH_API_BULK_BATCHES", 20))
    started = time.perf_counter()
    for b in range(batches):
        items = [job(n, f"b{stamp}-{b}") for n in range(500)]
        response = client.post("/api/v1/jobs/bulk/", {"jobs": items}, format="json")
        assert response.json()["created"] == 500, response.content[:500]
    elapsed = time.perf_counter() - started
    print(
        f"bulk create:   {batches * 500 / elapsed:7.0f} jobs/s ({batches} x 500; target >= 5,000)"
    )

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
