"""Archive before purge: each purged job's full record (the job, every attempt's status changes,
its results and their files, its events and a summary of its deliveries) is written to the
"archive" storage, and a manifest confirms it, before the purge deletes the job.

Layout (docs/archive.md): `jobs/YYYY/MM/DD/<run>-<part>.jsonl.gz` plus its
`<run>-<part>.manifest.json`, by the job's creation day: ids are UUIDv7 and the purge walks them
in order, so one chunk of the purge lands in one day (or two) and a day's files sit together;
and a job's id alone says which folder holds it. A run's day is written in parts, one per chunk
of the purge, each with its own manifest, so that a chunk's jobs are deleted as soon as their own
file is confirmed, never held until the rest of the day is written.

PostgreSQL serialises each row whole (`row_to_json`), so a column added later (the audit
hashes, say) is archived without a change here. The jobs, and each kind of child aggregated to
one JSON array per job, are read in job id order through server-side cursors and merged, a few
hundred rows in memory at a time; each record is put together from their JSON texts as they
are."""

import functools
import secrets
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import orjson
from django.core.files.storage import storages
from django.db import connection, models
from django.utils import timezone

from jobtracking.infra.archive_storage import (
    ARCHIVE_STORAGE,
    ArchiveError,
    LinesWriter,
    StoredFile,
    copy_file,
    save_json,
)
from jobtracking.infra.rows import (
    array_literal,
    prepared_cursor,
    quote,
    table,
)
from jobtracking.models import (
    ArchivedJob,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    WebhookDelivery,
)

ARCHIVE_FORMAT = 2
STREAM_ROWS = 500
# Each job's children: key in the record, model, order within the job.
CHILDREN = (
    ("status_changes", JobStatusChange, ("changed_at", "id")),
    ("results", ExtractionResult, ("attempt",)),
    ("events", JobEvent, ("id",)),
)


@dataclass
class ArchiveRun:
    """One purge run: its id names its files; each chunk is one more part."""

    id: str = field(
        default_factory=lambda: f"{timezone.now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    )
    parts: int = 0


@dataclass
class _DayPart:
    writer: LinesWriter = field(default_factory=LinesWriter)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    attachments: list[StoredFile] = field(default_factory=list)
    records: list[tuple] = field(default_factory=list)  # (job id, line, byte offset)


@dataclass(frozen=True)
class ArchivedPart:
    """A written and confirmed part: where each of its jobs' records is."""

    path: str
    manifest: str
    archived_at: datetime
    records: list[tuple]  # (job id, line, byte offset)


def archived_jobs_insert(parts: list[ArchivedPart]) -> None:
    """The index rows of these parts' jobs, one statement a part: the rest of each row is taken
    from its job's (`INDEXED`), so call it before the jobs are deleted."""
    with prepared_cursor() as cursor:
        for part in parts:
            job_ids, lines, offsets = zip(*part.records, strict=True)
            cursor.execute(
                _index_insert_sql(),
                [
                    *(ARCHIVE_STORAGE, part.path, part.manifest, part.archived_at),
                    *map(array_literal, (job_ids, lines, offsets)),
                ],
            )


def jobs_archive(*, job_ids: list, run: ArchiveRun) -> list[ArchivedPart]:
    """Write these jobs' records, one file and one manifest per creation day, each read back and
    checked (`ArchiveError` otherwise: then nothing may be deleted). Returns the parts, for the
    index (`archived_jobs_insert`): the caller writes it in the transaction that deletes the
    jobs, so the index lists exactly the purged jobs. Call it with the jobs locked, so the
    record is what is deleted."""
    if connection.vendor != "postgresql":
        raise ArchiveError("The archive needs PostgreSQL (set JOBS_ARCHIVE_BEFORE_PURGE=0).")
    run.parts += 1
    days: dict[date, _DayPart] = {}
    ids = [array_literal(job_ids)]
    with _Streams() as streams:
        jobs = streams.open(_job_rows_sql(), ids)
        children = {
            key: _PerJob(streams.open(_rows_sql(model, order), ids))
            for key, model, order in CHILDREN
        }
        deliveries = _PerJob(streams.open(_deliveries_sql(), ids))
        for job_id, created_at, has_files, job_json in jobs:
            day = created_at.astimezone(UTC).date()
            if (part := days.get(day)) is None:  # (a part opens a spooled file: once a day)
                part = days[day] = _DayPart()
            record = _record(job_id, (has_files, job_json), children, deliveries, part, day)
            line, offset = part.writer.add(record.encode())
            part.records.append((job_id, line, offset))
    now = timezone.now()
    written = []
    for day, part in sorted(days.items()):
        name = f"jobs/{day:%Y/%m/%d}/{run.id}-{run.parts:05d}"
        stored = part.writer.save(f"{name}.jsonl.gz")
        manifest = save_json(f"{name}.manifest.json", _manifest(run, day, stored, part, now))
        written.append(ArchivedPart(stored.path, manifest.path, now, part.records))
    return written


def _record(
    job_id,
    job_row: tuple[bool, str],
    children: dict[str, "_PerJob"],
    deliveries: "_PerJob",
    part: _DayPart,
    day: date,
) -> str:
    """One job's record, put together from its rows' JSON texts, counted in its part."""
    files = f"jobs/{day:%Y/%m/%d}/files"
    record = [f'{{"archive_format":{ARCHIVE_FORMAT},"job":']
    record.append(_with_files(ExtractionJob, *job_row, files, part.attachments))
    part.counts["jobs"] += 1
    for key, model, _order in CHILDREN:
        count, has_files, rows = children[key].get(job_id) or (0, False, "[]")
        part.counts[key] += count
        record += [f',"{key}":', _with_files(model, has_files, rows, files, part.attachments)]
    count, summary = deliveries.get(job_id) or (0, "{}")
    part.counts["deliveries"] += count
    record += [',"deliveries":', summary, "}"]
    return "".join(record)


# The index's fields taken from the job's row: what a purged job is found by and shown with.
INDEXED = {
    "file_id": "file_id",
    "external_job_id": "external_job_id",
    "requested_by": "requested_by",
    "status": "status",
    "created_at": "created_at",
    "completed_at": "completed_at",
}


@functools.cache
def _index_insert_sql() -> str:
    """Parameters: storage, path, manifest, archived at; arrays of job ids, lines, offsets."""
    index, job = ArchivedJob._meta, ExtractionJob._meta
    own = [quote(index.get_field(name).column) for name in INDEXED]
    taken = [f"j.{quote(job.get_field(name).column)}" for name in INDEXED.values()]
    given = ("storage", "path", "manifest", "archived_at", "job_id", "line", "offset")
    return (
        f"INSERT INTO {table(ArchivedJob)} ({', '.join(own)}, "
        f"{', '.join(quote(index.get_field(name).column) for name in given)}) "
        f"SELECT {', '.join(taken)}, %s, %s, %s, %s, r.job_id, r.line, r.byte "
        "FROM unnest(%s::uuid[], %s::int[], %s::bigint[]) AS r(job_id, line, byte) "
        f"JOIN {table(ExtractionJob)} j ON j.{quote(job.pk.column)} = r.job_id"
    )


class _Streams:
    """Server-side cursors on the connection, in its transaction: each query's rows arrive a
    few hundred at a time, whatever the chunk's size."""

    def __enter__(self) -> "_Streams":
        with connection.cursor() as cursor:
            # Each query is read to its end: plan for all its rows, not the first tenth (a
            # cursor's default would walk a whole index in job order rather than look ids up).
            cursor.execute("SET LOCAL cursor_tuple_fraction = 1.0")
        self._cursors = []
        return self

    def open(self, sql: str, params: list) -> Iterator[tuple]:
        cursor = connection.connection.cursor(name=f"archive_{len(self._cursors)}")
        cursor.itersize = STREAM_ROWS
        self._cursors.append(cursor)
        cursor.execute(sql, params)
        return iter(cursor)

    def __exit__(self, *exc_info) -> None:
        for cursor in self._cursors:
            cursor.close()


class _PerJob:
    """One row per job, ordered by job id (the first column), looked up in the same order."""

    def __init__(self, rows: Iterator[tuple]) -> None:
        self._rows = rows
        self._next = next(self._rows, None)

    def get(self, job_id) -> tuple | None:
        if self._next is None or self._next[0] != job_id:
            return None
        found, self._next = self._next[1:], next(self._rows, None)
        return found


def _has_files(model: type[models.Model], alias: str) -> str:
    """SQL: whether the row has a stored file (few do: they are parsed and copied)."""
    names = [f"{alias}.{quote(f.column)} <> ''" for f in _file_fields(model)]
    return f"({' OR '.join(names)})" if names else "false"


def _file_fields(model: type[models.Model]) -> list[models.FileField]:
    return [f for f in model._meta.concrete_fields if isinstance(f, models.FileField)]


# PostgreSQL writes each row's JSON (`row_to_json`, and `array_to_json` for a job's children
# in their order): every column, those added later included (the audit hashes, say), with no
# per-column work here.
def _job_rows_sql() -> str:
    job = ExtractionJob._meta
    return (
        f"SELECT j.{quote(job.pk.column)}, j.{quote(job.get_field('created_at').column)}, "
        f"{_has_files(ExtractionJob, 'j')}, row_to_json(j)::text "
        f"FROM {table(ExtractionJob)} j WHERE j.id = ANY(%s::uuid[]) ORDER BY j.id"
    )


def _rows_sql(model: type[models.Model], order: tuple[str, ...]) -> str:
    job = quote(model._meta.get_field("job").column)
    ordering = ", ".join(f"c.{quote(model._meta.get_field(name).column)}" for name in order)
    return (
        f"SELECT c.{job}, count(*), bool_or({_has_files(model, 'c')}), "
        # array_to_json, not json_agg, which puts line breaks between elements.
        f"array_to_json(array_agg(c ORDER BY {ordering}))::text FROM {table(model)} c "
        f"WHERE c.{job} = ANY(%s::uuid[]) GROUP BY c.{job} ORDER BY c.{job}"
    )


def _deliveries_sql() -> str:
    """Per job: how many deliveries, and per state their count, attempts and last delivery."""
    event = quote(WebhookDelivery._meta.get_field("event").column)
    job = quote(JobEvent._meta.get_field("job").column)
    return (
        "SELECT job_id, sum(count)::bigint, jsonb_object_agg(state, jsonb_build_object("
        "'count', count, 'attempts', attempts, 'last_delivered_at', last_delivered_at))::text "
        "FROM "
        f"(SELECT e.{job} AS job_id, d.state, count(*) AS count, sum(d.attempts) AS attempts, "
        "max(d.delivered_at) AS last_delivered_at "
        f"FROM {table(WebhookDelivery)} d JOIN {table(JobEvent)} e ON e.id = d.{event} "
        f"WHERE e.{job} = ANY(%s::uuid[]) GROUP BY 1, 2) s GROUP BY job_id ORDER BY job_id"
    )


def _with_files(
    model: type[models.Model], has_files: bool, rows: str, folder: str, attachments: list
) -> str:
    """The JSON of a row (or of a list of rows), with their stored files copied into the
    archive and where each went (`archived_files`)."""
    if not has_files:
        return rows
    values = orjson.loads(rows)
    for row in values if isinstance(values, list) else [values]:
        for file_field in _file_fields(model):
            if name := row[file_field.column]:
                stored = copy_file(file_field.storage, name, f"{folder}/{name}")
                row.setdefault("archived_files", {})[file_field.column] = {
                    "path": stored.path,
                    "sha256": stored.sha256,
                    "bytes": stored.bytes,
                }
                attachments.append(stored)
    return orjson.dumps(values).decode()


def _manifest(run: ArchiveRun, day: date, stored: StoredFile, part: _DayPart, now: datetime):
    return {
        "archive_format": ARCHIVE_FORMAT,
        "run": run.id,
        "part": run.parts,
        "day": day.isoformat(),
        "written_at": now,
        "storage": ARCHIVE_STORAGE,
        "backend": type(storages[ARCHIVE_STORAGE]).__name__,
        "files": [
            {"path": stored.path, "sha256": stored.sha256, "bytes": stored.bytes, **part.counts},
            *(
                {"path": file.path, "sha256": file.sha256, "bytes": file.bytes}
                for file in part.attachments
            ),
        ],
    }
