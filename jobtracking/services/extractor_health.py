"""An extractor's circuit (`jobtracking.services.circuits`) as the engine and staff use it:
jobs held behind it are due exactly at its `probe_at`, so releasing them is one UPDATE."""

from datetime import datetime

from django.utils import timezone

from extraction.models import Extractor
from jobtracking import states
from jobtracking.infra.wakeup import notify_due
from jobtracking.models import ExtractionJob, ExtractorHealth
from jobtracking.services.circuits import circuit_pause, circuit_resume


def extractor_release(extractor_id: int):
    """What an extractor's circuit does when it closes: its held jobs are due now."""

    def release(held_until: datetime) -> None:
        held = ExtractionJob.objects.filter(
            extractor_id=extractor_id, status__in=sorted(states.ACTIVE), due_at=held_until
        )
        held.update(due_at=timezone.now())
        notify_due()

    return release


def extractor_pause(*, extractor: Extractor, reason: str) -> ExtractorHealth:
    """Staff stop all calls to the extractor (maintenance, a key rotation). Jobs wait; their
    deadlines still run, and they can still be cancelled."""
    return circuit_pause(ExtractorHealth, extractor.pk, reason=reason, now=timezone.now())


def extractor_resume(*, extractor: Extractor) -> ExtractorHealth:
    """Calls resume (after a pause, or at once for an open circuit); held jobs are due now."""
    return circuit_resume(
        ExtractorHealth, extractor.pk, now=timezone.now(), release=extractor_release(extractor.pk)
    )
