"""The live dashboard: counts that link, a chart with values, liveness with ages, queue depth
and lag, the broker's tasks by kind, the webhook lane's backlog, circuits that hold work, and the
partial body the page fetches to refresh itself."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

from jobtracking.admin import dashboard
from jobtracking.engine.queue import enqueue_batch, enqueue_cancel_at_extractor
from jobtracking.models import CircuitState, ExtractorHealth, ReceiverHealth, ServiceHeartbeat
from jobtracking.services.circuits import circuit_pause
from tests.factories import (
    ExtractionJobFactory,
    ExtractorFactory,
    WebhookDeliveryFactory,
    WebhookSubscriptionFactory,
)

pytestmark = pytest.mark.django_db
DASHBOARD = "/admin/dashboard/"


def beat(kind, name, seconds_ago):
    ServiceHeartbeat.objects.create(
        name=name, kind=kind, beat_at=timezone.now() - timedelta(seconds=seconds_ago)
    )


def test_status_counts_link_to_the_filtered_list(root_client):
    ExtractionJobFactory(failed=True)
    html = root_client.get(DASHBOARD).content.decode()
    assert '<a href="/admin/jobtracking/extractionjob/?status=failed">1</a>' in html
    assert '<a href="/admin/jobtracking/extractionjob/?status=pending">0</a>' in html


def test_the_chart_has_an_axis_and_values(root_client):
    now = timezone.now()
    for _ in range(3):
        ExtractionJobFactory(succeeded=True, completed_at=now)
    ExtractionJobFactory(failed=True, completed_at=now)
    html = root_client.get(DASHBOARD).content.decode()
    assert html.count('class="y-tick"') == 3
    assert 'text-anchor="end" dominant-baseline="middle">4</text>' in html  # the axis top
    assert 'class="bar-value"' in html and 'text-anchor="middle">4</text>' in html


def test_liveness_shows_each_process_with_its_age(root_client):
    beat("cluster", "cluster@web-1", 20)
    beat("dispatcher", "dispatcher@web-1", 400)
    beat("dispatcher", "dispatcher@retired", 3 * 86400)
    html = root_client.get(DASHBOARD).content.decode()
    liveness = html[html.index('id="liveness"') :]
    assert "cluster@web-1" in liveness and "20 s ago" in liveness
    assert "6 min 40 s ago" in liveness and "silent (expected every 30 s)" in liveness
    assert "No live dispatcher" in liveness and "No live cluster" not in liveness
    assert "dispatcher@retired" not in liveness  # gone for days: history, not news


def test_queue_depth_and_dispatcher_lag(root_client):
    ExtractionJobFactory(due_at=timezone.now() - timedelta(seconds=90))
    html = root_client.get(DASHBOARD).content.decode()
    depth = html[html.index('id="queue-depth"') :]
    assert "due jobs not yet dispatched: <strong>1</strong>" in depth
    assert "dispatcher lag (oldest due job's wait): <strong>1 min 3" in depth


def test_broker_tasks_waiting_by_kind(root_client, monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)  # into the real queue, not run inline
    for _ in range(3):
        enqueue_batch([uuid.uuid4()])
    enqueue_cancel_at_extractor(uuid.uuid4())
    async_task("jobtracking.engine.tasks.reap_stuck_jobs")
    async_task("jobtracking.engine.tasks.purge_expired_jobs")
    # Taken by a cluster: not waiting any more.
    taken = OrmQ.objects.order_by("id").first()
    OrmQ.objects.filter(pk=taken.pk).update(lock=timezone.now() + timedelta(minutes=1))
    html = root_client.get(DASHBOARD).content.decode()
    assert "Broker: <strong>5</strong> task(s) waiting" in html
    kinds = html[html.index('id="broker-kinds"') :]
    assert kinds.startswith('id="broker-kinds">Waiting in the broker:')
    assert "job batches <strong>2</strong>" in kinds
    assert "other job tasks <strong>1</strong>" in kinds
    assert "housekeeping <strong>2</strong>" in kinds


def test_broker_tasks_by_kind_decodes_only_the_first_rows(root_client, monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(dashboard, "BROKER_TASKS_READ", 2)
    for _ in range(3):
        enqueue_batch([uuid.uuid4()])
    async_task("jobtracking.engine.tasks.reap_stuck_jobs")
    html = root_client.get(DASHBOARD).content.decode()
    assert "Broker: <strong>4</strong> task(s) waiting" in html
    assert "Waiting in the broker (the first 2 read): job batches <strong>2</strong>" in html


def test_webhook_lane_backlog_counts_due_deliveries_and_the_oldest_age(root_client):
    now = timezone.now()
    WebhookDeliveryFactory(created_at=now - timedelta(seconds=95))
    WebhookDeliveryFactory(created_at=now - timedelta(seconds=10))
    WebhookDeliveryFactory(next_attempt_at=now + timedelta(minutes=5))  # retrying later
    WebhookDeliveryFactory(created_at=now - timedelta(hours=2), state="delivered")
    html = root_client.get(DASHBOARD).content.decode()
    lane = html[html.index('id="delivery-lane"') :]
    assert "<strong>2</strong> pending delivery(ies) due now" in lane
    assert "oldest pending delivery's age: <strong>1 min 3" in lane


def test_circuits_that_hold_work_are_listed_with_their_last_error(root_client):
    now = timezone.now()
    ExtractorFactory(slug="fine")
    ExtractorHealth.objects.create(extractor=ExtractorFactory(slug="recovered"))  # closed
    ExtractorHealth.objects.create(
        extractor=ExtractorFactory(slug="down"),
        state=CircuitState.OPEN,
        since=now,
        last_error="HTTP 503 Service Unavailable",
        last_error_at=now - timedelta(seconds=20),
        probe_at=now + timedelta(seconds=4),
    )
    receiver = WebhookSubscriptionFactory(url="https://hooks.example.org/crm")
    circuit_pause(ReceiverHealth, receiver.pk, reason="receiver migration", now=now)
    html = root_client.get(DASHBOARD).content.decode()
    circuits = html[
        html.index('id="circuits"') : html.index("</table>", html.index('id="circuits"'))
    ]
    assert "<td>extractor</td><td>down</td>" in circuits
    assert f"<td>open since {now:%H:%M:%S} UTC</td>" in circuits
    assert "20 s ago: HTTP 503 Service Unavailable" in circuits
    assert f"<td>receiver</td><td>{receiver.pk}: https://hooks.example.org/crm</td>" in circuits
    assert f"<td>paused since {now:%H:%M:%S} UTC: receiver migration</td>" in circuits
    assert "fine" not in circuits and "recovered" not in circuits


def test_circuits_say_when_everything_works(root_client):
    ExtractorFactory()
    html = root_client.get(DASHBOARD).content.decode()
    assert "Every extractor and webhook receiver is working." in html


def test_in_flight_times_read_as_relative_with_dates(root_client):
    job = ExtractionJobFactory(
        processing=True,
        created_at=timezone.now() - timedelta(minutes=5, seconds=3),
        due_at=timezone.now() + timedelta(seconds=30),
    )
    html = root_client.get(DASHBOARD).content.decode()
    oldest = html[html.index('id="oldest"') :]
    assert "5 min 3 s ago" in oldest and "0 minutes" not in oldest
    assert timezone.localtime(job.due_at).strftime("%Y-%m-%d %H:%M:%S") in oldest
    assert "(in 2" in oldest or "(in 3" in oldest


def test_the_partial_is_the_body_alone_for_the_refresh(root_client):
    page = root_client.get(DASHBOARD).content.decode()
    partial = root_client.get(f"{DASHBOARD}?partial=1").content.decode()
    assert "jobtracking/admin/dashboard.js" in page and "<html" in page
    assert "<html" not in partial and 'id="liveness"' in partial and "data-updated" in partial


def test_the_partial_needs_the_same_permissions(client):
    from tests.jobtracking.admin.conftest import staff

    client.force_login(staff("view_extractionjob"))
    assert client.get(f"{DASHBOARD}?partial=1").status_code == 403
