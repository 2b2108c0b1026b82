"""Circuits in the console: the extractors list and page say whether calls go out and what failed
last; staff holding `pause_extractor` pause calls (with a reason, in the admin log) and resume
them; webhook subscriptions show their receiver's circuit."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobtracking.models import CircuitState, ExtractorHealth, ReceiverHealth
from jobtracking.services.extractor_health import extractor_pause
from tests.factories import ExtractorFactory, WebhookSubscriptionFactory
from tests.jobtracking.admin.conftest import staff

pytestmark = pytest.mark.django_db
EXTRACTORS = "/admin/extraction/extractor/"
SUBSCRIPTIONS = "/admin/jobtracking/webhooksubscription/"


def open_circuit(model=ExtractorHealth, error="HTTP 503 from the extractor", **key):
    now = timezone.now()
    return model.objects.create(
        **key,
        state=CircuitState.OPEN,
        since=now,
        failures=5,
        last_error=error,
        last_error_at=now,
        probe_at=now + timedelta(seconds=4),
    )


def act(client, action: str, extractor, reason: str = ""):
    return client.post(
        EXTRACTORS,
        {"action": action, "_selected_action": [extractor.pk], "reason": reason},
        follow=True,
    )


# Columns and fields


def test_extractors_list_shows_each_circuit_and_its_last_error(root_client):
    ExtractorFactory(slug="fine")
    health = open_circuit(extractor=ExtractorFactory(slug="down"))
    extractor_pause(extractor=ExtractorFactory(slug="held"), reason="key rotation")
    html = root_client.get(EXTRACTORS).content.decode()
    assert f"open since {health.since:%H:%M:%S} UTC" in html
    assert "paused since " in html and " UTC: key rotation" in html
    assert '<td class="field-state">enabled, calls working</td>' in html
    assert "HTTP 503 from the extractor" in html


def test_the_extractors_list_says_disabled_paused_and_unlimited_in_words(root_client):
    ExtractorFactory(slug="off", enabled=False, max_in_flight=0, submit_rate=0, poll_rate=None)
    extractor_pause(
        extractor=ExtractorFactory(slug="held", max_in_flight=8, submit_rate=2.5, poll_rate=10),
        reason="key rotation",
    )
    html = root_client.get(EXTRACTORS).content.decode()
    assert '<td class="field-state">disabled: takes no new jobs</td>' in html
    assert "enabled, calls paused since " in html and "Enabled" not in html.split("<tbody>")[1]
    assert "in flight unlimited; submits unlimited; polls unlimited" in html
    assert "≤ 8 in flight; 2.5 submits/s; 10 polls/s" in html


def test_an_old_outage_shows_its_date(root_client):
    health = open_circuit(extractor=ExtractorFactory())
    health.since -= timedelta(days=2)
    health.save()
    html = root_client.get(EXTRACTORS).content.decode()
    assert f"open since {health.since:%Y-%m-%d %H:%M:%S} UTC" in html


def test_the_extractors_list_reads_circuits_without_a_query_per_row(root_client):
    open_circuit(extractor=ExtractorFactory())
    root_client.get(EXTRACTORS)  # warm the session and content types
    with CaptureQueriesContext(connection) as one:
        root_client.get(EXTRACTORS)
    for _ in range(3):
        open_circuit(extractor=ExtractorFactory())
    ExtractorFactory()
    with CaptureQueriesContext(connection) as five:
        root_client.get(EXTRACTORS)
    assert len(five) == len(one)


def test_the_extractor_page_shows_the_circuit_read_only(root_client):
    extractor = ExtractorFactory()
    open_circuit(extractor=extractor, error="ConnectTimeout after 10 s")
    html = root_client.get(f"{EXTRACTORS}{extractor.pk}/change/").content.decode()
    assert "open since" in html and "ConnectTimeout after 10 s" in html
    assert 'name="state"' not in html  # shown, not editable


def test_the_add_page_shows_a_new_extractor_working(root_client):
    response = root_client.get(f"{EXTRACTORS}add/")
    assert response.status_code == 200 and "working" in response.content.decode()


def test_subscriptions_list_shows_the_receivers_circuit(root_client):
    down = WebhookSubscriptionFactory()
    WebhookSubscriptionFactory()
    open_circuit(ReceiverHealth, error="connection refused", subscription=down)
    html = root_client.get(SUBSCRIPTIONS).content.decode()
    assert "open since" in html and "connection refused" in html
    assert '<td class="field-receiver_circuit">working</td>' in html
    page = root_client.get(f"{SUBSCRIPTIONS}{down.pk}/change/").content.decode()
    assert "open since" in page and "connection refused" in page
    assert root_client.get(f"{SUBSCRIPTIONS}add/").status_code == 200


# Pause and resume


@pytest.mark.parametrize("codenames", [("view_extractor",), ("view_extractor", "change_extractor")])
def test_staff_without_the_pause_permission_are_not_offered_pause_or_resume(client, codenames):
    ExtractorFactory()
    client.force_login(staff(*codenames))
    html = client.get(EXTRACTORS).content.decode()
    assert 'value="pause_calls"' not in html and 'value="resume_calls"' not in html


def test_a_pause_or_resume_posted_without_the_permission_changes_nothing(client):
    extractor, paused = ExtractorFactory(), ExtractorFactory()
    extractor_pause(extractor=paused, reason="maintenance")
    client.force_login(staff("view_extractor", "change_extractor"))
    act(client, "pause_calls", extractor, reason="because")
    act(client, "resume_calls", paused)
    assert not ExtractorHealth.objects.filter(pk=extractor.pk).exists()
    assert ExtractorHealth.objects.get(pk=paused.pk).state == CircuitState.PAUSED
    assert not LogEntry.objects.exists()


def test_pause_records_the_reason_and_resume_closes_the_circuit(client):
    extractor = ExtractorFactory()
    user = staff("view_extractor", "pause_extractor")
    client.force_login(user)
    html = client.get(EXTRACTORS).content.decode()
    assert 'value="pause_calls"' in html and 'value="resume_calls"' in html
    assert 'name="reason"' in html

    act(client, "pause_calls", extractor, reason="  key rotation until 14:00 ")
    health = ExtractorHealth.objects.get(pk=extractor.pk)
    assert (health.state, health.reason) == (CircuitState.PAUSED, "key rotation until 14:00")
    entry = LogEntry.objects.get(object_id=str(extractor.pk))
    assert (entry.user, entry.change_message) == (user, "Calls paused: key rotation until 14:00")

    response = act(client, "resume_calls", extractor)
    health.refresh_from_db()
    assert (health.state, health.reason, health.probe_at) == (CircuitState.CLOSED, "", None)
    resumed = LogEntry.objects.filter(object_id=str(extractor.pk)).latest("action_time")
    assert resumed.change_message.startswith("Calls resumed (was paused since ")
    assert resumed.change_message.endswith(": key rotation until 14:00).")
    assert f"{extractor.slug}: calls resumed." in [str(m) for m in response.context["messages"]]


def test_resume_closes_an_open_circuit_and_skips_a_working_one(client):
    failing, fine = ExtractorFactory(), ExtractorFactory()
    open_circuit(extractor=failing)
    client.force_login(staff("view_extractor", "pause_extractor"))
    client.post(
        EXTRACTORS,
        {"action": "resume_calls", "_selected_action": [failing.pk, fine.pk]},
        follow=True,
    )
    assert ExtractorHealth.objects.get(pk=failing.pk).state == CircuitState.CLOSED
    assert not ExtractorHealth.objects.filter(pk=fine.pk).exists()  # no write for a working one
    assert list(LogEntry.objects.values_list("object_id", flat=True)) == [str(failing.pk)]


def test_pause_without_a_reason_pauses_nothing(client):
    extractor = ExtractorFactory()
    client.force_login(staff("view_extractor", "pause_extractor"))
    response = act(client, "pause_calls", extractor, reason="   ")
    assert not ExtractorHealth.objects.exists() and not LogEntry.objects.exists()
    assert any("Nothing paused" in str(m) for m in response.context["messages"])
