"""Retention: terminal jobs are deleted, with their history, results, events and files, once they
are older than the retention window of their status (`JOBS_RETENTION_DAYS`), after their record
is archived (`jobtracking.services.archive`); a batch goes with its last job. Upload files no
job references (left by a crash or a rolled-back transaction) are swept daily."""

import posixpath
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from jobtracking import states
from jobtracking.infra.rows import any_of
from jobtracking.models import (
    Batch,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    WebhookDelivery,
)
from jobtracking.services.archive import (
    ArchiveRun,
    archived_jobs_insert,
    jobs_archive_started,
    jobs_delete_indexed,
)


def purgeable_jobs() -> QuerySet[ExtractionJob]:
    now = timezone.now()
    past_retention = Q(pk__in=[])
    for status, days in settings.JOBS_RETENTION_DAYS.items():
        if status in states.TERMINAL:
            past_retention |= Q(status=status, completed_at__lt=now - timedelta(days=days))
    return ExtractionJob.objects.filter(past_retention)


def jobs_purge(*, ids: list, run: ArchiveRun | None = None) -> int:
    """Archive these jobs (as part of `run`, a new one by default), then delete them and
    everything that hangs off them in one short transaction (a batch at a time keeps locks
    short and memory bounded); their files go once it has committed. Only jobs still past
    retention are deleted, and only once the archive's manifest has confirmed their record
    (`JOBS_ARCHIVE_BEFORE_PURGE`): an archive that fails raises, and deletes nothing. Returns
    the number of jobs deleted."""
    if run is None:
        with ArchiveRun() as run:
            return jobs_purge(ids=ids, run=run)
    # The archive is written beside this transaction, on connections of its own, unless a
    # transaction encloses this one (another connection could not see that one's rows) or the
    # database is not PostgreSQL (the archive then refuses at once, with its reason).
    beside = not connection.in_atomic_block and connection.vendor == "postgresql"
    with transaction.atomic():
        # Locked: a requeue (or any transition) racing this purge either got its row lock first,
        # and the job is skipped, or waits for this transaction and finds the job gone. Never
        # a requeued job deleted with its history.
        doomed = list(
            purgeable_jobs()
            .filter(pk__in=any_of(ids, "uuid"))
            .select_for_update(skip_locked=True)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        locked = any_of(doomed, "uuid")
        # Under the row locks: the record archived is the job deleted. What waits meanwhile
        # is only a requeue of a job past retention, for one chunk's write. The jobs are deleted
        # while the archive is written: nothing of that commits before the archive's parts are
        # confirmed (an archive that fails rolls it all back).
        archived = None
        if settings.JOBS_ARCHIVE_BEFORE_PURGE and doomed:
            archived = jobs_archive_started(job_ids=doomed, run=run, beside=beside)
            if beside:
                # The deletes' foreign-key checks (deferred: a query or two per row deleted and
                # table referencing it, most of a chunk's commit) run as each delete does, while
                # the parts are written, not after the wait. Nothing commits any sooner; this
                # transaction is the outermost, so the setting ends with it.
                with connection.cursor() as cursor:
                    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        files = list(
            ExtractionJob.objects.filter(pk__in=locked)
            .exclude(upload="")
            .values_list("upload", flat=True)
        )
        files += list(
            ExtractionResult.objects.filter(job_id__in=locked)
            .exclude(payload_file="")
            .values_list("payload_file", flat=True)
        )
        # Children first, each one DELETE statement. QuerySet.delete() would load every job and
        # event into memory to cascade; with the children gone there is nothing to cascade to.
        WebhookDelivery.objects.filter(event__job_id__in=locked).delete()
        for model in (JobEvent, JobStatusChange, ExtractionResult):
            _delete_rows(model.objects.filter(job_id__in=locked))
        batches = set(
            ExtractionJob.objects.filter(pk__in=locked, batch__isnull=False).values_list(
                "batch_id", flat=True
            )
        )
        # The same predicate again at the moment of the DELETE.
        jobs = purgeable_jobs().filter(pk__in=locked)
        if archived:  # what the index takes from the jobs, kept as they go
            deleted, indexed = jobs_delete_indexed(jobs)
        else:
            deleted = _delete_rows(jobs)
        _batches_purge(batches)
        if archived:  # the parts waited for only now, with all but the index done
            archived_jobs_insert(archived(), indexed)
        transaction.on_commit(lambda: [default_storage.delete(name) for name in files])
    return deleted


def _batches_purge(batch_ids: set) -> None:
    """Delete those of these batches that have no job left, with their events. Their rows are
    locked first, and only then are their jobs looked for (a statement of its own, so it sees
    what committed meanwhile): a job being added to one (which holds a key-share lock on its
    row until it commits) is waited for and seen, and its batch kept."""
    if not batch_ids:
        return
    locked = list(
        Batch.objects.select_for_update().filter(pk__in=batch_ids).values_list("pk", flat=True)
    )
    empty = list(
        Batch.objects.filter(pk__in=locked)
        .exclude(Exists(ExtractionJob.objects.filter(batch_id=OuterRef("pk"))))
        .values_list("pk", flat=True)
    )
    WebhookDelivery.objects.filter(event__batch_id__in=empty).delete()
    _delete_rows(JobEvent.objects.filter(batch_id__in=empty))
    _delete_rows(Batch.objects.filter(pk__in=empty))


def _delete_rows(queryset: QuerySet) -> int:
    """One DELETE statement, with no cascade collection (callers delete dependants first)."""
    return queryset._raw_delete(queryset.db)


# The first folder of the field's `upload_to` ("uploads/%Y/%m/%d/").
UPLOADS_FOLDER = ExtractionJob._meta.get_field("upload").upload_to.split("/")[0]
# A file younger than this may belong to a creation still in flight (saved before its insert).
UPLOAD_SWEEP_MIN_AGE = timedelta(hours=1)


def uploads_sweep(*, dry_run: bool = False) -> list[str]:
    """Delete the files under the uploads folder that no job references and that are older than
    `UPLOAD_SWEEP_MIN_AGE` (an upload is saved before its job is inserted). Returns their
    names (with `dry_run`, the names that would go). Scheduled daily; safe to run any time."""
    cutoff = timezone.now() - UPLOAD_SWEEP_MIN_AGE
    old = [
        name
        for name in _stored_files(UPLOADS_FOLDER)
        if default_storage.get_modified_time(name) < cutoff
    ]
    if not old:
        return []
    # Read after the listing: a job inserted meanwhile is seen, so its file is kept.
    referenced = set(
        ExtractionJob.objects.exclude(upload="").values_list("upload", flat=True).iterator()
    )
    unreferenced = [name for name in old if name not in referenced]
    if not dry_run:
        for name in unreferenced:
            default_storage.delete(name)
    return unreferenced


def _stored_files(folder: str) -> Iterator[str]:
    if not default_storage.exists(folder):
        return
    folders, files = default_storage.listdir(folder)
    for name in files:
        yield posixpath.join(folder, name)
    for sub in folders:
        yield from _stored_files(posixpath.join(folder, sub))
