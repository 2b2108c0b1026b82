"""Prometheus metrics: the counters this machine's processes keep (faults the long-lived loops
rode out, with the extractor call metrics), and the `/metrics` text of them plus any collectors
the caller adds (`jobtracking.api.metrics.DatabaseCollector` reads the database at scrape time).
Plumbing: it imports no job module, so every layer may count here."""

import os

from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
from prometheus_client.registry import Collector

from extraction.metrics import EXTRACTOR_CALL_ERRORS, EXTRACTOR_CALL_SECONDS

# Faults the long-lived processes rode out, counted in the process where they happened (as the
# extractor call metrics: with PROMETHEUS_MULTIPROC_DIR, every process of a machine writes
# there and `/metrics` adds them up; without it, `/metrics` shows the web process's own).
LOOP_ERRORS = Counter(
    "jobtracking_loop_errors_total",
    "Unexpected errors a long-lived loop logged and went on from, by loop "
    "(delivery_lane, dispatcher, worker_supervisor).",
    ["loop"],
)
DELIVERY_ERRORS = Counter(
    "jobtracking_webhook_delivery_errors_total",
    "Unexpected errors kept to the deliveries they concern, by stage: send (the delivery's "
    "attempt failed), record (its round's shared record failed; each recorded alone), ended "
    "(its own record failed too; it is dead).",
    ["stage"],
)
USAGE_PAGES = Counter(
    "jobtracking_usage_pages_total",
    "Billable pages of the attempts that ended in this process, by extractor (slug) and model.",
    ["extractor", "model"],
)
LANE_RESTARTS = Counter(
    "jobtracking_delivery_lane_restarts_total",
    "Delivery lane processes a dispatcher started again after they ended unasked.",
)
COMPUTE_SLOT_WAIT = Counter(
    "jobtracking_compute_slot_wait_seconds_total",
    "Seconds batches waited for one of the machine's compute slots (all were taken: the machine "
    "has more workers than cores to run them).",
)


def render(*collectors: Collector) -> bytes:
    """The `/metrics` text: `collectors`, then the counters (every process's, with
    PROMETHEUS_MULTIPROC_DIR)."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        for metric in (
            EXTRACTOR_CALL_SECONDS,
            EXTRACTOR_CALL_ERRORS,
            LOOP_ERRORS,
            DELIVERY_ERRORS,
            LANE_RESTARTS,
            COMPUTE_SLOT_WAIT,
            USAGE_PAGES,
        ):
            registry.register(metric)
    return generate_latest(registry)
