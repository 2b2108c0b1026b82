"""A client's W3C `traceparent` on `POST /jobs/` (single, bulk, batch) puts the job in the
client's trace: the job keeps the context of its create span, a child of the request's span.
Without one, the request starts a trace of its own; with tracing off nothing is kept."""

import pytest
from opentelemetry import trace

from jobtracking.infra import tracing
from jobtracking.models import ExtractionJob

pytestmark = pytest.mark.django_db

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"


def item(file_id: str) -> dict:
    return {
        "extractor": "sandbox",
        "file_id": file_id,
        "source_url": f"https://files.example.org/{file_id}.pdf",
    }


def by_name(spans) -> dict:
    return {span.name: span for span in spans.get_finished_spans()}


def request_span(spans):
    (request,) = [s for s in spans.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
    return request


def created(api, path: str, body: dict, **headers) -> list[ExtractionJob]:
    response = api.post(path, body, format="json", **headers)
    assert response.status_code in (200, 201), response.content
    return list(ExtractionJob.objects.order_by("file_id"))


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/jobs/", item("a")),
        ("/api/v1/jobs/bulk/", {"jobs": [item("a"), item("b")]}),
        ("/api/v1/batches/", {"jobs": [item("a"), item("b")]}),
    ],
)
def test_a_clients_traceparent_puts_its_jobs_in_the_clients_trace(
    spans, api, extractor, path, body
):
    jobs = created(api, path, body, HTTP_TRACEPARENT=CLIENT_PARENT)
    named = by_name(spans)
    create, request = named["jobs.create"], request_span(spans)
    assert request.name == f"POST {path.removeprefix('/')}$"  # Django's route
    assert request.parent.span_id == 0x00F067AA0BA902B7  # the client's span
    assert create.parent.span_id == request.context.span_id
    assert create.attributes["jobs.created"] == len(jobs)
    for job in jobs:
        assert tracing.trace_ids(job.traceparent) == (
            CLIENT_TRACE,
            trace.format_span_id(create.context.span_id),
        )


def test_without_a_traceparent_the_request_starts_a_trace(spans, api, extractor):
    (job,) = created(api, "/api/v1/jobs/", item("a"))
    create = by_name(spans)["jobs.create"]
    assert create.attributes["job.id"] == str(job.pk)
    trace_id, _span = tracing.trace_ids(job.traceparent)
    assert trace_id == trace.format_trace_id(create.context.trace_id) != CLIENT_TRACE


def test_with_tracing_off_a_traceparent_is_neither_followed_nor_kept(api, extractor):
    (job,) = created(api, "/api/v1/jobs/", item("a"), HTTP_TRACEPARENT=CLIENT_PARENT)
    assert job.traceparent == ""
