"""What `/metrics` reads from the database at scrape time, so every machine's work counts: jobs
by status, the dispatcher's lag, recent transitions, the webhook backlog, open circuits and
heartbeats. The counters and the text format are `jobtracking.infra.metrics`."""

from datetime import timedelta

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

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


class DatabaseCollector:
    def collect(self):
        now = timezone.now()
        jobs = GaugeMetricFamily("jobtracking_jobs", "Jobs by status.", labels=["status"])
        counts = dict(
            ExtractionJob.objects.order_by().values_list("status").annotate(n=Count("pk"))
        )
        for status in states.STATUSES:
            jobs.add_metric([status.code], counts.get(status.code, 0))
        yield jobs

        oldest_due = ExtractionJob.objects.filter(
            status__in=sorted(states.DISPATCHED), due_at__lte=now
        ).aggregate(oldest=Min("due_at"))["oldest"]
        yield _age(
            "jobtracking_dispatcher_lag_seconds",
            "Now minus the oldest due_at among due active jobs (0 when none is due).",
            now,
            oldest_due,
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
        yield _age(
            "jobtracking_webhook_oldest_pending_seconds",
            "Age of the oldest pending webhook delivery (0 when none is pending).",
            now,
            oldest_pending,
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


def _age(name: str, documentation: str, now, since) -> GaugeMetricFamily:
    """A gauge of the seconds from `since` to now; 0 when there is no `since`."""
    return GaugeMetricFamily(
        name, documentation, value=(now - since).total_seconds() if since else 0.0
    )
