"""Tracing's set-up from the OTEL_* variables, its cost when off, the sampler's rule for orphan
client spans, and the trace ids in log lines."""

import json
import logging
import os
import subprocess
import sys

import psycopg
import pytest
import requests
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from jobtracking.infra import tracing
from jobtracking.infra.logs import JobContextFilter, JsonFormatter, job_log_context
from tests.factories import ExtractionJobFactory
from tests.processes import ROOT

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "tracker"}, False),  # a name alone exports nothing
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_tracing_wanted_follows_the_standard_variables(environ, wanted):
    assert tracing.wanted(environ) is wanted


def _started_process(**environ: str) -> dict:
    """What a process that set Django up (as every command and server does) loaded."""
    probe = (
        "import json, sys, django; django.setup(); "
        "from jobtracking.infra import tracing; from opentelemetry import trace; "
        "print(json.dumps({'enabled': tracing.enabled(), "
        "'sdk': sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')), "
        "'provider': type(trace.get_tracer_provider()).__name__, "
        "'middleware': [m for m in __import__('django.conf').conf.settings.MIDDLEWARE "
        "if 'opentelemetry' in m]}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**clean, **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_without_otel_variables_no_sdk_is_loaded_and_the_api_is_a_no_op():
    started = _started_process()
    assert started == {
        "enabled": False,
        "sdk": [],
        "provider": "ProxyTracerProvider",
        "middleware": [],
    }


def test_otel_variables_set_up_the_sdk_and_djangos_middleware():
    started = _started_process(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
    )
    assert started["enabled"] and started["provider"] == "TracerProvider"
    assert "opentelemetry.sdk.trace" in started["sdk"]
    assert started["middleware"] == [
        "opentelemetry.instrumentation.django.middleware.otel_middleware._DjangoMiddleware"
    ]


def test_an_unknown_exporter_is_a_clear_error_at_start_up():
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _started_process(OTEL_TRACES_EXPORTER="zipkin-ish")
    assert "OTEL_TRACES_EXPORTER: unknown exporter 'zipkin-ish'" in failed.value.stderr


def test_off_every_helper_is_a_no_op():
    assert not tracing.enabled()
    with tracing.span("anything", parent=PARENT) as span:
        assert not span.is_recording()
        assert tracing.current_traceparent() == ""
        assert tracing.current_ids() is None


def test_the_sampler_drops_client_spans_without_a_parent_only():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=tracing._NoOrphanClientSpans(ALWAYS_ON))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("SELECT", kind=trace.SpanKind.CLIENT):
        pass
    with (
        tracer.start_as_current_span("jobs.process"),
        tracer.start_as_current_span("UPDATE", kind=trace.SpanKind.CLIENT),
    ):
        pass
    assert [span.name for span in exporter.get_finished_spans()] == ["UPDATE", "jobs.process"]


def test_trace_ids_read_a_traceparent_and_refuse_anything_else():
    assert tracing.trace_ids(PARENT) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert tracing.trace_ids("") is None
    assert tracing.trace_ids("00-short-b7ad6b7169203331-01") is None


def _formatted(record_message: str) -> tuple[dict, str]:
    record = logging.LogRecord(
        "jobtracking.engine", logging.INFO, __file__, 1, record_message, None, None
    )
    JobContextFilter().filter(record)
    plain = logging.Formatter("%(job_prefix)s%(message)s").format(record)
    return json.loads(JsonFormatter().format(record)), plain


@pytest.mark.django_db
def test_log_lines_about_a_job_carry_its_trace_beside_its_id():
    job = ExtractionJobFactory(traceparent=PARENT)
    with job_log_context(job, "submitting"):
        entry, plain = _formatted("submitted")
    assert entry["job_id"] == str(job.pk)
    assert (entry["trace_id"], entry["span_id"]) == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )
    assert plain == (
        f"[{job.pk} submitting trace_id=0af7651916cd43dd8448eb211c80319c "
        "span_id=b7ad6b7169203331] submitted"
    )


def test_log_lines_outside_a_job_carry_the_current_span(spans):
    with tracing.span("jobs.process") as span:
        entry, _plain = _formatted("batch of 3")
    context = span.get_span_context()
    assert entry["trace_id"] == trace.format_trace_id(context.trace_id)
    assert entry["span_id"] == trace.format_span_id(context.span_id)
    entry, plain = _formatted("idle")
    assert "trace_id" not in entry and plain == "idle"


def test_untraced_blocks_make_no_instrumented_spans(spans):
    # A connection opened once tracing is on, as a traced process opens them all.
    with psycopg.connect(os.environ["DATABASE_URL"]) as db, tracing.span("dispatcher round"):
        db.execute("SELECT 1")
        with tracing.untraced():
            db.execute("SELECT 2")
    assert [span.name for span in spans.get_finished_spans()] == ["SELECT", "dispatcher round"]


def test_http_calls_make_no_span_of_their_own(spans, httpserver):
    httpserver.expect_request("/ping").respond_with_data("pong")
    with tracing.span("dispatcher round"):
        requests.get(httpserver.url_for("/ping"), timeout=5)
    assert [span.name for span in spans.get_finished_spans()] == ["dispatcher round"]
