"""Tracing's cost to the engine (run under `PG_DURABLE=1 .ci/with_postgres.sh`, as `make bench`
does): `bench.engine`'s run (two workers, one dispatcher, the sandbox with no added latency) with
tracing off and on, alternating, each run on a fresh stack with fresh jobs, in one sitting.

- off: no OTEL_* variable; no process loads the SDK (`jobtracking.infra.tracing`).
- on: every process of the stack exports every span (the default sampler, the parent's choice
  or always on) over OTLP/HTTP with the SDK's batch processor to a local receiver that drops
  them (`bench.receiver`, a process of its own, answering 204); this process, which creates the
  jobs, hands its spans to an exporter that drops them.
- on, 1 in 10: the same, sampling one trace in ten (`OTEL_TRACES_SAMPLER=
  parentbased_traceidratio`, `OTEL_TRACES_SAMPLER_ARG=0.1`), as a busy production would.

It prints each run's jobs/s and CPU ms a job, the medians, and each "on" as a ratio of off
(target >= 0.90x). Unconfigured tracing cannot be run against the code without it in one sitting, so
the off target (>= 0.99x) is checked from what the off helpers cost: the CPU of the calls the
engine makes per job with tracing off (a span and an outcome per extractor call, the batch's
links, the log context's trace ids), timed here, against the CPU a job costs in the off runs.

    BENCH_TRACING_JOBS (2,000)   jobs in each run
    BENCH_TRACING_ROUNDS (2)     rounds of off, on
"""

import contextlib
import os
import statistics
import time
import timeit

from bench import setup
from bench.engine import Monitor, run_jobs, serve_samples
from bench.webhooks import start_receiver

JOBS = int(os.environ.get("BENCH_TRACING_JOBS", 2_000))
ROUNDS = int(os.environ.get("BENCH_TRACING_ROUNDS", 2))
STACK = {"workers": 2, "clusters": 1, "dispatchers": 1}


# (label, the sampler's ratio; None: tracing off)
CONDITIONS = (("off", None), ("on", 1.0), ("on, 1 in 10", 0.1))


@contextlib.contextmanager
def traced(endpoint: str, ratio: float | None):
    """Tracing on for one run (the stack's processes inherit this environment), sampling
    `ratio` of the traces; off if None."""
    if ratio is None:
        yield
        return
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from jobtracking.infra import tracing

    class Dropping(SpanExporter):
        def export(self, spans) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    variables = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(ratio),
    }
    os.environ.update(variables)
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    tracing.enable(provider)
    try:
        yield
    finally:
        tracing.disable()
        provider.shutdown()
        for name in variables:
            del os.environ[name]


def off_helpers_seconds(calls: float) -> float:
    """CPU seconds of what the engine calls per job with tracing off, for a job of `calls`
    extractor calls: each call's span, outcome and trace headers, the batch's links and untraced
    block (one batch of 25 jobs), the job's log context's trace ids."""
    from types import SimpleNamespace

    from extraction.clients.base import with_trace_context
    from jobtracking.infra import tracing

    assert not tracing.enabled()
    job = SimpleNamespace(pk="j", attempt=1, traceparent="", extractor=SimpleNamespace(slug="s"))
    headers = {"Accept": "application/json"}

    def step() -> None:
        with tracing.job_span(job, "poll") as span:
            with_trace_context(headers)
            tracing.record_outcome(span, "running")
        tracing.trace_ids(job.traceparent)

    def batch() -> None:
        with tracing.span("jobs.process"), tracing.untraced():
            tracing.link_jobs([job] * 25)

    number = 100_000
    per_step = min(timeit.repeat(step, number=number, repeat=5)) / number
    per_batch = min(timeit.repeat(batch, number=number // 10, repeat=5)) / (number // 10)
    return calls * per_step + per_batch / 25


def cpu_ms(run: dict) -> float:
    return sum(run["cpu"].values())


def calls_per_job(run: dict) -> float:
    return sum(run["stats"]["requests"].values()) / run["jobs"]


def rates(runs: list[dict]) -> str:
    return " ".join(f"{run['rate']:.1f}" for run in runs)


def main() -> None:
    setup()
    from django.db import connection

    monitor = Monitor(os.environ["DATABASE_URL"])
    files, file_server = serve_samples()
    sink_url, sink = start_receiver("ok")
    runs: dict[str, list[dict]] = {label: [] for label, _ratio in CONDITIONS}
    started = time.perf_counter()
    try:
        for round_ in range(ROUNDS):
            for label, ratio in CONDITIONS:
                with traced(sink_url, ratio):
                    run = run_jobs(monitor, files, JOBS, f"tracing {label}", STACK)
                runs[label].append(run)
                print(
                    f"round {round_ + 1} tracing {label}: {run['rate']:.1f} jobs/s, "
                    f"{cpu_ms(run):.2f} CPU ms a job ("
                    + ", ".join(f"{name} {ms:.2f}" for name, ms in run["cpu"].items())
                    + f"), {calls_per_job(run):.2f} extractor calls a job, "
                    f"{run['statements']:.1f} SQL statements a job, outcome {run['outcome']}",
                    flush=True,
                )
    finally:
        connection.close()
        file_server.terminate()
        sink.terminate()
    print(f"\n{JOBS:,} jobs a run, {ROUNDS} rounds, 2 workers, 1 dispatcher (medians)")
    off = statistics.median(r["rate"] for r in runs["off"])
    off_cpu = statistics.median(cpu_ms(r) for r in runs["off"])
    for label, _ratio in CONDITIONS:
        rate = statistics.median(r["rate"] for r in runs[label])
        cpu = statistics.median(cpu_ms(r) for r in runs[label])
        print(
            f"tracing {label}: {rate:.1f} jobs/s ({rate / off:.3f}x off; each run: "
            f"{rates(runs[label])}), {cpu:.2f} CPU ms a job ({cpu / off_cpu:.3f}x off)"
        )
    print("target: tracing on >= 0.90x off")
    helpers_ms = 1000 * off_helpers_seconds(statistics.median(map(calls_per_job, runs["off"])))
    print(
        f"off helpers: {1000 * helpers_ms:.2f} CPU us a job against {off_cpu:.2f} CPU ms: "
        f"off >= {off_cpu / (off_cpu + helpers_ms):.4f}x of the engine without them "
        "(target >= 0.99x)"
    )
    print(f"bench.tracing: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
