"""Webhooks and extractors in the console: event types as checkboxes, duplicate URLs warned,
what a delivery sent (signature redacted), search, the test event, and the key indicator."""

import pytest
from django.contrib.admin.models import LogEntry
from standardwebhooks import Webhook
from werkzeug import Response

from jobtracking.models import WebhookSubscription
from jobtracking.webhooks import subscription_secret
from tests.factories import ExtractorFactory, WebhookDeliveryFactory, WebhookSubscriptionFactory

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


def test_a_second_subscription_to_the_same_url_is_warned_about(root_client):
    first = WebhookSubscriptionFactory(url="https://hooks.example.org/same")
    page = root_client.post(
        f"{SUBSCRIPTIONS}add/", {"url": "https://hooks.example.org/same"}, follow=True
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
