"""Where tracing's cost goes in a worker: the engine's task (`process_jobs`) run in this process
on batches of sandbox jobs, as the dispatcher would hand them over, with tracing off and on
(every span kept, exported over OTLP/HTTP to `bench.receiver`, which drops them).

First the CPU of the batches, off and on alternating (the worker's own threads and the span
processor's thread: the process's CPU time while the batches run), in CPU ms a job and on as a
ratio of off. Then one more "on" run under cProfile, with the extractor calls made in this thread
and the spans exported from it (512 a request, as the batch processor sends them), so that one
profile holds all of it: the functions with the most time of their own, and the share of the
time spent in OpenTelemetry's code and protobuf's.

    PG_DURABLE=1 .ci/with_postgres.sh .venv/bin/python -m bench.profile_tracing

    BENCH_PROFILE_JOBS (500)     jobs in each run
    BENCH_PROFILE_ROUNDS (3)     rounds of off, on, on with no trace sampled
    BENCH_PROFILE_TOP (30)       functions listed; 0 leaves the profile out
    BENCH_PROFILE_TRACING (on)   off: runs and profiles tracing off only (the worker's own CPU)
    BENCH_PROFILE_OUT            a file to save the profile in, for pstats
"""

import contextlib
import cProfile
import os
import pstats
import statistics
import time
from concurrent.futures import Future

from bench import setup
from bench.engine import create_jobs, new_extractor, serve_samples
from bench.webhooks import start_receiver

JOBS = int(os.environ.get("BENCH_PROFILE_JOBS", 500))
ROUNDS = int(os.environ.get("BENCH_PROFILE_ROUNDS", 3))
TOP = int(os.environ.get("BENCH_PROFILE_TOP", 30))
# label: the share of traces sampled (None: tracing off). "none sampled": the instrumentation's
# and the helpers' cost without a span recorded.
CONDITIONS = {"off": None, "on": 1.0, "on, none sampled": 0.0}
TRACING_OFF = os.environ.get("BENCH_PROFILE_TRACING", "on") == "off"
if TRACING_OFF:
    CONDITIONS = {"off": None}


class InThread:
    """An executor that runs each call at once in the caller's thread (for the profile)."""

    def submit(self, function, *args) -> Future:
        future: Future = Future()
        future.set_result(function(*args))
        return future


def inline_batches(exporter):
    """A span processor that exports 512 ended spans a request from the thread that ends the
    512th, as the batch processor's thread would."""
    from opentelemetry import context
    from opentelemetry.instrumentation.utils import suppress_instrumentation
    from opentelemetry.sdk.trace import SpanProcessor

    class Inline(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list = []

        def on_end(self, span) -> None:
            self.spans.append(span)
            if len(self.spans) >= 512:
                self.force_flush()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            spans, self.spans = self.spans, []
            if spans:
                # As from the processor's thread: outside any span, its POST not traced.
                token = context.attach(context.Context())
                try:
                    with suppress_instrumentation():
                        exporter.export(spans)
                finally:
                    context.detach(token)
            return True

    return Inline()


@contextlib.contextmanager
def traced(endpoint: str, ratio: float | None, profiled: bool = False):
    """Tracing as `bench.tracing` sets it up for the stack's processes, sampling `ratio` of the
    traces (None: off)."""
    from django.db import connection

    if ratio is None:
        yield None
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from jobtracking.infra import tracing

    exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
    sampler = tracing._NoOrphanClientSpans(ParentBased(TraceIdRatioBased(ratio)))
    provider = TracerProvider(sampler=sampler)
    processor = inline_batches(exporter) if profiled else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    tracing.enable(provider)
    # psycopg's instrumentation traces the connections opened from now on, as a worker's are.
    connection.close()
    try:
        yield provider
    finally:
        provider.force_flush()
        tracing.disable()
        provider.shutdown()
        connection.close()


def drive(extractor, batch: int) -> float:
    """Run the extractor's jobs to their end, `batch` due jobs a task as the dispatcher claims
    them; returns the process's CPU seconds while the tasks ran."""
    from django.db import transaction
    from django.db.models import Q
    from django.utils import timezone

    from jobtracking import states
    from jobtracking.engine.tasks import process_jobs
    from jobtracking.infra import tracing
    from jobtracking.models import ExtractionJob

    active = ExtractionJob.objects.filter(extractor=extractor).exclude(
        status_id__in=states.TERMINAL
    )
    cpu = 0.0
    while True:
        with tracing.untraced(), transaction.atomic():
            due = list(
                active.filter(Q(due_at__isnull=True) | Q(due_at__lte=timezone.now()))
                .order_by("due_at")
                .values_list("pk", flat=True)[:batch]
            )
            ExtractionJob.objects.filter(pk__in=due).update(claimed_at=timezone.now())
        if not due:
            if not active.exists():
                return cpu
            time.sleep(0.05)
            continue
        started = time.process_time()
        process_jobs([str(pk) for pk in due])
        cpu += time.process_time() - started


def run(sandbox: str, files: str, sink: str, ratio: float | None, profiled: bool = False) -> float:
    """CPU ms a job of one run."""
    from django.conf import settings

    extractor = new_extractor(sandbox)
    with traced(sink, ratio, profiled) as provider:
        create_jobs(extractor, JOBS, files)
        cpu = drive(extractor, settings.JOBS_TASK_BATCH_SIZE)
        if provider is not None:
            started = time.process_time()
            provider.force_flush()
            cpu += time.process_time() - started
    return 1000 * cpu / JOBS


def main() -> None:
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # The sample files are on loopback: the sandbox fetches them, and so may this process.
    os.environ["OUTBOUND_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    setup()
    from django.db import connection

    from jobtracking.engine import tasks
    from tests.processes import answers, free_port, start_command, stop, wait_until

    port = free_port()
    sandbox_url = f"http://127.0.0.1:{port}"
    sandbox = start_command("run_sandbox_extractor", "--port", str(port))
    files, file_server = serve_samples()
    sink, receiver = start_receiver("ok")
    try:
        wait_until(lambda: answers(f"{sandbox_url}/healthz"), 30, "the sandbox")
        cpu: dict[str, list[float]] = {label: [] for label in CONDITIONS}
        for round_ in range(ROUNDS):
            for label, ratio in CONDITIONS.items():
                cpu[label].append(run(sandbox_url, files, sink, ratio))
                print(f"round {round_ + 1} {label}: {cpu[label][-1]:.2f} CPU ms a job", flush=True)
        if ROUNDS:
            print(f"\n{JOBS} jobs a run, {ROUNDS} rounds (medians)")
            off = statistics.median(cpu["off"])
            for label, runs in cpu.items():
                ms = statistics.median(runs)
                print(f"{label}: {ms:.2f} CPU ms a job, {ms / off:.3f}x off, +{ms - off:.2f} ms")
        if not TOP:
            return
        tasks._call_pool.cache_clear()
        pool = tasks._call_pool
        tasks._call_pool = InThread
        profile = cProfile.Profile(time.process_time)  # CPU, not waits
        try:
            profile.enable()
            profiled = run(sandbox_url, files, sink, None if TRACING_OFF else 1.0, profiled=True)
            profile.disable()
        finally:
            tasks._call_pool = pool
        stats = pstats.Stats(profile)
        if os.environ.get("BENCH_PROFILE_OUT"):
            stats.dump_stats(os.environ["BENCH_PROFILE_OUT"])
        total = stats.total_tt
        shares = {"opentelemetry": 0.0, "google/protobuf": 0.0}
        for (path, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
            for part in shares:
                if f"/{part}/" in path:
                    shares[part] += tt
        label = "off" if TRACING_OFF else "on"
        print(
            f"\nprofiled {label} run: {profiled:.2f} CPU ms a job (cProfile's own overhead "
            f"included); own time in opentelemetry/ {100 * shares['opentelemetry'] / total:.1f}%, "
            f"google/protobuf/ {100 * shares['google/protobuf'] / total:.1f}%"
        )
        stats.sort_stats("tottime").print_stats(TOP)
        stats.sort_stats("cumulative").print_stats("opentelemetry", TOP)
    finally:
        connection.close()
        for process in (sandbox, file_server, receiver):
            stop(process) if process is sandbox else process.terminate()


if __name__ == "__main__":
    main()
