"""A job's steps as spans of the job's own trace, against the real sandbox extractor: each
extractor call (submit, polls, the result fetch, cancel) is a span with the job's attributes,
its HTTP request carries the span's traceparent (and makes no span of its own), the batch task's
span links to every job's trace (its SQL statements make no spans), and a webhook delivery's POST
carries the job's trace to the receiver."""

from datetime import timedelta

import pytest
from django.utils import timezone
from opentelemetry import trace

from extraction.clients.base import ClientConfig, SubmitRequest
from extraction.clients.http_async import HttpAsyncClient
from jobtracking import states
from jobtracking.engine.delivery_lane import deliveries_send_due
from jobtracking.engine.tasks import process_jobs
from jobtracking.infra import tracing
from jobtracking.models import ExtractionJob
from jobtracking.services import Actor, job_cancel
from tests.factories import WebhookSubscriptionFactory
from tests.jobtracking.engine.test_tasks import new_job, run_to_end, step
from tests.receivers import KeepAliveReceiver

pytestmark = pytest.mark.django_db


def finished(spans, name: str) -> list:
    return [span for span in spans.get_finished_spans() if span.name == name]


def trace_of(job) -> int:
    return int(tracing.trace_ids(job.traceparent)[0], 16)


def test_each_step_of_a_job_is_a_span_of_its_trace(spans, sandbox, sandbox_extractor):
    job = new_job(sandbox_extractor)
    (create,) = finished(spans, "jobs.create")
    job = run_to_end(job)
    assert job.status_id == states.SUCCEEDED
    steps = [s for s in spans.get_finished_spans() if s.name.startswith("job.")]
    assert [s.name for s in steps] == [
        "job.submit",
        *["job.poll"] * job.poll_count,
        "job.fetch_result",
    ]
    for span in steps:
        assert span.context.trace_id == create.context.trace_id == trace_of(job)
        assert span.parent.span_id == create.context.span_id
        assert span.attributes["job.id"] == str(job.pk)
        assert span.attributes["job.attempt"] == 1
        assert span.attributes["job.extractor"] == "sandbox"
    assert steps[0].attributes["job.outcome"] == "accepted"
    assert steps[-2].attributes["job.outcome"] == "succeeded"
    # Each call went out with its step's context as its traceparent, and made no span of its own.
    assert sandbox.stats()["traceparents"] == [
        f"{method} {path} 00-{trace_of(job):032x}-{step.context.span_id:016x}-"
        f"{step.context.trace_flags:02x}"
        for step, (method, path) in zip(
            steps,
            [
                ("POST", "/v1/extractions"),
                *[("GET", f"/v1/extractions/{job.external_job_id}")] * job.poll_count,
                ("GET", f"/v1/extractions/{job.external_job_id}/result"),
            ],
            strict=True,
        )
    ]
    step_ids = {step.context.span_id for step in steps}
    assert not [s for s in spans.get_finished_spans() if s.parent and s.parent.span_id in step_ids]


def test_a_batch_task_links_to_each_jobs_trace_and_is_no_jobs_child(
    spans, sandbox, sandbox_extractor
):
    jobs = [new_job(sandbox_extractor, file_id=f"f-{n}") for n in range(3)]
    ExtractionJob.objects.update(claimed_at=timezone.now())
    process_jobs([str(job.pk) for job in jobs])
    (batch,) = finished(spans, "jobs.process")
    assert batch.parent is None
    assert {link.context.trace_id for link in batch.links} == {trace_of(job) for job in jobs}
    assert batch.context.trace_id not in {trace_of(job) for job in jobs}
    assert batch.attributes["jobs.count"] == batch.attributes["jobs.submitted"] == 3
    assert batch.attributes["jobs.record_ms"] > 0
    # Its transactions' statements make no spans: its trace is its span alone.
    assert [
        s.name for s in spans.get_finished_spans() if s.context.trace_id == batch.context.trace_id
    ] == ["jobs.process"]


def test_a_failed_step_says_its_outcome_and_the_jobs_error_code(spans, sandbox, sandbox_extractor):
    sandbox.configure(permanent_failure_rate=1.0)
    job = run_to_end(new_job(sandbox_extractor))
    assert job.error_code == "extraction_failed"
    last_poll = finished(spans, "job.poll")[-1]
    assert last_poll.attributes["job.outcome"] == "failed"
    assert last_poll.attributes["job.error_code"] == "extraction_failed"
    assert last_poll.status.status_code is trace.StatusCode.ERROR


def test_cancel_at_the_extractor_is_a_span_of_the_jobs_trace(
    spans, sandbox, sandbox_extractor, django_capture_on_commit_callbacks
):
    sandbox.configure(latency_min=30, latency_max=30)
    job = step(new_job(sandbox_extractor))
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(job_id=job.pk, actor=Actor("api"), reason="no longer needed")
    (cancel,) = finished(spans, "job.cancel")
    assert cancel.context.trace_id == trace_of(job)
    assert cancel.attributes["job.outcome"] == "cancelled"


def test_an_extractor_call_carries_the_current_spans_traceparent(spans, httpserver):
    httpserver.expect_request("/v1/extractions", method="POST").respond_with_json(
        {"id": "x-1", "status": "queued"}, status=202
    )
    client = HttpAsyncClient(ClientConfig(base_url=httpserver.url_for("")))
    with tracing.span("job.submit") as submit:
        client.submit(SubmitRequest(file_name="a.txt", source_url="https://files.example.org/a"))
    (request, _answer) = httpserver.log[0]
    assert tracing.trace_ids(request.headers["traceparent"]) == (
        trace.format_trace_id(submit.get_span_context().trace_id),
        trace.format_span_id(submit.get_span_context().span_id),
    )
    assert [span.name for span in spans.get_finished_spans()] == ["job.submit"]


def test_with_tracing_off_an_extractor_call_has_no_traceparent(httpserver):
    httpserver.expect_request("/v1/extractions", method="POST").respond_with_json(
        {"id": "x-1", "status": "queued"}, status=202
    )
    client = HttpAsyncClient(ClientConfig(base_url=httpserver.url_for("")))
    with tracing.span("job.submit"):
        client.submit(SubmitRequest(file_name="a.txt", source_url="https://files.example.org/a"))
    (request, _answer) = httpserver.log[0]
    assert "traceparent" not in request.headers


def test_a_webhook_post_carries_the_jobs_trace(spans, settings, sandbox_extractor):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with KeepAliveReceiver() as receiver:
        WebhookSubscriptionFactory(url=f"http://127.0.0.1:{receiver.port}/hooks")
        job = new_job(sandbox_extractor)
        assert deliveries_send_due(limit=10, lease=timedelta(seconds=30)) == 1
        (head,) = receiver.heads
    (sent,) = finished(spans, "webhook.send")
    assert sent.context.trace_id == trace_of(job)
    assert sent.attributes["job.id"] == str(job.pk)
    assert sent.attributes["job.outcome"] == "delivered"
    header = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"traceparent:"))
    assert tracing.trace_ids(header.split(b":", 1)[1].strip().decode()) == (
        trace.format_trace_id(sent.context.trace_id),
        trace.format_span_id(sent.context.span_id),
    )


def test_with_tracing_off_a_webhook_post_has_no_traceparent(settings, sandbox_extractor):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with KeepAliveReceiver() as receiver:
        WebhookSubscriptionFactory(url=f"http://127.0.0.1:{receiver.port}/hooks")
        new_job(sandbox_extractor)
        assert deliveries_send_due(limit=10, lease=timedelta(seconds=30)) == 1
        (head,) = receiver.heads
    assert b"traceparent" not in head.lower()
