"""An extractor's health as clients see it: `GET /extractors/` carries each circuit, `/readyz`
says `degraded` while one holds work but stays ready, and the schema documents both."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobtracking.models import CircuitState, ExtractorHealth, ServiceHeartbeat
from jobtracking.services.extractor_health import extractor_pause, extractor_resume
from tests.factories import ExtractorFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/extractors/"


def iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


def open_circuit(extractor, error="HTTP 503 Service Unavailable"):
    now = timezone.now()
    return ExtractorHealth.objects.create(
        extractor=extractor,
        state=CircuitState.OPEN,
        since=now,
        failures=5,
        last_error=error,
        last_error_at=now,
        probe_at=now + timedelta(seconds=8),
    )


def test_extractor_health_is_closed_with_nulls_when_it_never_failed(api, extractor):
    assert api.get(URL).json()[0]["health"] == {
        "state": "closed",
        "since": None,
        "last_error": "",
        "next_probe_at": None,
        "paused_reason": "",
    }


def test_extractor_health_shows_an_open_circuit_and_its_next_probe(api, extractor):
    health = open_circuit(extractor)
    assert api.get(f"{URL}{extractor.slug}/").json()["health"] == {
        "state": "open",
        "since": iso(health.since),
        "last_error": "HTTP 503 Service Unavailable",
        "next_probe_at": iso(health.probe_at),
        "paused_reason": "",
    }


def test_extractor_health_shows_a_pause_and_its_reason_then_the_resume(api, extractor):
    open_circuit(extractor)
    extractor_pause(extractor=extractor, reason="key rotation")
    paused = api.get(URL).json()[0]["health"]
    assert (paused["state"], paused["paused_reason"]) == ("paused", "key rotation")
    assert paused["next_probe_at"] is None  # no probe goes out while paused
    health = extractor_resume(extractor=extractor)
    resumed = api.get(URL).json()[0]["health"]
    assert resumed == {
        "state": "closed",
        "since": iso(health.since),
        "last_error": "HTTP 503 Service Unavailable",  # what failed last, kept
        "next_probe_at": None,
        "paused_reason": "",
    }


def test_extractors_list_reads_health_without_a_query_per_extractor(api, extractor):
    api.get(URL)  # warm the token and permission caches
    with CaptureQueriesContext(connection) as one:
        api.get(URL)
    for n in range(4):
        other = ExtractorFactory(slug=f"more-{n}")
        if n % 2:
            open_circuit(other)
    with CaptureQueriesContext(connection) as five:
        assert len(api.get(URL).json()) == 5
    assert len(five) == len(one)


def test_the_schema_documents_the_health_object(api):
    schema = api.get("/api/schema/?format=json").json()["components"]["schemas"]
    health = schema["Extractor"]["properties"]["health"]
    name = (health.get("$ref") or health["allOf"][0]["$ref"]).rsplit("/", 1)[-1]
    properties = schema[name]["properties"]
    assert set(properties) == {"state", "since", "last_error", "next_probe_at", "paused_reason"}
    assert properties["since"]["nullable"] and properties["next_probe_at"]["nullable"]
    assert set(schema[name]["required"]) == set(properties)


# Readiness


@pytest.fixture
def alive(db):
    for kind in ("cluster", "dispatcher"):
        ServiceHeartbeat.objects.create(name=f"{kind}@test", kind=kind, beat_at=timezone.now())


def test_readyz_is_not_degraded_while_every_extractor_works(api, alive, extractor):
    response = api.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert (body["ready"], body["degraded"]) == (True, False)
    assert body["checks"]["extractors"] == {"ok": True, "informational": True, "circuits": []}


def test_readyz_lists_open_and_paused_extractors_but_stays_ready(api, alive, extractor):
    health = open_circuit(extractor)
    held = ExtractorFactory(slug="azure")
    extractor_pause(extractor=held, reason="maintenance")
    response = api.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert (body["ready"], body["degraded"]) == (True, True)
    paused_since = ExtractorHealth.objects.get(pk=held.pk).since
    assert body["checks"]["extractors"] == {
        "ok": False,
        "informational": True,
        "circuits": [
            {"slug": "azure", "state": "paused", "since": iso(paused_since)},
            {"slug": "sandbox", "state": "open", "since": iso(health.since)},
        ],
    }


def test_readyz_unready_for_its_own_reasons_still_reports_degraded(api, extractor):
    open_circuit(extractor)
    response = api.get("/readyz")
    assert response.status_code == 503  # no heartbeats: that, not the extractor, fails it
    body = response.json()
    assert body["degraded"] is True and body["ready"] is False
