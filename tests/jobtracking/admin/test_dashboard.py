"""The live dashboard: counts that link, a chart with values, liveness with ages, queue depth
and lag, and the partial body the page fetches to refresh itself."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobtracking.models import ServiceHeartbeat
from tests.factories import ExtractionJobFactory

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
    assert "setInterval(refresh" in page and "<html" in page
    assert "<html" not in partial and 'id="liveness"' in partial and "data-updated" in partial


def test_the_partial_needs_the_same_permissions(client):
    from tests.jobtracking.admin.conftest import staff

    client.force_login(staff("view_extractionjob"))
    assert client.get(f"{DASHBOARD}?partial=1").status_code == 403
