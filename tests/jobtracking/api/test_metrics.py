"""The Prometheus endpoint: read from the database at scrape time, so every machine's work counts;
circuits that hold work and the webhook lane's oldest pending delivery included."""

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobtracking.models import CircuitState, ExtractorHealth, ReceiverHealth, WebhookDelivery
from jobtracking.services.extractor_health import extractor_pause
from tests.factories import (
    ExtractionJobFactory,
    ExtractorFactory,
    WebhookDeliveryFactory,
    WebhookSubscriptionFactory,
)
from tests.jobtracking.api.conftest import client_for, service_account

pytestmark = pytest.mark.django_db


def scrape(client) -> dict[str, list]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    return {
        family.name: family.samples
        for family in text_string_to_metric_families(response.content.decode())
    }


@pytest.fixture
def operator(db):
    return client_for(service_account("metrics", "view_all_extractionjobs"))


def test_metrics_need_the_view_all_permission(db):
    assert client_for(service_account("client")).get("/metrics").status_code == 403


def test_metrics_count_jobs_by_status(operator):
    ExtractionJobFactory(failed=True)
    samples = scrape(operator)["jobtracking_jobs"]
    by_status = {s.labels["status"]: s.value for s in samples}
    assert by_status["failed"] == 1 and by_status["pending"] == 0


def test_metrics_show_each_circuit_that_holds_work(operator):
    ExtractorFactory(slug="fine")
    ExtractorHealth.objects.create(extractor=ExtractorFactory(slug="down"), state=CircuitState.OPEN)
    extractor_pause(extractor=ExtractorFactory(slug="held"), reason="maintenance")
    ExtractorHealth.objects.create(extractor=ExtractorFactory(slug="recovered"))  # closed
    receiver = WebhookSubscriptionFactory()
    ReceiverHealth.objects.create(subscription=receiver, state=CircuitState.OPEN)
    samples = scrape(operator)["jobtracking_circuit_open"]
    assert sorted(
        (s.labels["kind"], s.labels["name"], s.labels["state"], s.value) for s in samples
    ) == [
        ("extractor", "down", "open", 1),
        ("extractor", "held", "paused", 1),
        ("receiver", str(receiver.pk), "open", 1),
    ]


def test_metrics_give_the_oldest_pending_webhook_delivery_age(operator):
    assert scrape(operator)["jobtracking_webhook_oldest_pending_seconds"][0].value == 0
    now = timezone.now()
    WebhookDeliveryFactory(created_at=now - timedelta(minutes=5))
    WebhookDeliveryFactory(created_at=now - timedelta(minutes=1))
    WebhookDeliveryFactory(created_at=now - timedelta(hours=1), state="delivered")
    age = scrape(operator)["jobtracking_webhook_oldest_pending_seconds"][0].value
    assert 300 <= age < 330
    assert WebhookDelivery.objects.filter(state="pending").count() == 2
