"""OpenTelemetry traces (docs/tracing.md): set up once per process from the standard `OTEL_*`
environment variables, or not at all. Unconfigured, nothing of the SDK is loaded and every helper
here is a no-op that returns at its first line, so tracing that is off costs nothing measurable
(`bench.tracing`).

A job keeps the W3C `traceparent` of the span that created it (`ExtractionJob.traceparent`):
every later step (submit, each poll, the result fetch, cancel, each webhook delivery) is a span
of that trace, made whichever process runs it, so one trace follows one document from the
client's request to the webhook the client receives.
"""

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# The variables that turn tracing on: an exporter named, or an OTLP endpoint given.
SWITCHES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
SERVICE_NAME = "extraction-job-tracking"
TRACER_NAME = "jobtracking"
CLIENT = trace.SpanKind.CLIENT

_propagator = TraceContextTextMapPropagator()
_tracer: trace.Tracer | None = None  # None: tracing is off


def enabled() -> bool:
    return _tracer is not None


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (the SDK's own `OTEL_SDK_DISABLED` wins)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return any(environ.get(name, "").strip() for name in SWITCHES)


def configure_from_environment() -> bool:
    """Called once per process at start-up (`JobtrackingConfig.ready`): if the environment asks
    for traces, build the SDK's provider with the exporter, service name and sampler it names and
    instrument Django and psycopg. Returns whether tracing is on."""
    if enabled() or not wanted():
        return enabled()
    # Imported here: a process without tracing never loads the SDK.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import _get_from_env_or_default

    # OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name the service, else our default does;
    # OTEL_TRACES_SAMPLER(_ARG) choose the sampler: the SDK's own reading of them (a private
    # function, but the one rule; a copy here would drift from it), wrapped.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    sampler = _NoOrphanClientSpans(_get_from_env_or_default())
    provider = TracerProvider(resource=resource, sampler=sampler)
    for exporter in _exporters():
        # OTEL_BSP_* tune the batches; the processor restarts its thread in forked children.
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    enable(provider)
    return True


def _exporters() -> list:
    """The exporters OTEL_TRACES_EXPORTER names (default otlp), over the protocol
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL gives (default
    http/protobuf); each reads its endpoint, headers and timeout from the environment."""
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp") or "otlp"
    exporters = []
    for name in (part.strip().lower() for part in names.split(",")):
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            exporters.append(_otlp_exporter())
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console)")
    return exporters


def _otlp_exporter():
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if protocol.strip().lower() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


class _NoOrphanClientSpans:
    """The configured sampler, except that a client span (an SQL statement, an HTTP call) with
    no parent is dropped: the dispatcher's and the delivery lane's idle rounds would otherwise
    each start traces of one statement, many a second, that follow no request and no job."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None):
        from opentelemetry.sdk.trace.sampling import Decision, SamplingResult

        parent = trace.get_current_span(parent_context).get_span_context()
        if kind is trace.SpanKind.CLIENT and not parent.is_valid:
            return SamplingResult(Decision.DROP)
        return self.sampler.should_sample(parent_context, trace_id, name, kind, attributes, links)

    def get_description(self) -> str:
        return f"NoOrphanClientSpans{{{self.sampler.get_description()}}}"


def _instrumentors() -> list:
    """The maintained instrumentations `enable` turns on and `disable` off."""
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    return [DjangoInstrumentor(), PsycopgInstrumentor()]


def enable(provider) -> None:
    """Trace through `provider` from now on (tests pass one with an in-memory exporter), with
    Django's and psycopg's own instrumentation. HTTP calls make no span of their own: an
    extractor call is its step's span, which sends its traceparent along
    (`extraction.clients.base.with_trace_context`)."""
    global _tracer
    _tracer = provider.get_tracer(TRACER_NAME)
    for instrumentor in _instrumentors():
        instrumentor.instrument(tracer_provider=provider)


def disable() -> None:
    """Undo `enable` (tests)."""
    global _tracer
    _tracer = None
    for instrumentor in _instrumentors():
        instrumentor.uninstrument()


def untraced():
    """A block whose SQL statements make no span (the instrumentations' own switch): for loops
    whose rounds follow no request and no job, and a batch task's transactions."""
    if _tracer is None:
        return contextlib.nullcontext()
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    return suppress_instrumentation()


def current_traceparent() -> str:
    """The W3C `traceparent` of the current span ("" when tracing is off or no span is on)."""
    if _tracer is None:
        return ""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def trace_ids(traceparent: str) -> tuple[str, str] | None:
    """(trace id, span id) of a W3C `traceparent` ("00-<32 hex>-<16 hex>-<flags>"), or None."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    return parts[1], parts[2]


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span, if tracing is on and a span is."""
    if _tracer is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def _context_of(traceparent: str):
    return _propagator.extract({"traceparent": traceparent}) if traceparent else None


@contextlib.contextmanager
def span(
    name: str,
    *,
    parent: str = "",
    attributes: Mapping[str, Any] | None = None,
    links: Iterable[str] = (),
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
) -> Iterator[trace.Span]:
    """A span named `name`, current inside the block: a child of the span `parent` (a
    traceparent) if given, else of the current span; `links` are traceparents it points to.
    Off, it yields a span that records nothing."""
    if _tracer is None:
        yield trace.INVALID_SPAN
        return
    linked = [
        trace.Link(trace.get_current_span(context).get_span_context())
        for context in map(_context_of, links)
        if context is not None
    ]
    with _tracer.start_as_current_span(
        name, context=_context_of(parent), kind=kind, attributes=attributes, links=linked
    ) as current:
        yield current


def link_jobs(jobs: Iterable) -> None:
    """Link the current span (a batch task's) to each job's trace, if it records."""
    if _tracer is None:
        return
    current = trace.get_current_span()
    if not current.is_recording():
        return
    for job in jobs:
        if context := _context_of(job.traceparent):
            current.add_link(trace.get_current_span(context).get_span_context())


def job_span(job, step: str):
    """The span of one step of a job's life (submit, poll, fetch_result, cancel…), in the job's
    trace, with the attributes an operator filters by."""
    if _tracer is None:
        return contextlib.nullcontext(trace.INVALID_SPAN)
    return span(
        f"job.{step}",
        parent=job.traceparent,
        attributes={
            "job.id": str(job.pk),
            "job.attempt": job.attempt,
            "job.extractor": job.extractor.slug,
        },
    )


def record_outcome(current: trace.Span, outcome: str, error_code: str = "") -> None:
    """A step's outcome (and the job's error code, when the step ended the job with one)."""
    if not current.is_recording():
        return
    current.set_attribute("job.outcome", outcome)
    if error_code:
        current.set_attribute("job.error_code", error_code)
        current.set_status(trace.StatusCode.ERROR, error_code)
