"""The dashboard's reads: the broker's waiting tasks by kind (real django-q2 rows), pending jobs
apart from in-flight ones, and jobs created and finished per minute or hour (on PostgreSQL,
through an index)."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.tasks import async_task

from jobtracking.infra.queue import enqueue_batch, enqueue_cancel_at_extractor
from jobtracking.models import ExtractionJob
from jobtracking.selectors import active_jobs_by_extractor, broker_tasks_waiting, job_throughput
from tests.factories import ExtractionJobFactory, ExtractorFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)  # into the real queue, not run inline


def kinds(waiting):
    return {kind: row["count"] for kind, row in waiting["kinds"].items()}


def test_broker_tasks_waiting_tells_each_kind_apart(broker):
    Schedule.objects.create(func="jobtracking.engine.tasks.reap_stuck_jobs", minutes=1)
    enqueue_batch([uuid.uuid4()])
    first = OrmQ.objects.get()
    enqueue_batch([uuid.uuid4()])
    enqueue_cancel_at_extractor(uuid.uuid4())
    for delivery_id in (1, 2, 3):  # enqueued before the delivery lane, by the old module
        async_task("jobtracking.tasks.deliver_webhook", delivery_id)
    async_task("jobtracking.engine.tasks.reap_stuck_jobs")
    async_task("os.path.join", "a")
    OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="not signed", lock=timezone.now())
    enqueue_batch([uuid.uuid4()])  # a cluster took it: no longer waiting
    taken = OrmQ.objects.latest("id")
    OrmQ.objects.filter(pk=taken.pk).update(lock=timezone.now() + timedelta(minutes=1))

    waiting = broker_tasks_waiting(read=100)

    assert kinds(waiting) == {
        "job batches": 2,
        "other job work": 1,
        "webhook deliveries": 3,
        "housekeeping": 1,
        "other": 2,
    }
    assert (waiting["total"], waiting["read"], waiting["partial"]) == (9, 9, False)
    deliveries = waiting["kinds"]["webhook deliveries"]["functions"]
    assert deliveries == [
        {"name": "jobtracking.tasks.deliver_webhook", "count": 3, "exists": False}
    ]
    batches = waiting["kinds"]["job batches"]["functions"]
    assert batches == [
        {"name": "jobtracking.engine.tasks.process_jobs", "count": 2, "exists": True}
    ]
    other = {f["name"]: f["exists"] for f in waiting["kinds"]["other"]["functions"]}
    assert other == {"os.path.join": True, "(unreadable)": False}
    assert waiting["oldest_enqueued_at"] == first.task["started"]


def test_broker_tasks_waiting_decodes_only_the_oldest(broker):
    async_task("jobtracking.tasks.deliver_webhook", 1)
    for _ in range(3):
        enqueue_batch([uuid.uuid4()])
    waiting = broker_tasks_waiting(read=2)
    assert (waiting["total"], waiting["read"], waiting["partial"]) == (4, 2, True)
    assert kinds(waiting)["webhook deliveries"] == 1 and kinds(waiting)["job batches"] == 1


def test_broker_tasks_waiting_is_empty_without_tasks():
    waiting = broker_tasks_waiting(read=10)
    assert waiting["total"] == 0 and waiting["oldest_enqueued_at"] is None
    assert set(kinds(waiting).values()) == {0}


def test_active_jobs_by_extractor_counts_pending_apart_from_in_flight():
    now = timezone.now()
    alpha, beta = ExtractorFactory(slug="alpha"), ExtractorFactory(slug="beta")
    ExtractionJobFactory(extractor=alpha, created_at=now - timedelta(minutes=30))
    ExtractionJobFactory(extractor=alpha, created_at=now - timedelta(minutes=5))
    ExtractionJobFactory(extractor=alpha, submitting=True, created_at=now - timedelta(minutes=2))
    ExtractionJobFactory(extractor=beta, submitted=True, created_at=now - timedelta(minutes=9))
    ExtractionJobFactory(extractor=beta, processing=True, created_at=now - timedelta(minutes=1))
    ExtractionJobFactory(extractor=beta, succeeded=True, created_at=now - timedelta(hours=2))

    active = active_jobs_by_extractor(ExtractionJob.objects.all())

    assert (active["pending"].count, active["pending"].oldest_at) == (
        2,
        now - timedelta(minutes=30),
    )
    assert (active["in_flight"].count, active["in_flight"].oldest_at) == (
        3,
        now - timedelta(minutes=9),
    )
    rows = {row["extractor"]: row for row in active["by_extractor"]}
    assert list(rows) == ["alpha", "beta"]
    assert (rows["alpha"]["pending"].count, rows["alpha"]["in_flight"].count) == (2, 1)
    assert rows["alpha"]["in_flight"].oldest_at == now - timedelta(minutes=2)
    assert (rows["beta"]["pending"].count, rows["beta"]["in_flight"].count) == (0, 2)
    assert rows["beta"]["pending"].oldest_at is None
    assert rows["beta"]["in_flight"].oldest_at == now - timedelta(minutes=9)
    assert active["by_status"] == {
        "held": 0,
        "pending": 2,
        "processing": 1,
        "submitted": 1,
        "submitting": 1,
    }


def bucket_of(buckets, moment, width=timedelta(minutes=1)):
    (bucket,) = [b for b in buckets if b["at"] <= moment < b["at"] + width]
    return bucket


def test_job_throughput_per_minute_buckets_the_last_hour():
    now = timezone.now()
    ago = [now - timedelta(minutes=m) for m in (0, 1, 30)]
    ExtractionJobFactory(succeeded=True, created_at=ago[1], completed_at=ago[0])
    ExtractionJobFactory(succeeded=True, created_at=ago[1], completed_at=ago[0])
    ExtractionJobFactory(failed=True, created_at=ago[2], completed_at=ago[1])
    ExtractionJobFactory(cancelled=True, created_at=ago[2], completed_at=ago[2])
    ExtractionJobFactory(created_at=ago[0])  # pending: created, not finished
    ExtractionJobFactory(
        succeeded=True,
        created_at=now - timedelta(hours=3),
        completed_at=now - timedelta(minutes=90),
    )

    buckets = job_throughput(ExtractionJob.objects.all(), unit="minute", count=61)

    assert len(buckets) == 61 and buckets[-1]["at"] <= now < buckets[-1]["at"] + timedelta(
        minutes=1
    )
    assert [b["at"] for b in buckets] == sorted(b["at"] for b in buckets)
    assert {b["at"].second for b in buckets} == {0}
    counts = [(b["created"], b["succeeded"], b["not_succeeded"]) for b in buckets]
    assert sum(c[1] for c in counts) == 2 and sum(c[2] for c in counts) == 2  # not the 90-min one
    assert bucket_of(buckets, ago[0])["succeeded"] == 2
    assert bucket_of(buckets, ago[1])["not_succeeded"] == 1
    assert bucket_of(buckets, ago[1])["created"] == 2
    assert bucket_of(buckets, ago[2])["created"] == 2
    assert bucket_of(buckets, ago[2])["not_succeeded"] == 1


def test_job_throughput_per_hour_buckets_the_day():
    now = timezone.now()
    ExtractionJobFactory(succeeded=True, completed_at=now - timedelta(hours=5))
    ExtractionJobFactory(succeeded=True, completed_at=now - timedelta(hours=30))
    buckets = job_throughput(ExtractionJob.objects.all(), unit="hour", count=24)
    assert len(buckets) == 24 and {(b["at"].minute, b["at"].second) for b in buckets} == {(0, 0)}
    assert buckets[-1]["at"] <= now < buckets[-1]["at"] + timedelta(hours=1)
    assert sum(b["succeeded"] for b in buckets) == 1
    assert bucket_of(buckets, now - timedelta(hours=5), timedelta(hours=1))["succeeded"] == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_job_throughput_scans_an_index_of_each_time_column():
    """Without sequential scans the planner must still find a plan: each query ranges over an
    index of its column, so the dashboard stays fast however large the table."""
    with CaptureQueriesContext(connection) as queries:
        job_throughput(ExtractionJob.objects.all(), unit="minute", count=61)
    plans = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for query in queries:
            cursor.execute(f"EXPLAIN {query['sql']}")
            plans.append("\n".join(row[0] for row in cursor.fetchall()))
    assert len(plans) == 2
    # A range on the bare column, which its own index serves; which index an empty table's
    # planner picks among those holding the column is its choice.
    assert "Index Cond: (completed_at >=" in plans[0]
    assert "Index Cond: (created_at >=" in plans[1]
