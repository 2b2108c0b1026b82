"""The webhook deliveries' admin pages with 1,000,000 deliveries (and as many attempts), server
time through Django's full request path: the changelist unfiltered, filtered by state and by
subscription, searched and paged; a delivery's page; a subscription's page.

    .ci/with_postgres.sh .venv/bin/python -m bench.admin_deliveries
"""

import os
import statistics
import time

from bench import setup
from bench.admin import timed_gets


def add_deliveries(job_prefix: str, subscription_ids: list[int], per_job: int) -> None:
    """`per_job` events of each job whose file id starts with `job_prefix`, one delivery of
    each to one of the subscriptions in turn (1 % dead, 1 % pending, the rest delivered), and
    one attempt of each delivery."""
    from django.db import connection

    from jobtracking.models import DeliveryAttempt, ExtractionJob, JobEvent, WebhookDelivery

    jobs, events = ExtractionJob._meta.db_table, JobEvent._meta.db_table
    deliveries, attempts = WebhookDelivery._meta.db_table, DeliveryAttempt._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {events} (event_id, job_id, type, payload, created_at) "
            "SELECT gen_random_uuid(), j.id, 'job.succeeded', '{}'::jsonb, "
            "j.created_at + k * interval '1 second' "
            f"FROM {jobs} j CROSS JOIN generate_series(1, %s) k WHERE j.file_id LIKE %s",
            [per_job, f"{job_prefix}%"],
        )
        cursor.execute(
            f"INSERT INTO {deliveries} (event_id, subscription_id, state, attempts, "
            "next_attempt_at, last_status_code, last_error, last_response_excerpt, "
            "first_failed_at, delivered_at, created_at) "
            "SELECT e.id, (%s::bigint[])[1 + e.id %% cardinality(%s::bigint[])], "
            "CASE e.id %% 100 WHEN 0 THEN 'dead' WHEN 1 THEN 'pending' ELSE 'delivered' END, "
            "1, CASE e.id %% 100 WHEN 1 THEN now() + interval '1 hour' END, "
            "CASE e.id %% 100 WHEN 0 THEN 503 WHEN 1 THEN 500 ELSE 204 END, "
            "CASE WHEN e.id %% 100 < 2 THEN 'HTTP 503 from hooks.example.org:443' ELSE '' END, "
            "'', CASE WHEN e.id %% 100 < 2 THEN e.created_at END, "
            "CASE WHEN e.id %% 100 >= 2 THEN e.created_at END, e.created_at "
            f"FROM {events} e JOIN {jobs} j ON j.id = e.job_id WHERE j.file_id LIKE %s",
            [subscription_ids, subscription_ids, f"{job_prefix}%"],
        )
        cursor.execute(
            f"INSERT INTO {attempts} (delivery_id, attempted_at, status_code, error, "
            "response_excerpt, duration_ms) "
            "SELECT d.id, d.created_at, d.last_status_code, d.last_error, '', 40 "
            f"FROM {deliveries} d"
        )
        for table in (events, deliveries, attempts):
            cursor.execute(f"ANALYZE {table}")


def main() -> None:
    setup()
    from django.test import Client

    from bench.data import add_terminal_jobs
    from jobtracking.models import WebhookDelivery
    from tests.factories import ExtractorFactory, UserFactory, WebhookSubscriptionFactory

    stamp = int(time.time())
    stored = int(os.environ.get("BENCH_DELIVERIES", 1_000_000))
    per_job = 10
    extractor = ExtractorFactory(slug=f"bench-deliveries-{stamp}")
    add_terminal_jobs(extractor.pk, stored // per_job, f"w{stamp}-")
    subscriptions = [WebhookSubscriptionFactory() for _ in range(5)]
    add_deliveries(f"w{stamp}-", [s.pk for s in subscriptions], per_job)
    some = WebhookDelivery.objects.select_related("event").order_by("-pk")[500]
    client = Client(SERVER_NAME="localhost")
    client.force_login(UserFactory(username=f"root-{stamp}", is_staff=True, is_superuser=True))

    base = "/admin/jobtracking/webhookdelivery/"
    pages = {
        "deliveries changelist": base,
        "  state=dead": f"{base}?state__exact=dead",
        "  state=pending": f"{base}?state__exact=pending",
        "  one subscription": f"{base}?subscription__id__exact={subscriptions[2].pk}",
        "  search event id": f"{base}?q={some.event.event_id}",
        "  search job id": f"{base}?q={some.event.job_id}",
        "  search HTTP status": f"{base}?q=503",
        "  search URL prefix": f"{base}?q={subscriptions[3].url}",
        "  page 50": f"{base}?p=50",
        "a delivery's page": f"{base}{some.pk}/change/",
        "a subscription's page": (
            f"/admin/jobtracking/webhooksubscription/{subscriptions[1].pk}/change/"
        ),
    }
    print(f"webhook admin with {WebhookDelivery.objects.count():,} deliveries (20 requests each):")
    for label, url in pages.items():
        ordered = timed_gets(client, url)
        statements = captured(client, url)
        print(
            f"  {label:<28} p50 {statistics.median(ordered) * 1000:6.1f} ms, "
            f"p95 {ordered[18] * 1000:6.1f} ms; SQL "
            f"{sum(float(q['time']) for q in statements) * 1000:5.1f} ms in {len(statements)}"
        )
        if os.environ.get("BENCH_SQL"):  # the three slowest, to see what an index must serve
            for query in sorted(statements, key=lambda q: -float(q["time"]))[:3]:
                print(f"      {float(query['time']) * 1000:6.1f} ms  {query['sql'][:300]}")


def captured(client, url: str) -> list[dict]:
    """The statements of one more request: the database's share of the page's time (the rest is
    Django rendering it, which the machine's load swings most)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    return queries.captured_queries


if __name__ == "__main__":
    main()
