"""The processes' heartbeats, and the repair of jobs that lost their due time."""

import socket

from django.utils import timezone

from jobtracking import states
from jobtracking.models import ExtractionJob, ServiceHeartbeat


def heartbeat_record(kind: str, name: str | None = None, **details) -> None:
    """Record that a long-running process is alive (read by /readyz and the dashboard)."""
    ServiceHeartbeat.objects.update_or_create(
        name=name or f"{kind}@{socket.gethostname()}",
        defaults={"kind": kind, "beat_at": timezone.now(), "details": details},
    )


def jobs_due_repair(now) -> int:
    """Make every job the dispatcher works on (`states.DISPATCHED`) without a due time due now
    (none should be: a safety net). A job waiting for a person is not due."""
    return ExtractionJob.objects.filter(
        status__in=sorted(states.DISPATCHED), due_at__isnull=True
    ).update(due_at=now)
