"""Retention: terminal jobs are deleted, with their history, results, events and files, once they
are older than the retention window of their status (`JOBS_RETENTION_DAYS`)."""

from datetime import timedelta

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from jobtracking import states
from jobtracking.models import ExtractionJob, ExtractionResult


def purgeable_jobs() -> QuerySet[ExtractionJob]:
    now = timezone.now()
    past_retention = Q(pk__in=[])
    for status, days in settings.JOBS_RETENTION_DAYS.items():
        if status in states.TERMINAL:
            past_retention |= Q(status=status, completed_at__lt=now - timedelta(days=days))
    return ExtractionJob.objects.filter(past_retention)


def jobs_purge(*, ids: list) -> int:
    """Delete these jobs and everything that hangs off them in one short transaction (a batch
    at a time keeps locks short and memory bounded); their files go once it has committed.
    Only jobs still past retention are deleted. Returns the number of jobs deleted."""
    with transaction.atomic():
        jobs = purgeable_jobs().filter(pk__in=ids)
        files = [name for name in jobs.exclude(upload="").values_list("upload", flat=True)]
        files += list(
            ExtractionResult.objects.filter(job__in=jobs)
            .exclude(payload_file="")
            .values_list("payload_file", flat=True)
        )
        _, per_model = jobs.delete()
        transaction.on_commit(lambda: [default_storage.delete(name) for name in files])
    return per_model.get(ExtractionJob._meta.label, 0)
