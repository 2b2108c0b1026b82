"""Webhooks and extractors in the console: event types as checkboxes and labels, duplicate URLs
warned, what a delivery sent (signature redacted) and every attempt, search, the test event and
secret rotation (actions and buttons), and the key indicator."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone
from standardwebhooks import Webhook
from werkzeug import Response

from jobtracking.models import AppendOnlyError, DeliveryAttempt, WebhookSubscription
from jobtracking.webhooks.sending import subscription_secret
from tests.factories import (
    BatchFactory,
    ExtractorFactory,
    JobEventFactory,
    WebhookDeliveryFactory,
    WebhookSubscriptionFactory,
)
from tests.jobtracking.admin.conftest import staff

pytestmark = pytest.mark.django_db
SUBSCRIPTIONS = "/admin/jobtracking/webhooksubscription/"
DELIVERIES = "/admin/jobtracking/webhookdelivery/"


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_READ_TIMEOUT = 0.5


def test_event_types_are_checkboxes_and_saved_as_a_list(root_client):
    form = root_client.get(f"{SUBSCRIPTIONS}add/").content.decode()
    assert 'type="checkbox" name="event_types" value="job.succeeded"' in form
    response = root_client.post(
        f"{SUBSCRIPTIONS}add/",
        {"url": "https://hooks.example.org/a", "event_types": ["job.succeeded", "job.failed"]},
    )
    assert response.status_code == 302
    assert WebhookSubscription.objects.get().event_types == ["job.succeeded", "job.failed"]


@pytest.mark.parametrize(
    ("ticked", "saved"),
    [
        ({}, None),
        ({"event_types": ["job.failed"], "all_event_types": "on"}, None),
        ({"all_event_types": "on"}, ([], True)),
        ({"event_types": ["job.failed"]}, (["job.failed"], False)),
    ],
)
def test_every_event_type_is_ticked_explicitly_never_implied_by_none(root_client, ticked, saved):
    response = root_client.post(
        f"{SUBSCRIPTIONS}add/", {"url": "https://hooks.example.org/a", **ticked}
    )
    if saved is None:
        assert response.status_code == 200
        assert "all_event_types: every type" in response.content.decode()
        assert not WebhookSubscription.objects.exists()
    else:
        assert response.status_code == 302
        subscription = WebhookSubscription.objects.get()
        assert (subscription.event_types, subscription.all_event_types) == saved


def test_a_second_subscription_to_the_same_url_is_warned_about(root_client):
    first = WebhookSubscriptionFactory(url="https://hooks.example.org/same")
    page = root_client.post(
        f"{SUBSCRIPTIONS}add/",
        {"url": "https://hooks.example.org/same", "all_event_types": "on"},
        follow=True,
    ).content.decode()
    assert f"Subscription(s) {first.pk} already send to https://hooks.example.org/same" in page


def test_a_delivery_shows_the_body_and_headers_sent_with_the_signature_redacted(root_client):
    delivery = WebhookDeliveryFactory()
    page = root_client.get(f"{DELIVERIES}{delivery.pk}/change/").content.decode()
    assert f"webhook-id: {delivery.event.event_id}" in page
    assert "webhook-signature: v1,&lt;redacted&gt;" in page
    assert f"&quot;type&quot;: &quot;{delivery.event.type}&quot;" in page
    assert subscription_secret(delivery.subscription) not in page


def test_deliveries_are_searchable_by_event_job_status_and_url(root_client):
    wanted = WebhookDeliveryFactory(last_status_code=503)
    other = WebhookDeliveryFactory(last_status_code=200)

    def found(term):
        page = root_client.get(DELIVERIES, {"q": term}).content.decode()
        return {d.pk for d in (wanted, other) if f"/{d.pk}/change/" in page}

    assert found(str(wanted.event.event_id)) == {wanted.pk}
    assert found(str(wanted.event.job_id)) == {wanted.pk}
    assert found("503") == {wanted.pk}
    assert found("200") == {other.pk}
    assert found(wanted.subscription.url) == {wanted.pk}


def test_send_test_event_posts_a_verifiable_message(root_client, httpserver):
    subscription = WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"))
    received = []

    def receiver(request):
        received.append(
            Webhook(subscription_secret(subscription)).verify(
                request.get_data(), dict(request.headers)
            )
        )
        return Response("ok", 200)

    httpserver.expect_request("/hooks", method="POST").respond_with_handler(receiver)
    page = root_client.post(
        SUBSCRIPTIONS, {"action": "send_test", "_selected_action": [subscription.pk]}, follow=True
    ).content.decode()
    assert received and received[0]["type"] == "webhook.test"
    assert "HTTP 200" in page
    assert "Test event sent: HTTP 200" in LogEntry.objects.get().change_message


def test_send_test_event_reports_a_receiver_that_fails(root_client, httpserver):
    subscription = WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"))
    httpserver.expect_request("/hooks").respond_with_data("nope", status=500)
    page = root_client.post(
        SUBSCRIPTIONS, {"action": "send_test", "_selected_action": [subscription.pk]}, follow=True
    ).content.decode()
    assert "HTTP 500" in page and "messagelist" in page


@pytest.mark.parametrize(
    ("variable", "value", "shown"),
    [
        ("", None, "not needed"),
        ("EXTRACTOR_ADMIN_TEST_KEY", "k-1", "✓ set in EXTRACTOR_ADMIN_TEST_KEY"),
        ("EXTRACTOR_ADMIN_TEST_KEY", None, "✗ missing: set EXTRACTOR_ADMIN_TEST_KEY"),
    ],
)
def test_the_key_indicator_knows_an_extractor_without_a_key(
    root_client, monkeypatch, variable, value, shown
):
    monkeypatch.delenv("EXTRACTOR_ADMIN_TEST_KEY", raising=False)
    if value:
        monkeypatch.setenv("EXTRACTOR_ADMIN_TEST_KEY", value)
    ExtractorFactory(api_key_env=variable)
    assert shown in root_client.get("/admin/extraction/extractor/").content.decode()


def test_subscriptions_list_their_event_types_as_labels(root_client):
    WebhookSubscriptionFactory(event_types=["job.succeeded", "job.failed"])
    WebhookSubscriptionFactory(event_types=[])
    page = root_client.get(SUBSCRIPTIONS).content.decode()
    assert '<span class="event-type">job.succeeded</span>' in page
    assert '<span class="event-type">job.failed</span>' in page
    assert "every event type" in page
    assert "[&#x27;job.succeeded&#x27;" not in page and '["job.succeeded"' not in page


def button(subscription, name: str) -> str:
    return f"{SUBSCRIPTIONS}{subscription.pk}/{name}/"


def test_the_subscription_page_has_its_buttons_and_recent_deliveries(root_client):
    delivery = WebhookDeliveryFactory(last_status_code=503, last_error="HTTP 503 from x:443")
    page = root_client.get(f"{SUBSCRIPTIONS}{delivery.subscription.pk}/change/").content.decode()
    assert f'action="{button(delivery.subscription, "send-test")}"' in page
    assert f'action="{button(delivery.subscription, "rotate-secret")}"' in page
    assert f"{DELIVERIES}{delivery.pk}/change/" in page and "HTTP 503 from x:443" in page


def test_the_send_test_button_posts_a_verifiable_message(root_client, httpserver):
    subscription = WebhookSubscriptionFactory(url=httpserver.url_for("/hooks"))
    received = []

    def receiver(request):
        secret = subscription_secret(subscription)
        received.append(Webhook(secret).verify(request.get_data(), dict(request.headers)))
        return Response("ok", 200)

    httpserver.expect_request("/hooks", method="POST").respond_with_handler(receiver)
    response = root_client.post(button(subscription, "send-test"), follow=True)
    assert response.redirect_chain[-1][0] == f"{SUBSCRIPTIONS}{subscription.pk}/change/"
    assert received and received[0]["type"] == "webhook.test"
    assert "HTTP 200" in response.content.decode()
    assert LogEntry.objects.get().change_message == "Test event sent: HTTP 200."


def test_the_rotate_secret_button_asks_first_then_shows_the_new_secret_once(root_client):
    subscription = WebhookSubscriptionFactory()
    old = subscription_secret(subscription)
    asked = root_client.post(button(subscription, "rotate-secret")).content.decode()
    subscription.refresh_from_db()
    assert subscription.secret_version == 1 and 'id="rotate-form"' in asked
    assert "signed with both the old and the new secret" in asked
    page = root_client.post(
        button(subscription, "rotate-secret"), {"confirm": "yes"}, follow=True
    ).content.decode()
    subscription.refresh_from_db()
    assert subscription.secret_version == 2
    assert "The previous secret also signs deliveries for 24 hours" in page
    assert subscription_secret(subscription) in page and old not in page
    again = root_client.get(f"{SUBSCRIPTIONS}{subscription.pk}/change/").content.decode()
    assert subscription_secret(subscription) not in again


def test_the_rotate_list_action_asks_first(root_client):
    subscriptions = WebhookSubscriptionFactory.create_batch(2)
    selection = {"action": "rotate_secret", "_selected_action": [s.pk for s in subscriptions]}
    asked = root_client.post(SUBSCRIPTIONS, selection).content.decode()
    assert "these 2 subscriptions" in asked
    assert {s.secret_version for s in WebhookSubscription.objects.all()} == {1}
    root_client.post(SUBSCRIPTIONS, {**selection, "confirm": "yes"})
    assert {s.secret_version for s in WebhookSubscription.objects.all()} == {2}


def test_the_buttons_need_the_change_permission_and_a_post(client, root_client):
    subscription = WebhookSubscriptionFactory()
    viewer = staff("view_webhooksubscription", "view_all_extractionjobs")
    client.force_login(viewer)
    page = client.get(f"{SUBSCRIPTIONS}{subscription.pk}/change/").content.decode()
    assert "send-test" not in page and "rotate-secret" not in page
    assert client.post(button(subscription, "rotate-secret")).status_code == 403
    assert root_client.get(button(subscription, "rotate-secret")).status_code == 405
    subscription.refresh_from_db()
    assert subscription.secret_version == 1 and not LogEntry.objects.exists()


def test_the_buttons_of_another_staff_members_subscription_are_not_found(client):
    theirs = WebhookSubscriptionFactory()
    client.force_login(staff("view_webhooksubscription", "change_webhooksubscription"))
    assert client.post(button(theirs, "rotate-secret")).status_code == 404
    theirs.refresh_from_db()
    assert theirs.secret_version == 1


def test_a_delivery_page_shows_every_attempt_read_only(root_client):
    delivery = WebhookDeliveryFactory()
    now = timezone.now()
    for seconds, status, error in [
        (0, None, "ConnectTimeout: hooks.example.org:443 did not accept a connection in 5 s"),
        (6, 503, "HTTP 503 from hooks.example.org:443"),
    ]:
        DeliveryAttempt.objects.create(
            delivery=delivery,
            attempted_at=now + timedelta(seconds=seconds),
            status_code=status,
            error=error,
            duration_ms=5000,
        )
    page = root_client.get(f"{DELIVERIES}{delivery.pk}/change/").content.decode()
    first = page.index("ConnectTimeout: hooks.example.org:443 did not accept a connection")
    assert first < page.index("HTTP 503 from hooks.example.org:443")
    assert "attempt_log-TOTAL_FORMS" in page and 'name="attempt_log-0-error"' not in page
    with pytest.raises(AppendOnlyError):
        DeliveryAttempt.objects.first().delete()


def test_staff_who_may_see_a_delivery_see_its_attempts(client):
    delivery = WebhookDeliveryFactory()
    DeliveryAttempt.objects.create(
        delivery=delivery, status_code=None, error="ConnectionRefused: x:443 refused", duration_ms=3
    )
    client.force_login(staff("view_webhookdelivery", "view_all_extractionjobs"))
    page = client.get(f"{DELIVERIES}{delivery.pk}/change/").content.decode()
    assert "ConnectionRefused: x:443 refused" in page


def test_a_delivery_is_titled_by_its_event_and_receiver_and_a_batch_event_names_its_batch(
    root_client,
):
    batch = BatchFactory()
    delivery = WebhookDeliveryFactory(
        event=JobEventFactory(job=None, batch=batch, type="batch.created", payload={})
    )
    page = root_client.get(f"/admin/jobtracking/webhookdelivery/{delivery.pk}/change/")
    title = f"batch.created event {delivery.event_id} to {delivery.subscription.url}"
    assert title in page.content.decode()
    listing = root_client.get("/admin/jobtracking/webhookdelivery/").content.decode()
    assert f'batch <a href="/admin/jobtracking/batch/{batch.pk}/change/">' in listing
    assert '<td class="field-job">None</td>' not in listing
