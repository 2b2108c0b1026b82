"""One job's trace across real processes: gunicorn serving the API, the django-q2 cluster, the
dispatcher (and its delivery lane), the sandbox extractor and its webhook receiver, each
exporting over OTLP/HTTP to a receiver this test runs. From the spans received (decoded with
`opentelemetry-proto`) the job's trace is rebuilt: the client's request → create → submit →
polls → result fetch → webhooks; the extractor and the webhook receiver saw the same trace id."""

import gzip
import http.server
import threading
from collections import defaultdict
from datetime import timedelta

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from extraction.models import Adapter
from jobtracking.infra import tracing
from jobtracking.services.tokens import token_issue
from tests.e2e.conftest import wait_for_terminal
from tests.factories import ExtractorFactory, WebhookSubscriptionFactory
from tests.jobtracking.api.conftest import service_account
from tests.processes import answers, free_port, start_gunicorn, wait_until

pytestmark = pytest.mark.e2e

CLIENT_TRACE = "5b8efff798038103d269b633813fc60c"
CLIENT_SPAN = "eee19b7ec3c1b174"


class OtlpReceiver(http.server.ThreadingHTTPServer):
    """A collector's OTLP/HTTP traces endpoint: keeps every span it is sent, with the name of
    the service that sent it."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Export)
        self.spans: list[tuple[str, object]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def of_trace(self, trace_id: bytes) -> list[tuple[str, object]]:
        with self.lock:
            return [(service, span) for service, span in self.spans if span.trace_id == trace_id]


class _Export(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            with self.server.lock:
                self.server.spans += [
                    (service, span)
                    for scope_spans in resource_spans.scope_spans
                    for span in scope_spans.spans
                ]
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def otlp():
    receiver = OtlpReceiver()
    yield receiver
    receiver.shutdown()


@pytest.fixture
def stack_env(otlp):
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "tracker-engine",
        # Spans leave each process within a tenth of a second (the default waits 5 s).
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
    }


def attribute(span, key: str):
    for item in span.attributes:
        if item.key == key:
            value = item.value
            return getattr(value, value.WhichOneof("value"))
    return None


def tree(spans: list[tuple[str, object]]) -> str:
    """The trace as an indented tree: service, span name, duration."""
    children = defaultdict(list)
    ids = {span.span_id for _service, span in spans}
    for service, span in sorted(spans, key=lambda pair: pair[1].start_time_unix_nano):
        parent = span.parent_span_id if span.parent_span_id in ids else b""
        children[parent].append((service, span))
    lines = []

    def walk(parent: bytes, depth: int) -> None:
        for service, span in children[parent]:
            took = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
            lines.append(f"{'  ' * depth}{span.name} [{service}] {took:.1f} ms")
            walk(span.span_id, depth + 1)

    walk(b"", 0)
    return "\n".join(lines)


@pytest.mark.django_db(transaction=True)
def test_one_jobs_trace_goes_from_the_clients_request_to_its_webhooks(stack, sandbox, otlp):
    ExtractorFactory(
        slug="sandbox",
        adapter=Adapter.SANDBOX,
        base_url=sandbox.url,
        poll_initial_interval=timedelta(milliseconds=200),
    )
    sandbox.configure(latency_min=0.5, latency_max=0.5)
    WebhookSubscriptionFactory(url=f"{sandbox.url}/_sandbox/webhooks", all_jobs=True)
    token = token_issue(user=service_account("traced-client"))
    port = free_port()
    api = start_gunicorn(
        port,
        env={**stack.env, "OTEL_SERVICE_NAME": "tracker-api"},
        log=stack.log_dir / "gunicorn.log",
    )
    stack.others.append(api)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{base}/healthz"), 30, "gunicorn")

    created = requests.post(
        f"{base}/api/v1/jobs/",
        json={
            "extractor": "sandbox",
            "file_id": "traced-1",
            "source_url": f"{sandbox.url}/samples/grant-report.txt",
        },
        headers={
            "Authorization": f"Token {token}",
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        },
        timeout=10,
    )
    assert created.status_code == 201, created.text
    (job,) = wait_for_terminal([created.json()["id"]], 60, stack)
    assert job.status_id == "succeeded"
    assert tracing.trace_ids(job.traceparent)[0] == CLIENT_TRACE

    def received(event_type: str) -> list[dict]:
        return [w for w in sandbox.webhooks() if f'"type":"{event_type}"' in w["body"]]

    wait_until(lambda: received("job.succeeded"), 20, "the job.succeeded webhook")
    trace_id = bytes.fromhex(CLIENT_TRACE)

    def named(name: str) -> list:
        return [span for _service, span in otlp.of_trace(trace_id) if span.name == name]

    def webhook_sent(event_type: str) -> bool:
        return any(attribute(s, "webhook.event_type") == event_type for s in named("webhook.send"))

    wait_until(lambda: webhook_sent("job.succeeded"), 20, "the job.succeeded webhook's span")
    spans = otlp.of_trace(trace_id)
    print(f"\ntrace {CLIENT_TRACE}:\n{tree(spans)}")
    services = {span.name: service for service, span in spans}

    # request → create: the API's spans, the request a child of the client's span.
    (request,) = [s for _service, s in spans if s.name == "POST api/v1/jobs/$"]
    assert request.parent_span_id == bytes.fromhex(CLIENT_SPAN)
    (create,) = named("jobs.create")
    assert create.parent_span_id == request.span_id
    assert services["jobs.create"] == "tracker-api"
    # → submit → polls → result: the workers' spans, each a child of the create span.
    submit, *polls, fetch = sorted(
        named("job.submit") + named("job.poll") + named("job.fetch_result"),
        key=lambda span: span.start_time_unix_nano,
    )
    assert (submit.name, fetch.name) == ("job.submit", "job.fetch_result")
    assert len(polls) == job.poll_count >= 1
    assert [attribute(p, "job.outcome") for p in polls][-1] == "succeeded"
    for span in (submit, *polls, fetch):
        assert span.parent_span_id == create.span_id
        assert attribute(span, "job.id") == str(job.pk)
        assert attribute(span, "job.extractor") == "sandbox"
    assert services["job.submit"] == services["job.fetch_result"] == "tracker-engine"
    # Each extractor call went out with its step's context as its traceparent.
    assert (
        f"POST /v1/extractions 00-{CLIENT_TRACE}-{submit.span_id.hex()}-01"
        in (sandbox.stats()["traceparents"])
    )
    # → webhooks: the dispatcher's lane POSTs each event in the job's trace, and the receiver
    # got the trace context of the span that sent it.
    (succeeded,) = [
        s for s in named("webhook.send") if attribute(s, "webhook.event_type") == "job.succeeded"
    ]
    assert succeeded.parent_span_id == create.span_id
    (delivered,) = received("job.succeeded")
    assert delivered["headers"]["traceparent"] == (
        f"00-{CLIENT_TRACE}-{succeeded.span_id.hex()}-01"
    )
