"""Creating jobs: one at a time (optionally keyed by the client's Idempotency-Key) or many in
one transaction. A new job is `pending` and due at once; its creating transaction wakes the
dispatcher (`jobtracking.wakeup`), which hands it to a worker as soon as it has committed."""

import contextlib
import functools
import json
import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files import File
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from extraction.models import Extractor
from jobtracking import states
from jobtracking.errors import (
    ActiveJobExistsError,
    ApplicationError,
    ExtractorDisabledError,
    IdempotencyKeyReusedError,
    JobValidationError,
)
from jobtracking.events import job_event_payload
from jobtracking.models import ExtractionJob, JobEvent, JobStatusChange, Priority
from jobtracking.rows import (
    columns,
    insert_fields,
    insert_statement,
    instance,
    json_rows,
    prepared_cursor,
    quote,
    row_set,
    select_rows,
    table,
)
from jobtracking.services.transitions import Actor, active_job_error, holder_error
from jobtracking.wakeup import CHANNEL as WAKE_CHANNEL
from jobtracking.wakeup import NOTIFY_SQL, notify_due
from jobtracking.webhooks import (
    deliveries_fan_out,
    fan_out_statement,
    fan_out_values,
)

logger = logging.getLogger(__name__)

SAFE_EXTENSION = re.compile(r"\.[a-z0-9]{1,10}")


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _validate_new_job(
    *, extractor: Extractor, file_id: str, source_url: str, upload: File | None, options, metadata
) -> None:
    if not extractor.enabled:
        raise ExtractorDisabledError(f"Extractor {extractor.slug} is disabled.")
    problems = {}
    if not file_id.strip():
        problems["file_id"] = "This field is required."
    if bool(source_url) == bool(upload):
        problems["source"] = "Give exactly one of source_url and an uploaded file."
    for name, value, cap in (
        ("options", options, settings.JOBS_OPTIONS_MAX_BYTES),
        ("metadata", metadata, settings.JOBS_METADATA_MAX_BYTES),
    ):
        if not isinstance(value, dict):
            problems[name] = "Must be a JSON object."
        elif _json_size(value) > cap:
            problems[name] = f"Must be at most {cap} bytes as JSON."
    if problems:
        raise JobValidationError(problems)


def job_create(
    *,
    extractor: Extractor,
    file_id: str,
    actor: Actor,
    source_url: str = "",
    upload: File | None = None,
    file_name: str = "",
    content_type: str = "",
    file_size: int | None = None,
    file_sha256: str = "",
    options: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    request_fingerprint: str = "",
    reason: str = "",
    priority: Priority = Priority.NORMAL,
) -> ExtractionJob:
    """Create a `pending` job due now, with its `job.created` audit row and event.

    Refuses a disabled extractor, bad input, and a second active job for the same
    (extractor, file_id) — the last one enforced by the database's partial unique index, so it
    holds under concurrency. Runs in its own transaction (a savepoint inside a caller's).
    """
    options = {} if options is None else options
    metadata = {} if metadata is None else metadata
    _validate_new_job(
        extractor=extractor,
        file_id=file_id,
        source_url=source_url,
        upload=upload,
        options=options,
        metadata=metadata,
    )
    now = timezone.now()
    job = _new_job(
        extractor=extractor,
        actor=actor,
        now=now,
        file_id=file_id,
        file_name=file_name,
        content_type=content_type,
        file_size=file_size,
        file_sha256=file_sha256,
        source_url=source_url,
        options=options,
        metadata=metadata,
        priority=priority,
        idempotency_key=idempotency_key,
        request_fingerprint=request_fingerprint,
    )
    with _upload_stored(job, upload, file_name):
        try:
            inserted = _insert_created([job], actor=actor, reason=reason, now=now)
        except IntegrityError:
            if error := active_job_error(extractor, file_id, viewer=actor.user):
                raise error from None
            raise
        if job.pk not in inserted:
            held = active_job_error(extractor, file_id, viewer=actor.user)
            raise held or _held_meanwhile(extractor, file_id)
    return job


@contextlib.contextmanager
def _upload_stored(job: ExtractionJob, upload: File | None, file_name: str):
    """Saves the upload for `job` under a generated name (`file_name` keeps the client's, which
    may be longer than a file system allows), and deletes it again unless the block completes:
    a refused job (409, an idempotent twin) leaves no file behind. A file left by a caller's
    transaction that rolled back is for `uploads_sweep`."""
    if upload is None:
        yield
        return
    job.upload.save(upload_storage_name(upload.name or file_name), upload, save=False)
    try:
        yield
    except BaseException:
        name = job.upload.name
        try:
            job.upload.delete(save=False)
        except Exception:  # the original error matters more; the sweep retries
            logger.exception("Could not delete the refused upload %s", name)
        raise


def upload_storage_name(client_name: str) -> str:
    """A fresh name for an upload (its folder comes from the field's `upload_to`): a UUID, and
    the client's extension when it is a short plain one."""
    extension = PurePosixPath(client_name).suffix.lower()
    if not SAFE_EXTENSION.fullmatch(extension):
        extension = ""
    return f"{uuid.uuid4().hex}{extension}"


def _replayed_job(
    user: AbstractBaseUser | None, idempotency_key: str, fingerprint: str
) -> ExtractionJob | None:
    job = ExtractionJob.objects.filter(requested_by=user, idempotency_key=idempotency_key).first()
    if job is not None and job.request_fingerprint != fingerprint:
        raise IdempotencyKeyReusedError(
            f"Idempotency-Key {idempotency_key!r} was used for a different request (job {job.id}).",
            job_id=str(job.id),
        )
    return job


def job_create_idempotent(
    *, idempotency_key: str, request_fingerprint: str, actor: Actor, **fields: Any
) -> tuple[ExtractionJob, bool]:
    """`job_create` keyed by the client's Idempotency-Key: the same key with the same request
    returns the original job (created=False); with a different request it is refused
    (`IdempotencyKeyReusedError`). Concurrent twins are settled by the unique constraint."""
    if existing := _replayed_job(actor.user, idempotency_key, request_fingerprint):
        return existing, False
    try:
        job = job_create(
            actor=actor,
            idempotency_key=idempotency_key,
            request_fingerprint=request_fingerprint,
            **fields,
        )
    except IntegrityError:
        if existing := _replayed_job(actor.user, idempotency_key, request_fingerprint):
            return existing, False
        raise
    return job, True


@dataclass(frozen=True)
class BulkOutcome:
    index: int
    job: ExtractionJob | None = None
    error: ApplicationError | None = None


def job_create_many(*, items: list[dict[str, Any]], actor: Actor) -> list[BulkOutcome]:
    """Create many validated jobs (each a dict of `job_create` fields with a URL source) in one
    transaction and a handful of queries. Items whose file an active job holds (stored, or an
    earlier item of the batch) get an `ActiveJobExistsError` outcome; the others are created.
    The dispatcher picks the new jobs up (they are due now) at once. Items without a priority
    are `bulk`."""
    items = [{"priority": Priority.BULK, **item} for item in items]
    now = timezone.now()
    keys = [(item["extractor"].pk, item["file_id"]) for item in items]
    # On PostgreSQL the insert itself leaves out a job whose file an active job holds (its
    # ON CONFLICT, on the unique index it updates anyway); elsewhere they are looked for first.
    holders = {} if connection.vendor == "postgresql" else _active_holders(set(keys))
    first: dict[tuple, tuple[int, ExtractionJob]] = {}  # each file's first item and its job
    for index, (item, key) in enumerate(zip(items, keys, strict=True)):
        if key not in holders and key not in first:
            first[key] = (index, _new_job(actor=actor, now=now, **item))
    jobs = [job for _index, job in first.values()]
    try:
        inserted = _insert_created(jobs, actor=actor, reason="Bulk create", now=now)
    except IntegrityError:
        # A concurrent request made one of these files active meanwhile: one savepoint each.
        return [_create_one(index, item, actor) for index, item in enumerate(items)]
    holders |= {key: job for key, (_index, job) in first.items() if job.pk in inserted}
    if missing := set(keys) - holders.keys():
        holders |= _active_holders(missing)
    outcomes = []
    for index, (item, key) in enumerate(zip(items, keys, strict=True)):
        first_index, job = first.get(key, (None, None))
        if first_index == index and job.pk in inserted:
            outcomes.append(BulkOutcome(index, job=job))
        else:
            outcomes.append(BulkOutcome(index, error=_held(item, holders.get(key), actor)))
    return outcomes


def _active_holders(keys: set[tuple]) -> dict[tuple, ExtractionJob]:
    """The active job holding each of these (extractor id, file id) that one holds."""
    active = ExtractionJob.objects.filter(
        status__in=states.ACTIVE,
        extractor_id__in={key[0] for key in keys},
        file_id__in={key[1] for key in keys},
    ).only("id", "status", "requested_by", "extractor_id", "file_id")
    return {
        (job.extractor_id, job.file_id): job
        for job in active.order_by()
        if (job.extractor_id, job.file_id) in keys
    }


def _held(item: dict[str, Any], holder: ExtractionJob | None, actor: Actor):
    extractor, file_id = item["extractor"], item["file_id"]
    if holder is None:
        return _held_meanwhile(extractor, file_id)
    return holder_error(extractor, file_id, holder, viewer=actor.user)


def _held_meanwhile(extractor: Extractor, file_id: str) -> ActiveJobExistsError:
    """The file's active job ended between the insert that it held off and the look-up."""
    return ActiveJobExistsError(
        f"Another job was active for file {file_id} on {extractor.slug} a moment ago; "
        "send the request again."
    )


def _new_job(*, extractor: Extractor, actor: Actor, now, **fields: Any) -> ExtractionJob:
    """A new job, `pending` and due now, with the extractor and requester its representation
    and events read already attached."""
    job = instance(
        ExtractionJob,
        extractor_id=extractor.pk,
        requested_by_id=actor.user_id,
        status_id=states.PENDING,
        created_at=now,
        due_at=now,
        deadline_at=now + extractor.max_duration,
        **fields,
    )
    # As `job.extractor = extractor` leaves them, without its checks (a bulk create's 500).
    ExtractionJob.extractor.field.set_cached_value(job, extractor)
    ExtractionJob.requested_by.field.set_cached_value(job, actor.user)
    return job


def _create_one(index: int, item: dict[str, Any], actor: Actor) -> BulkOutcome:
    try:
        return BulkOutcome(index, job=job_create(actor=actor, reason="Bulk create", **item))
    except ApplicationError as error:
        return BulkOutcome(index, error=error)


def _insert_created(jobs: list[ExtractionJob], *, actor: Actor, reason: str, now) -> set:
    """The jobs, their audit rows and `job.created` events, their webhook deliveries and the
    dispatcher's wake-up, all or nothing; the ids of the jobs inserted. On PostgreSQL that is
    one statement (`created_rows_statement`): one round trip, with no BEGIN and COMMIT of its
    own outside a transaction, where the ORM took seven; it leaves out (with their rows) the
    jobs whose file an active job holds. Elsewhere such a job raises IntegrityError. Inside a
    caller's transaction, a savepoint keeps a conflict from spoiling it."""
    if not jobs:
        return set()
    # The audit row every new job gets; only the job differs.
    change = {
        "to_status_id": states.PENDING,
        "attempt": 1,
        "changed_at": now,
        "actor_type": actor.type,
        "actor_id": actor.user_id,
        "reason": reason,
        "details": actor.details,
    }
    events = [
        instance(
            JobEvent,
            job_id=job.pk,
            type=states.EVENT_CREATED,
            payload=job_event_payload(job),
            created_at=now,
        )
        for job in jobs
    ]
    if connection.vendor != "postgresql":
        with transaction.atomic():
            ExtractionJob.objects.bulk_create(jobs)
            JobStatusChange.objects.bulk_create(
                instance(JobStatusChange, job_id=job.pk, **change) for job in jobs
            )
            deliveries_fan_out(JobEvent.objects.bulk_create(events))
            notify_due()
        return {job.pk for job in jobs}
    job_rows = row_set(jobs, insert_fields(ExtractionJob))
    event_rows = row_set(events, insert_fields(JobEvent))
    params = [
        job_rows.rows,
        job_rows.shared,
        json_rows([instance(JobStatusChange, **change)], _change_value_fields()),
        event_rows.rows,
        event_rows.shared,
        fan_out_values(now),
        WAKE_CHANNEL,
    ]
    atomic = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    with atomic, prepared_cursor() as cursor:
        cursor.execute(created_rows_statement(job_rows.own, event_rows.own), params)
        inserted, _woken = cursor.fetchone()
    return set(inserted)


def _change_value_fields() -> tuple:
    return insert_fields(JobStatusChange, exclude=("job",))


@functools.cache
def created_rows_statement(job_fields: tuple, event_fields: tuple) -> str:
    """One statement that inserts every row a creation writes and returns the new jobs' ids.
    A job whose file an active job holds is left out, and its audit row and event with it.
    Its CTEs all see the same snapshot; the foreign keys between them are checked at the end,
    when every row is there. Its parameters: the jobs (a `RowSet` whose
    own fields are `job_fields`), the audit row they share (each job gets a copy), the events
    (a `RowSet` with `event_fields`), the deliveries' values (`fan_out_values`) and the
    dispatcher's channel."""
    fields = _change_value_fields()
    job_column = JobStatusChange._meta.get_field("job").column
    new_jobs = insert_statement(
        ExtractionJob,
        job_fields,
        on_conflict=_active_file_conflict(),
        returning="id, requested_by_id",
    )
    new_events = insert_statement(
        JobEvent,
        event_fields,
        where=f"{quote(job_column)} IN (SELECT id FROM new_jobs)",
        returning="id, type, job_id",
    )
    return (
        f"WITH new_jobs AS ({new_jobs}), "
        f"new_changes AS (INSERT INTO {table(JobStatusChange)} ({job_column}, {columns(fields)}) "
        f"SELECT j.id, c.* FROM new_jobs j CROSS JOIN ({select_rows(JobStatusChange, fields)}) c), "
        f"new_events AS ({new_events}), "
        f"new_deliveries AS ({fan_out_statement('new_events', 'new_jobs')}), "
        f"woken AS ({NOTIFY_SQL}) "
        # (`new_deliveries` runs unreferenced, as every data-modifying CTE does; `woken` is
        # a SELECT, so it runs only if referenced.)
        "SELECT ARRAY(SELECT id FROM new_jobs), (SELECT count(*) FROM woken)"
    )


def _active_file_conflict() -> str:
    """ON CONFLICT on `job_one_active_per_file` (a partial unique index, so named by its columns
    and condition): the job is not inserted."""
    meta = ExtractionJob._meta
    statuses = ", ".join(f"'{status}'" for status in sorted(states.ACTIVE))
    return (
        f"({quote(meta.get_field('extractor').column)}, {quote(meta.get_field('file_id').column)}) "
        f"WHERE {quote(meta.get_field('status').column)} IN ({statuses}) DO NOTHING"
    )
