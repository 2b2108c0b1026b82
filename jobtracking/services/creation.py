"""Creating jobs: one at a time (optionally keyed by the client's Idempotency-Key) or many in
one transaction. A new job is `pending` and due at once; its creating transaction wakes the
dispatcher (`jobtracking.infra.wakeup`), which hands it to a worker as soon as it has committed."""

import contextlib
import dataclasses
import functools
import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.files import File
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from extraction.models import Extractor
from jobtracking import states
from jobtracking.audit import chain_change
from jobtracking.errors import (
    ActiveJobExistsError,
    ApplicationError,
    ExtractorDisabledError,
    IdempotencyKeyReusedError,
    JobValidationError,
)
from jobtracking.events import job_event_payload
from jobtracking.infra import tracing
from jobtracking.infra.files import (
    DigestingFile,
    file_name_from_url,
    readable_file_name,
    stored_sha256,
)
from jobtracking.infra.pages import known_pages
from jobtracking.infra.rows import (
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
from jobtracking.infra.wakeup import CHANNEL as WAKE_CHANNEL
from jobtracking.infra.wakeup import NOTIFY_SQL, notify_due
from jobtracking.models import Batch, ExtractionJob, JobEvent, JobStatusChange, Priority
from jobtracking.services.budgets import budget_refusal
from jobtracking.services.deliveries import deliveries_fan_out, fan_out_statement, fan_out_values
from jobtracking.services.transitions import Actor, active_job_error, holder_error

logger = logging.getLogger(__name__)

SAFE_EXTENSION = re.compile(r"\.[a-z0-9]{1,10}")


@dataclass(frozen=True, kw_only=True)
class NewJob:
    """What a creator gives for a new job: the one input of every create (API, commands,
    benchmarks). Each field is the model field of its name; a client-supplied field is added
    here, to the model, to the create serializer and to the representation
    (`tests/jobtracking/services/test_new_job_fields.py` fails when they disagree)."""

    extractor: Extractor
    file_id: str
    source_url: str = ""
    upload: File | None = None
    file_name: str = ""
    content_type: str = ""
    file_size: int | None = None
    file_sha256: str = ""
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    # False: call the extractor even where an identical document's result could be reused.
    reuse_result: bool = True
    priority: Priority | None = None  # None: the create's default (`job_create_many`)
    # From the request's Idempotency-Key header, not its body (`job_create_idempotent`).
    idempotency_key: str | None = None
    request_fingerprint: str = ""

    def problems(self) -> dict[str, str]:
        """What makes this no job, by field: the rules of a job's shape, which the create
        serializer reports too (its `validate`) so that clients see them as field errors."""
        problems = {}
        if not self.file_id.strip():
            problems["file_id"] = "This field is required."
        if bool(self.source_url) == bool(self.upload):
            problems["source_url"] = "Give exactly one of source_url and file."
        return problems


NEW_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(NewJob))


def _checked(new: NewJob) -> None:
    if not new.extractor.enabled:  # it may have been disabled since the request was validated
        raise ExtractorDisabledError(f"Extractor {new.extractor.slug} is disabled.")
    if problems := new.problems():
        raise JobValidationError(problems)


def job_create(new: NewJob, *, actor: Actor, reason: str = "") -> ExtractionJob:
    """Create a `pending` job due now, with its `job.created` audit row and event: the one-item
    form of `job_create_many`, raising its item's error.

    Refuses a disabled extractor, a job of the wrong shape, and a second active job for the
    same (extractor, file_id) — the last one enforced by the database's partial unique index,
    so it holds under concurrency. Runs in its own transaction (a savepoint inside a caller's).
    """
    (outcome,) = job_create_many(
        [new], actor=actor, reason=reason, default_priority=Priority.NORMAL
    )
    if outcome.error is not None:
        raise outcome.error
    return outcome.job


def upload_storage_name(client_name: str) -> str:
    """A fresh name for an upload (its folder comes from the field's `upload_to`): a UUID, and
    the client's extension when it is a short plain one."""
    extension = PurePosixPath(client_name).suffix.lower()
    if not SAFE_EXTENSION.fullmatch(extension):
        extension = ""
    return f"{uuid.uuid4().hex}{extension}"


@contextlib.contextmanager
def _uploads_stored(uploads: list[tuple[int, ExtractionJob, File]]):
    """Saves each job's upload under a generated name (`file_name` keeps the client's, which may
    be longer than a file system allows), taking its SHA-256 as it is written, and deletes them
    again unless the block completes. Yields the refusals, by item index, of uploads whose
    digest is not the one their client declared (their files are the caller's to delete). Each
    job learns the pages it is known to have (`infra.pages`), which its client's budget counts. A
    file left by a caller's transaction that rolled back is for `sweep_uploads`."""
    stored, mismatched = [], {}
    try:
        for index, job, upload in uploads:
            content = DigestingFile(upload)
            job.upload.save(upload_storage_name(upload.name or job.file_name), content, save=False)
            stored.append(job)
            digest = content.sha256() or stored_sha256(job.upload)
            if job.file_sha256 and job.file_sha256 != digest:
                mismatched[index] = JobValidationError(
                    {"file_sha256": f"The file's SHA-256 is {digest}, not {job.file_sha256}."}
                )
            job.file_sha256 = digest
            job.expected_pages = known_pages(upload, job.content_type)
        yield mismatched
    except BaseException:
        _delete_uploads(stored)
        raise


def _delete_uploads(jobs: list[ExtractionJob]) -> None:
    for job in jobs:
        name = job.upload.name
        try:
            job.upload.delete(save=False)
        except Exception:  # the refusal matters more; the sweep retries
            logger.exception("Could not delete the refused upload %s", name)


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
    new: NewJob, *, actor: Actor, reason: str = ""
) -> tuple[ExtractionJob, bool]:
    """`job_create` keyed by the client's Idempotency-Key (`new.idempotency_key`): the same key
    with the same request returns the original job (created=False); with a different request
    it is refused (`IdempotencyKeyReusedError`). Concurrent twins all get the job the first of
    them created."""
    replayed = functools.partial(
        _replayed_job, actor.user, new.idempotency_key, new.request_fingerprint
    )
    if existing := replayed():
        return existing, False
    try:
        job = job_create(new, actor=actor, reason=reason)
    except (IntegrityError, ActiveJobExistsError):
        # A twin that looked before the first committed loses its insert to one of two unique
        # indexes: the key's (IntegrityError) or, while the job is active, the file's, whose
        # ON CONFLICT waits for the first to commit and then reports the active job. Either
        # way the first's row is committed, so looking again finds it. (Chosen over an
        # advisory lock taken before the look-up: that would cost every keyed create a
        # transaction and a statement, for a race that only twins run.)
        if existing := replayed():
            return existing, False
        raise
    return job, True


@dataclass(frozen=True)
class BulkOutcome:
    index: int
    job: ExtractionJob | None = None
    error: ApplicationError | None = None


def job_create_many(
    items: list[NewJob],
    *,
    actor: Actor,
    reason: str = "Bulk create",
    default_priority: Priority = Priority.BULK,
    batch: Batch | None = None,
) -> list[BulkOutcome]:
    """Create many jobs in one transaction and a handful of queries (one statement on
    PostgreSQL), an outcome per item. Items whose file an active job holds (stored, or an
    earlier item's) get an `ActiveJobExistsError` outcome, items of the wrong shape their
    error; the others are created. The dispatcher picks the new jobs up (they are due now) at
    once. Items without a priority get `default_priority`. The jobs belong to `batch` if given
    (the caller checked that it is open: `services.batches`)."""
    with tracing.span("jobs.create", attributes={"jobs.requested": len(items)}) as span:
        outcomes = _create_many(items, actor, reason, default_priority, batch)
        if span.is_recording():
            created = [str(outcome.job.pk) for outcome in outcomes if outcome.job is not None]
            span.set_attribute("jobs.created", len(created))
            if len(created) == 1:
                span.set_attribute("job.id", created[0])
    return outcomes


def _create_many(items, actor, reason, default_priority, batch) -> list[BulkOutcome]:
    budget_refusal(actor.user_id, {new.extractor.pk for new in items})
    now = timezone.now()
    # The trace every later step of these jobs joins: the create span's.
    traceparent = tracing.current_traceparent()
    keys = [(new.extractor.pk, new.file_id) for new in items]
    # On PostgreSQL the insert itself leaves out a job whose file an active job holds (its
    # ON CONFLICT, on the unique index it updates anyway); elsewhere they are looked for first.
    holders = {} if connection.vendor == "postgresql" else _active_holders(set(keys))
    refused, first = _planned(
        items,
        keys,
        holders,
        lambda new: _new_job(
            new,
            actor=actor,
            now=now,
            priority=default_priority,
            batch=batch,
            traceparent=traceparent,
        ),
    )
    uploads = [
        (index, job, items[index].upload) for index, job in first.values() if items[index].upload
    ]
    try:
        with _uploads_stored(uploads) as mismatched:
            refused |= mismatched
            jobs = [job for index, job in first.values() if index not in mismatched]
            inserted = _insert_created(jobs, actor=actor, reason=reason, now=now)
    except IntegrityError:
        if len(items) == 1 and (error := active_job_error(*_file(items[0]), viewer=actor.user)):
            return [BulkOutcome(0, error=error)]
        if len(items) == 1:
            raise
        # A concurrent request made one of these files active meanwhile: one savepoint each.
        return [
            BulkOutcome(index, error=refused[index])
            if index in refused
            else _create_one(index, new, actor, reason, default_priority, batch)
            for index, new in enumerate(items)
        ]
    _delete_uploads([job for _index, job, _upload in uploads if job.pk not in inserted])
    holders |= {key: job for key, (_index, job) in first.items() if job.pk in inserted}
    if missing := {key for index, key in enumerate(keys) if index not in refused} - holders.keys():
        holders |= _active_holders(missing)
    return _outcomes(items, keys, refused, first, inserted, holders, actor)


def _planned(items, keys, holders, new_job) -> tuple[dict[int, ApplicationError], dict]:
    """The items refused for their shape, by index; and each file's first item with its new
    job, by file key, unless a stored active job (`holders`) holds the file."""
    refused: dict[int, ApplicationError] = {}
    first: dict[tuple, tuple[int, ExtractionJob]] = {}
    for index, (new, key) in enumerate(zip(items, keys, strict=True)):
        try:
            _checked(new)
        except ApplicationError as error:
            refused[index] = error
            continue
        if key not in holders and key not in first:
            first[key] = (index, new_job(new))
    return refused, first


def _outcomes(items, keys, refused, first, inserted, holders, actor) -> list[BulkOutcome]:
    """Each item's outcome: refused, created (its file's first item, inserted), or held by
    the file's active job."""
    outcomes = []
    for index, (new, key) in enumerate(zip(items, keys, strict=True)):
        first_index, job = first.get(key, (None, None))
        if index in refused:
            outcomes.append(BulkOutcome(index, error=refused[index]))
        elif first_index == index and job.pk in inserted:
            outcomes.append(BulkOutcome(index, job=job))
        else:
            outcomes.append(BulkOutcome(index, error=_held(new, holders.get(key), actor)))
    return outcomes


def _file(new: NewJob) -> tuple[Extractor, str]:
    return new.extractor, new.file_id


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


def _held(new: NewJob, holder: ExtractionJob | None, actor: Actor):
    if holder is None:
        return _held_meanwhile(*_file(new))
    return holder_error(*_file(new), holder, viewer=actor.user)


def _held_meanwhile(extractor: Extractor, file_id: str) -> ActiveJobExistsError:
    """The file's active job ended between the insert that it held off and the look-up."""
    return ActiveJobExistsError(
        f"Another job was active for file {file_id} on {extractor.slug} a moment ago; "
        "send the request again."
    )


def _new_job(
    new: NewJob,
    *,
    actor: Actor,
    now,
    priority: Priority,
    batch: Batch | None = None,
    traceparent: str = "",
) -> ExtractionJob:
    """A new job, `pending` and due now, with the extractor and requester its representation
    and events read already attached (its upload is stored later, `_uploads_stored`)."""
    values = {name: getattr(new, name) for name in NEW_JOB_FIELDS}
    del values["extractor"], values["upload"]
    values["file_name"] = implied_file_name(new)
    if new.priority is None:
        values["priority"] = priority
    job = instance(
        ExtractionJob,
        extractor_id=new.extractor.pk,
        requested_by_id=actor.user_id,
        batch_id=batch.pk if batch is not None else None,
        status_id=states.PENDING,
        created_at=now,
        due_at=now,
        deadline_at=now + new.extractor.max_duration,
        traceparent=traceparent,
        **values,
    )
    # As `job.extractor = extractor` leaves them, without its checks (a bulk create's 500).
    ExtractionJob.extractor.field.set_cached_value(job, new.extractor)
    ExtractionJob.requested_by.field.set_cached_value(job, actor.user)
    return job


def implied_file_name(new: NewJob) -> str:
    """The client's file name, or else the upload's or the URL's, so that every job shows one
    (`…/budget.csv` reads "budget.csv", not "—")."""
    if new.file_name:
        return new.file_name
    if new.upload is not None:
        return readable_file_name(new.upload.name or "")
    return file_name_from_url(new.source_url)


def _create_one(
    index: int, new: NewJob, actor: Actor, reason: str, priority, batch: Batch | None
) -> BulkOutcome:
    """One item in a savepoint of its own (`_insert_created`)."""
    (outcome,) = job_create_many(
        [new], actor=actor, reason=reason, default_priority=priority, batch=batch
    )
    return dataclasses.replace(outcome, index=index)


def _insert_created(jobs: list[ExtractionJob], *, actor: Actor, reason: str, now) -> set:
    """The jobs, their audit rows and `job.created` events, their webhook deliveries and the
    dispatcher's wake-up, all or nothing; the ids of the jobs inserted. On PostgreSQL that is
    one statement (`created_rows_statement`): one round trip, with no BEGIN and COMMIT of its
    own outside a transaction, where the ORM took seven; it leaves out (with their rows) the
    jobs whose file an active job holds. Elsewhere such a job raises IntegrityError. Inside a
    caller's transaction, a savepoint keeps a conflict from spoiling it."""
    if not jobs:
        return set()
    # The audit row every new job gets; only the job (and so its hash) differs.
    change = {
        "to_status_id": states.PENDING,
        "attempt": 1,
        "changed_at": now,
        "actor_type": actor.type,
        "actor_id": actor.user_id,
        "reason": reason,
        "details": actor.details,
    }
    changes = [instance(JobStatusChange, job_id=job.pk, **change) for job in jobs]
    for job, job_change in zip(jobs, changes, strict=True):
        chain_change(job_change, job)  # the first link: the job's head is its hash
    if connection.vendor != "postgresql":
        with transaction.atomic():
            ExtractionJob.objects.bulk_create(jobs)
            JobStatusChange.objects.bulk_create(changes)
            deliveries_fan_out(JobEvent.objects.bulk_create(_created_events(jobs, now)), now)
            notify_due()
        return {job.pk for job in jobs}
    job_rows = row_set(jobs, insert_fields(ExtractionJob))
    event_rows = row_set(_created_events(jobs, now), insert_fields(JobEvent))
    params = [
        job_rows.rows,
        job_rows.shared,
        # The audit row they share: any job's (the first's), but for its job and hash.
        json_rows(changes[:1], _change_value_fields()),
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


def _created_events(jobs: list[ExtractionJob], now) -> list[JobEvent]:
    """The jobs' `job.created` events, made once their rows are (whose `updated_at` is stamped
    then), so that each payload is the job as it is stored."""
    return [
        instance(
            JobEvent,
            job_id=job.pk,
            type=states.EVENT_CREATED,
            payload=job_event_payload(job),
            created_at=now,
        )
        for job in jobs
    ]


def _change_value_fields() -> tuple:
    """The audit row's values that every new job's row shares: all but its job and hash."""
    return insert_fields(JobStatusChange, exclude=("job", "hash"))


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
    meta = JobStatusChange._meta
    job_column, hash_column = meta.get_field("job").column, meta.get_field("hash").column
    new_jobs = insert_statement(
        ExtractionJob,
        job_fields,
        on_conflict=_active_file_conflict(),
        returning="id, requested_by_id, audit_head",
    )
    new_events = insert_statement(
        JobEvent,
        event_fields,
        where=f"{quote(job_column)} IN (SELECT id FROM new_jobs)",
        returning="id, type, job_id",
    )
    return (
        f"WITH new_jobs AS ({new_jobs}), "
        f"new_changes AS (INSERT INTO {table(JobStatusChange)} "
        f"({job_column}, {hash_column}, {columns(fields)}) "
        f"SELECT j.id, j.audit_head, c.* FROM new_jobs j "
        f"CROSS JOIN ({select_rows(JobStatusChange, fields)}) c), "
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
