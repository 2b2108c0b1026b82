"""A batch's events, and `batch.completed`: published exactly once per completion, when the
last job of a closed batch has ended (or when a batch whose jobs have all ended is closed).

Why it is neither missed nor doubled, under READ COMMITTED:

- A job's transition never reads or locks its batch's row. Once the transaction that ended a
  batch's job (or closed the batch) has committed, `batches_complete` runs one conditional
  UPDATE in a transaction of its own: `completed_at = now WHERE closed, not cancelled, not yet
  completed AND NOT EXISTS (an active job of it)`.
- Not missed: of the changes that complete a batch (its last jobs ending, its closing), one
  commits last, and its check starts after that commit, so its snapshot sees every one of
  them. Checking inside the transaction instead would miss: two last jobs ending together each
  see the other still active.
- Not doubled: when two checks both see the batch complete, the second UPDATE waits for the
  first's row lock and then re-evaluates its WHERE on the row as the first left it:
  `completed_at` is set, so it updates nothing and publishes nothing. The event is written in
  the UPDATE's transaction, so it exists exactly when `completed_at` was set.
- The row is locked only at that moment, once per completion; a job's transition never waits
  for it. A process killed between its commit and its check leaves the completion to the
  safety net (`batches_complete_due`, run with `reap_stuck_jobs`), which runs the same UPDATE.
- Requeueing a job of a completed (or cancelled) batch reopens it (`batches_reopen`, in the
  requeue's transaction), so its next completion is published too. A requeue racing a check
  is caught either way: the requeue's write to the row waits for the check's lock and then
  clears what the check recorded, or it committed first and the check, looking again for
  active jobs once it holds the row (a fresh snapshot), sees the requeued job and records
  nothing."""

from collections.abc import Collection
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from jobtracking import states
from jobtracking.events import batch_event_payload
from jobtracking.infra.rows import quote, table
from jobtracking.models import Batch, ExtractionJob, JobEvent
from jobtracking.selectors import batch_has_jobs, batch_summary
from jobtracking.services.deliveries import deliveries_fan_out


def batch_events_write(batches: Collection[Batch], event_type: str) -> list[JobEvent]:
    """Write one `event_type` event per batch to the outbox, with its webhook deliveries. Call
    in the transaction that makes the change the events describe."""
    now = timezone.now()
    events = JobEvent.objects.bulk_create(
        JobEvent(
            batch=batch,
            type=event_type,
            payload=batch_event_payload(batch, batch_summary(batch)),
            created_at=now,
        )
        for batch in batches
    )
    deliveries_fan_out(events)
    return events


def _completion_statement() -> str:
    batch, job = Batch._meta, ExtractionJob._meta
    active = ", ".join(f"'{status}'" for status in sorted(states.ACTIVE))
    column = {name: quote(batch.get_field(name).column) for name in ("closed_at", "completed_at")}
    return (
        f"UPDATE {table(Batch)} SET {column['completed_at']} = %s "
        f"WHERE {quote(batch.pk.column)} = %s AND {column['closed_at']} IS NOT NULL "
        f"AND {column['completed_at']} IS NULL "
        f"AND {quote(batch.get_field('cancelled_at').column)} IS NULL "
        f"AND NOT EXISTS (SELECT 1 FROM {table(ExtractionJob)} j "
        f"WHERE j.{quote(job.get_field('batch').column)} = {table(Batch)}.{quote(batch.pk.column)} "
        f"AND j.{quote(job.get_field('status').column)} IN ({active}))"
    )


def batches_complete(batch_ids: Collection[UUID]) -> list[UUID]:
    """Record and publish the completion of those of `batch_ids` that are complete now (see
    the module docstring); returns their ids. Call after the commit of the change that may have
    completed them, outside any transaction; idempotent, each batch in its own short
    transaction."""
    completed = []
    statement = _completion_statement()
    for pk in sorted(set(batch_ids)):
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    statement, [timezone.now(), Batch._meta.pk.get_db_prep_value(pk, connection)]
                )
                if cursor.rowcount != 1:
                    continue
            # Looked at again, holding the row, in a statement of its own (a fresh snapshot):
            # a requeue that committed after the UPDATE's snapshot was taken is seen here.
            if ExtractionJob.objects.filter(batch_id=pk, status__in=sorted(states.ACTIVE)).exists():
                transaction.set_rollback(True)
                continue
            batch = Batch.objects.select_related("requested_by").get(pk=pk)
            batch_events_write([batch], states.BATCH_COMPLETED)
            completed.append(pk)
    return completed


def batches_complete_on_commit(batch_ids: Collection[UUID]) -> None:
    """Check these batches' completion once the current transaction has committed. Robust: a
    check that fails is logged and left to the safety net; it never fails the caller, whose
    change has committed."""
    if batch_ids:
        ids = frozenset(batch_ids)
        transaction.on_commit(lambda: batches_complete(ids), robust=True)


def batches_complete_due(limit: int = 1000) -> int:
    """The safety net: complete the closed batches whose completion nobody recorded (a process
    died between a job's last transition and its check). Returns how many it completed."""
    waiting = Batch.objects.filter(
        closed_at__isnull=False, completed_at__isnull=True, cancelled_at__isnull=True
    ).exclude(batch_has_jobs(states.ACTIVE))
    return len(batches_complete(list(waiting.values_list("pk", flat=True)[:limit])))


def batches_reopen(batch_ids: Collection[UUID]) -> None:
    """A job of these batches runs again: a completed or cancelled one is neither any more,
    and will complete (and say so) again. In the requeue's own transaction, and always
    written, even when not completed yet: the write waits for a completion check holding the
    row, so that either the check's second look sees the requeued job, or this clears the
    completion it recorded."""
    Batch.objects.filter(pk__in=list(batch_ids)).update(completed_at=None, cancelled_at=None)
