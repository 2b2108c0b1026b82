"""The live dashboard: counts that link, charts with values (per hour, and per minute with its
rates), liveness with ages, queue depth and lag, the broker's tasks by kind, pending jobs apart
from in-flight ones, the webhook lane's backlog, circuits that hold work, times with their zone,
and the partial body the page fetches to refresh itself."""

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.tasks import async_task

from jobtracking.admin import dashboard
from jobtracking.infra.queue import enqueue_batch
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


def section(html, marker):
    start = html.index(marker)
    return html[start : html.index("</section>", start)]


def test_the_hourly_chart_has_an_axis_values_and_room_for_its_top_label(root_client):
    now = timezone.now()
    for _ in range(3):
        ExtractionJobFactory(succeeded=True, completed_at=now)
    ExtractionJobFactory(failed=True, completed_at=now)
    hourly = section(root_client.get(DASHBOARD).content.decode(), 'id="per-hour"')
    assert hourly.count('class="y-tick"') == 2 * 3  # the wide drawing and the phone's
    assert 'y="0" font-size="12" text-anchor="end" dominant-baseline="middle">4</text>' in hourly
    # The top tick sits at y=0: the view box starts above it, so its label is not cut in half.
    assert f'viewBox="0 -{dashboard.CHART_TOP} ' in hourly and dashboard.CHART_TOP >= 10
    # The bars' values in the wide drawing only: on a phone they would crowd each other.
    assert hourly.count('class="bar-value"') == 1 and 'text-anchor="middle">4</text>' in hourly
    # The busiest bar's value stands 3 units above the top: its glyphs (font size 10, ascent
    # nearly as much) fit in the view box with room to spare.
    assert 'y="-3.0" font-size="10"' in hourly and dashboard.CHART_TOP >= 3 + 10 + 2
    assert "jobs per hour, UTC" in hourly


def test_the_per_minute_chart_and_rates_count_the_last_hour(root_client):
    now = timezone.now()
    for minutes in (1, 2, 3, 40):  # in the same windows should the minute turn meanwhile
        ExtractionJobFactory(
            succeeded=True,
            created_at=now - timedelta(minutes=minutes + 1),
            completed_at=now - timedelta(minutes=minutes),
        )
    ExtractionJobFactory(succeeded=True, completed_at=now - timedelta(minutes=90))
    per_minute = section(root_client.get(DASHBOARD).content.decode(), 'id="per-minute"')
    # Succeeded and not, each minute, in the wide drawing and the phone's.
    assert per_minute.count("<rect ") == 2 * 2 * 61
    assert 'class="created-line"' in per_minute and "jobs per minute, UTC" in per_minute
    # Over the last five whole minutes: three finished, three created.
    assert "<td>last 5 min</td><td>0.6</td><td>0.6</td>" in per_minute
    assert "<td>last hour</td><td>0.1</td><td>0.1</td>" in per_minute  # 4 / 60


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
    assert "Due jobs not yet dispatched: <strong>1</strong>" in depth
    assert "dispatcher lag (oldest due job's wait): <strong>1 min 3" in depth


def test_broker_tasks_waiting_by_kind(root_client, monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)  # into the real queue, not run inline
    for _ in range(3):
        enqueue_batch([uuid.uuid4()])
    for delivery_id in (1, 2):
        async_task("jobtracking.tasks.deliver_webhook", delivery_id)
    Schedule.objects.create(func="jobtracking.engine.tasks.reap_stuck_jobs", minutes=1)
    async_task("jobtracking.engine.tasks.reap_stuck_jobs")
    # Taken by a cluster: not waiting any more.
    taken = OrmQ.objects.order_by("id").first()
    OrmQ.objects.filter(pk=taken.pk).update(lock=timezone.now() + timedelta(minutes=1))
    broker = section(root_client.get(DASHBOARD).content.decode(), 'id="broker"')
    assert "<strong>5</strong> task(s) waiting · oldest enqueued 20" in broker
    assert " UTC, 0." in broker  # the oldest's time, with its zone, and its age
    rows = dict(re.findall(r'<tr data-kind="([^"]+)">(.*?)</tr>', broker))
    assert rows["job batches"].startswith("<td>job batches</td><td>2</td>")
    assert rows["other job work"].startswith("<td>other job work</td><td>0</td>")
    assert rows["housekeeping"].startswith("<td>housekeeping</td><td>1</td>")
    deliveries = rows["webhook deliveries"]
    assert deliveries.startswith("<td>webhook deliveries</td><td>2</td>")
    assert "<code>jobtracking.tasks.deliver_webhook</code> &times; 2" in deliveries
    assert "no such function: fails when run" in deliveries
    assert "no such function" not in rows["job batches"]
    assert "other" not in rows  # shown only when some task is of no known kind


def test_broker_tasks_by_kind_decodes_only_the_first_rows(root_client, monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(dashboard, "BROKER_TASKS_READ", 2)
    for _ in range(3):
        enqueue_batch([uuid.uuid4()])
    async_task("jobtracking.engine.tasks.reap_stuck_jobs")
    broker = section(root_client.get(DASHBOARD).content.decode(), 'id="broker"')
    assert "<strong>4</strong> task(s) waiting" in broker
    assert "kinds from the oldest 2" in broker
    assert "<td>job batches</td><td>2</td>" in broker


def test_pending_jobs_are_shown_apart_from_in_flight_ones(root_client):
    now = timezone.now()
    waiting = ExtractionJobFactory(
        extractor__slug="alpha", created_at=now - timedelta(hours=2, minutes=1)
    )
    running = ExtractionJobFactory(
        extractor=waiting.extractor, processing=True, created_at=now - timedelta(minutes=3)
    )
    ExtractionJobFactory(extractor=waiting.extractor, submitted=True, created_at=now)
    html = root_client.get(DASHBOARD).content.decode()
    now_section = section(html, 'id="jobs-now"')
    pending = re.search(r'<tr id="pending-total">(.*?)</tr>', now_section).group(1)
    in_flight = re.search(r'<tr id="in-flight-total">(.*?)</tr>', now_section).group(1)
    assert "<td>1</td><td>2 h 1 min ago (" in pending and " UTC)</td>" in pending
    assert "<td>2</td><td>3 min " in in_flight and " UTC)</td>" in in_flight
    assert "<td>alpha</td><td>1</td><td>2 h 1 min ago</td><td>2</td><td>3 min" in now_section
    oldest_pending = section(html, 'id="oldest-pending"')
    oldest_in_flight = section(html, 'id="oldest"')
    assert str(waiting.pk)[-12:] in oldest_pending and str(running.pk)[-12:] not in oldest_pending
    assert (
        str(running.pk)[-12:] in oldest_in_flight and str(waiting.pk)[-12:] not in oldest_in_flight
    )


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
    assert (
        f"<td>{timezone.localtime(now + timedelta(seconds=4)):%Y-%m-%d %H:%M:%S} UTC</td>"
        in circuits
    )
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
    assert f"{timezone.localtime(job.due_at):%Y-%m-%d %H:%M:%S} UTC (in " in oldest
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
