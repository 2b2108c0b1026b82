from pathlib import Path

import pytest
import requests
from django.core.cache import cache

from extraction.sandbox.server import control_headers
from jobtracking.services import Actor
from tests.factories import ExtractorFactory, UserFactory
from tests.processes import answers, free_port, start_command, stop, wait_until

E2E = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(items):
    """Every test under tests/e2e starts real processes: marked e2e, `make test` runs them beside
    the rest (.ci/test.sh)."""
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Throttles and failed-authentication counts live in the cache, tokens, extractors and
    refusing budgets' clients in the process's recent lookups: none carries over."""
    cache.clear()
    recent_lookups_clear()
    yield
    cache.clear()
    recent_lookups_clear()


def recent_lookups_clear() -> None:
    from jobtracking.api.auth import RECENT_TOKENS
    from jobtracking.api.serializers import RECENT_EXTRACTORS
    from jobtracking.services.budgets import REFUSING_CLIENTS

    RECENT_TOKENS.clear()
    RECENT_EXTRACTORS.clear()
    REFUSING_CLIENTS.clear()


@pytest.fixture
def extractor(db):
    return ExtractorFactory()


@pytest.fixture
def client_user(db):
    return UserFactory(username="api-client")


@pytest.fixture
def api_actor(client_user):
    return Actor("api", client_user)


@pytest.fixture
def seeded_statuses(transactional_db):
    """Transactional tests flush every table after each test, the migration's seed data too."""
    from jobtracking.models import JobStatus
    from jobtracking.states import STATUSES

    JobStatus.objects.bulk_create(
        [
            JobStatus(
                code=s.code, label=s.label, terminal=s.terminal, description=s.meaning, position=i
            )
            for i, s in enumerate(STATUSES)
        ],
        ignore_conflicts=True,
    )


class Sandbox:
    """A handle on the running sandbox extractor process (its control routes take a token)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def control(self, method: str, route: str, **kwargs) -> requests.Response:
        answer = requests.request(
            method, f"{self.url}/_sandbox/{route}", headers=control_headers(), timeout=5, **kwargs
        )
        answer.raise_for_status()
        return answer

    def configure(self, **settings) -> None:
        self.control("POST", "config", json=settings)

    def stats(self) -> dict:
        return self.control("GET", "stats").json()

    def webhooks(self) -> list[dict]:
        return self.control("GET", "webhooks").json()

    def reset(self) -> None:
        self.control("POST", "reset")

    def outage(self, seconds: float) -> None:
        self.control("POST", "outage", json={"seconds": seconds})


SANDBOX_DEFAULTS = {
    "latency_min": 0.0,
    "latency_max": 0.0,
    "transient_rate": 0.0,
    "throttle_rate": 0.0,
    "throttle_retry_after": 1.0,
    "permanent_failure_rate": 0.0,
    "lost_rate": 0.0,
    "slow_rate": 0.0,
    "slow_seconds": 5.0,
    "poll_retry_after": 0.0,
    "submit_rate_limit": 0.0,
    "poll_rate_limit": 0.0,
    "api_key": "",
}


@pytest.fixture(scope="session")
def sandbox_process(tmp_path_factory):
    """One real `run_sandbox_extractor` process for the whole session."""
    port = free_port()
    log = tmp_path_factory.mktemp("sandbox") / "sandbox.log"
    process = start_command(
        "run_sandbox_extractor",
        *("--port", str(port), "--seed", "7"),
        # Tests serve the documents it fetches on loopback (its fetches go through the URL guard).
        env={"OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8"},
        log=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{url}/healthz"), 20, "the sandbox extractor")
        yield Sandbox(url)
    finally:
        stop(process)


@pytest.fixture
def sandbox(sandbox_process):
    """The sandbox with no faults and empty counters; each test configures what it needs."""
    sandbox_process.configure(**SANDBOX_DEFAULTS)
    sandbox_process.reset()
    return sandbox_process


@pytest.fixture
def spans():
    """Tracing on for the test, its spans kept in memory (the SDK's own exporter), finished
    spans exported at once."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from jobtracking.infra import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.disable()
