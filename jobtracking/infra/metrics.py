"""Prometheus metrics read from the database at scrape time (so every machine's work counts),
plus the extractor call metrics of this machine's processes."""

import os
from datetime import timedelta

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

from extraction.metrics import EXTRACTOR_CALL_ERRORS, EXTRACTOR_CALL_SECONDS
from jobtracking import states
from jobtracking.models import (
    CircuitState,
    DeliveryState,
    ExtractionJob,
    ExtractorHealth,
    JobStatusChange,
    ReceiverHealth,
    ServiceHeartbeat,
    WebhookDelivery,
)

RECENT = timedelta(minutes=5)

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
LANE_RESTARTS = Counter(
    "jobtracking_delivery_lane_restarts_total",
    "Delivery lane processes a dispatcher started again after they ended unasked.",
)


class DatabaseCollector:
    def collect(self):
        now = timezone.now()
        jobs = GaugeMetricFamily("jobtracking_jobs", "Jobs by status.", labels=["status"])
        counts = dict(
            ExtractionJob.objects.order_by().values_list("status").annotate(n=Count("pk"))
        )
        for code, *_ in states.STATUSES:
            jobs.add_metric([code], counts.get(code, 0))
        yield jobs

        oldest_due = ExtractionJob.objects.filter(
            status__in=sorted(states.ACTIVE), due_at__lte=now
        ).aggregate(oldest=Min("due_at"))["oldest"]
        yield GaugeMetricFamily(
            "jobtracking_dispatcher_lag_seconds",
            "Now minus the oldest due_at among due active jobs (0 when none is due).",
            value=(now - oldest_due).total_seconds() if oldest_due else 0.0,
        )

        transitions = GaugeMetricFamily(
            "jobtracking_transitions_recent",
            "Status changes in the last 5 minutes, by new status.",
            labels=["to_status"],
        )
        recent = JobStatusChange.objects.filter(changed_at__gte=now - RECENT)
        for status, n in recent.order_by().values_list("to_status").annotate(n=Count("pk")):
            transitions.add_metric([status], n)
        yield transitions

        backlog = GaugeMetricFamily(
            "jobtracking_webhook_deliveries", "Webhook deliveries by state.", labels=["state"]
        )
        pending = WebhookDelivery.objects.exclude(state=DeliveryState.DELIVERED)
        by_state = dict(pending.order_by().values_list("state").annotate(n=Count("pk")))
        for state in (DeliveryState.PENDING, DeliveryState.DEAD):
            backlog.add_metric([state], by_state.get(state, 0))
        yield backlog

        oldest_pending = (
            WebhookDelivery.objects.filter(state=DeliveryState.PENDING)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        yield GaugeMetricFamily(
            "jobtracking_webhook_oldest_pending_seconds",
            "Age of the oldest pending webhook delivery (0 when none is pending).",
            value=(now - oldest_pending).total_seconds() if oldest_pending else 0.0,
        )

        circuits = GaugeMetricFamily(
            "jobtracking_circuit_open",
            "1 for each dependency whose circuit holds its work (open: failing, probes only; "
            "paused: by staff). Closed circuits are absent.",
            labels=["kind", "name", "state"],
        )
        extractors = ExtractorHealth.objects.exclude(state=CircuitState.CLOSED)
        for slug, state in extractors.values_list("extractor__slug", "state"):
            circuits.add_metric(["extractor", slug, state], 1)
        receivers = ReceiverHealth.objects.exclude(state=CircuitState.CLOSED)
        for subscription_id, state in receivers.values_list("subscription_id", "state"):
            circuits.add_metric(["receiver", str(subscription_id), state], 1)
        yield circuits

        ages = GaugeMetricFamily(
            "jobtracking_heartbeat_age_seconds",
            "Seconds since each process last beat.",
            labels=["name", "kind"],
        )
        for beat in ServiceHeartbeat.objects.all():
            ages.add_metric([beat.name, beat.kind], (now - beat.beat_at).total_seconds())
        yield ages


def render() -> bytes:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector())
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        for metric in (
            EXTRACTOR_CALL_SECONDS,
            EXTRACTOR_CALL_ERRORS,
            LOOP_ERRORS,
            DELIVERY_ERRORS,
            LANE_RESTARTS,
        ):
            registry.register(metric)
    return generate_latest(registry)
