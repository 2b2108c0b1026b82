"""Admin speed with 1,000,000 jobs: changelist pages (with and without filters) and the dashboard,
server time through Django's full request path.

    make bench            (or: .ci/with_postgres.sh .venv/bin/python -m bench.admin)
"""

import os
import statistics
import time

from bench import setup


def main() -> None:
    setup()
    from django.test import Client

    from bench.data import add_due_jobs, add_terminal_jobs
    from jobtracking.models import ExtractionJob
    from tests.factories import ExtractorFactory, UserFactory

    stamp = int(time.time())
    stored = int(os.environ.get("BENCH_LARGE_JOBS", 1_000_000))
    extractor = ExtractorFactory(slug=f"bench-admin-{stamp}")
    add_terminal_jobs(extractor.pk, stored, f"a{stamp}-")
    add_due_jobs(extractor.pk, 500, f"d{stamp}-")
    short_id = str(ExtractionJob.objects.filter(file_id=f"a{stamp}-4242").get().pk)[-12:]
    client = Client(SERVER_NAME="localhost")
    client.force_login(UserFactory(username=f"root-{stamp}", is_staff=True, is_superuser=True))

    pages = {
        "jobs changelist": "/admin/jobtracking/extractionjob/",
        "  status=failed": "/admin/jobtracking/extractionjob/?status=failed",
        "  extractor + last 7 days": (
            f"/admin/jobtracking/extractionjob/?extractor__id__exact={extractor.pk}&created=7"
        ),
        "  error code": "/admin/jobtracking/extractionjob/?error_code__exact=extraction_failed",
        "  search file id": f"/admin/jobtracking/extractionjob/?q=a{stamp}-4242",
        "  search short id": f"/admin/jobtracking/extractionjob/?q={short_id}",
        "  page 50": "/admin/jobtracking/extractionjob/?p=50",
        "audit log": "/admin/jobtracking/jobstatuschange/",
        "dashboard": "/admin/dashboard/",
    }
    print(
        f"admin with {stored:,} jobs (20 requests each; targets: changelist <= 300 ms, "
        f"dashboard <= 500 ms):"
    )
    for label, url in pages.items():
        ordered = timed_gets(client, url)
        print(
            f"  {label:<28} p50 {statistics.median(ordered) * 1000:6.1f} ms, "
            f"p95 {ordered[18] * 1000:6.1f} ms"
        )


def timed_gets(client, url: str, times: int = 20) -> list[float]:
    """The seconds each of `times` GETs of `url` took, sorted (each must answer 200)."""
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        response = client.get(url)
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return sorted(samples)


if __name__ == "__main__":
    main()
