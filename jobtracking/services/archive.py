"""Archive before purge: each purged job's full record (the job, every attempt's status changes,
its results and their files, its events and a summary of its deliveries) is written to the
"archive" storage, and a manifest confirms it, before the purge deletes the job.

Layout (docs/archive.md): `jobs/YYYY/MM/DD/<run>-<part>.jsonl.gz` plus its
`<run>-<part>.manifest.json`, by the job's creation day: ids are UUIDv7 and the purge walks them
in order, so one chunk of the purge lands in one day (or two) and a day's files sit together;
and a job's id alone says which folder holds it. A run's day is written in parts, each with its
own manifest: a chunk of the purge is `PARTS_AT_ONCE` of them (its jobs shared in id order),
so that a chunk's jobs are deleted as soon as their own files are confirmed, never held until
the rest of the day is written.

PostgreSQL serialises each row whole (`row_to_json`), so a column added later (the audit
hashes, say) is archived without a change here. One query gives a row per job, in id order: its
record, put together from the job's JSON and each kind of child's aggregated to one JSON array
(by Python instead, from those texts as they are, for a job with a stored file to copy). It is
read through `COPY`, a stream, so that PostgreSQL writes the next rows while Python compresses
these, and memory holds a few rows at a time."""

import functools
import secrets
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime

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
# A chunk's records are written as this many parts at once, each on a connection of its own
# (`jobs_archive_started`): PostgreSQL writing their rows' JSON, most of an archive's cost, runs
# on as many cores.
PARTS_AT_ONCE = 2
# Each job's children: key in the record, model, order within the job.
CHILDREN = (
    ("status_changes", JobStatusChange, ("changed_at", "id")),
    ("results", ExtractionResult, ("attempt",)),
    ("events", JobEvent, ("id",)),
)


@dataclass
class ArchiveRun:
    """One purge run: its id names its files, numbered by part. Its parts written beside the
    purge (`jobs_archive_started`) are written by a thread each, kept, with its connection, for
    the whole run, not opened a chunk (about 10 ms a part): `close` it, or use it as a context
    manager."""

    id: str = field(
        default_factory=lambda: f"{timezone.now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    )
    parts: int = 0
    writers: list[ThreadPoolExecutor] = field(default_factory=list, repr=False)

    def next_part(self) -> int:
        self.parts += 1
        return self.parts

    def writer(self, n: int) -> ThreadPoolExecutor:
        """The `n`th writer: one thread, so one connection of its own."""
        while len(self.writers) <= n:
            self.writers.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive"))
        return self.writers[n]

    def close(self) -> None:
        """Its writers' connections closed and their threads ended."""
        for writer in self.writers:
            writer.submit(_connection_close)
            writer.shutdown()
        self.writers.clear()

    def __enter__(self) -> "ArchiveRun":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@dataclass
class _Records:
    """Where each record is: its job's id, its line and its gzip member's byte offset. Three
    lists, no object a record: the garbage collector's count of new objects, which a purge
    would otherwise raise by thousands a chunk, sets off full collections of the process."""

    job_ids: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)


@dataclass
class _DayPart:
    writer: LinesWriter = field(default_factory=LinesWriter)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    attachments: list[StoredFile] = field(default_factory=list)
    records: _Records = field(default_factory=_Records)


@dataclass(frozen=True)
class ArchivedPart:
    """A written and confirmed part: where each of its jobs' records is."""

    path: str
    manifest: str
    archived_at: datetime
    records: _Records


def jobs_delete_indexed(jobs: models.QuerySet) -> tuple[int, list[str]]:
    """Delete these jobs in one statement (their dependants deleted first), keeping what the
    index takes from them (`INDEXED`), for `archived_jobs_insert`: so they are deleted while
    the parts are still being written. Returns how many, and their ids and fields as an array
    each (one text a column, no object a job; cheaper for PostgreSQL to read back than JSON
    objects)."""
    subquery, params = jobs.values("pk").query.sql_with_params()
    columns = [column for column, _type in _kept_columns()]
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH gone AS (DELETE FROM {table(ExtractionJob)} WHERE {columns[0]} IN ({subquery}) "
            f"RETURNING {', '.join(columns)}) "
            f"SELECT count(*), {', '.join(f'array_agg({c})::text' for c in columns)} FROM gone",
            params,
        )
        count, *kept = cursor.fetchone()
    return count, kept


def archived_jobs_insert(parts: list[ArchivedPart], jobs: list[str]) -> None:
    """The index rows of these parts' jobs, in one statement (PostgreSQL reads `jobs` once):
    the rest of each row is taken from `jobs`, the deleted jobs' ids and fields
    (`jobs_delete_indexed`). A job not among them (not deleted) is not indexed."""
    if not parts:
        return
    records = [part.records for part in parts]
    of_part = [n for n, part in enumerate(records, 1) for _ in part.job_ids]
    with prepared_cursor() as cursor:
        cursor.execute(
            _index_insert_sql(),
            [
                ARCHIVE_STORAGE,
                *(array_literal(getattr(part, name) for part in parts) for name in PART_FIELDS),
                array_literal(of_part),
                *(
                    array_literal(value for part in records for value in getattr(part, name))
                    for name in ("job_ids", "lines", "offsets")
                ),
                *jobs,
            ],
        )


def jobs_archive_started(
    *, job_ids: list, run: ArchiveRun, beside: bool
) -> Callable[[], list[ArchivedPart]]:
    """Start archiving these jobs (in id order), as `PARTS_AT_ONCE` parts of `run`
    (`jobs_archive`: their shares in that order); returns what waits for the parts (raising what
    one raised). `beside`: each on a connection of its own, in one of the run's threads, so that
    they are written at once and the caller's transaction goes on meanwhile (deleting the jobs,
    say: uncommitted until the parts are confirmed). Call it once the jobs are locked: the
    records are read from snapshots taken after. Not beside a transaction that encloses the
    caller's (a test's): another connection could not see its rows."""
    size = -(-len(job_ids) // PARTS_AT_ONCE)
    shares = [(job_ids[n : n + size], run.next_part()) for n in range(0, len(job_ids), size)]
    if not beside:
        parts = [part for share in shares for part in jobs_archive(*share, run=run)]
        return lambda: parts
    started = [run.writer(n).submit(_archive_beside, *share, run) for n, share in enumerate(shares)]
    return lambda: [part for share in started for part in share.result()]


def _archive_beside(job_ids: list, number: int, run: ArchiveRun) -> list[ArchivedPart]:
    """In a writer's thread, on its connection (Django's are per thread), kept for the next
    chunk unless an error may have left it broken."""
    try:
        return jobs_archive(job_ids, number, run=run)
    except BaseException:
        connection.close()
        raise


def _connection_close() -> None:
    """In a writer's thread: `connection` is this thread's (`connection.close`, taken in
    another thread, would be that one's)."""
    connection.close()


def jobs_archive(job_ids: list, number: int, *, run: ArchiveRun) -> list[ArchivedPart]:
    """Write these jobs' records as part `number` of `run`: one file and one manifest per
    creation day, each read back and checked (`ArchiveError` otherwise: then nothing may be
    deleted). Returns the parts, for the index (`archived_jobs_insert`): the caller writes it in
    the transaction that deletes the jobs, so the index lists exactly the purged jobs. Call it
    with the jobs locked, so the record is what is deleted."""
    if connection.vendor != "postgresql":
        raise ArchiveError("The archive needs PostgreSQL (set JOBS_ARCHIVE_BEFORE_PURGE=0).")
    days: dict[date, _DayPart] = {}
    for row in _job_rows(job_ids):  # (read by index: no object made for its parts)
        day = row[1]
        if (part := days.get(day)) is None:  # (a part opens a spooled file: once a day)
            part = days[day] = _DayPart()
        part.counts["jobs"] += 1
        for n, key in enumerate(COUNTED, start=2):
            part.counts[key] += row[n]
        if (record := row[_RECORD_AT]) is None:  # a stored file: copied, the record put
            record = _record_with_files(row[_RECORD_AT + 1 :], part, day)  # together here
        records = part.records
        records.job_ids.append(row[0])
        records.lines.append(part.writer.lines)
        records.offsets.append(part.writer.size)  # the offset of the member it goes in
        part.writer.add(record)
    now = timezone.now()
    written = []
    for day, part in sorted(days.items()):
        name = f"jobs/{day:%Y/%m/%d}/{run.id}-{number:05d}"
        stored = part.writer.save(f"{name}.jsonl.gz")
        manifest = save_json(
            f"{name}.manifest.json", _manifest(run, number, day, stored, part, now)
        )
        written.append(ArchivedPart(stored.path, manifest.path, now, part.records))
    return written


def _record_with_files(sections: list, part: _DayPart, day: date) -> bytes:
    """The record of a job with a stored file, put together from its sections' JSON texts
    (`_job_rows`), as PostgreSQL puts the others together, with the files copied."""
    files = f"jobs/{day:%Y/%m/%d}/files"
    record = [RECORD_START]
    for (key, model, _json, _has_files), has_files, text in zip(
        _sections(), sections[::2], sections[1::2], strict=True
    ):
        record += [_key(key), _with_files(model, has_files, text, files, part.attachments)]
    return "".join([*record, "}"]).encode()


# The index's fields taken from the job's row: what a purged job is found by and shown with.
INDEXED = {
    "file_id": "file_id",
    "external_job_id": "external_job_id",
    "requested_by": "requested_by",
    "status": "status",
    "created_at": "created_at",
    "completed_at": "completed_at",
}


# A part's own fields in the index, each the same for every job of the part.
PART_FIELDS = ("path", "manifest", "archived_at")


@functools.cache
def _kept_columns() -> list[tuple[str, str]]:
    """What `jobs_delete_indexed` keeps of a job: its id's and `INDEXED` columns, with their
    types."""
    job = ExtractionJob._meta
    fields = [job.pk, *(job.get_field(name) for name in INDEXED.values())]
    return [(quote(f.column), f.db_type(connection)) for f in fields]


@functools.cache
def _index_insert_sql() -> str:
    """Parameters: storage; arrays of the parts' paths, manifests and times; arrays of each
    record's part (from 1), job id, line and offset; the deleted jobs' arrays
    (`jobs_delete_indexed`)."""
    index = ArchivedJob._meta
    own = [quote(index.get_field(name).column) for name in INDEXED]
    kept = _kept_columns()
    given = ("storage", *PART_FIELDS, "job_id", "line", "offset")
    return (
        f"INSERT INTO {table(ArchivedJob)} ({', '.join(own)}, "
        f"{', '.join(quote(index.get_field(name).column) for name in given)}) "
        f"SELECT {', '.join(f'j.{column}' for column, _type in kept[1:])}, %s, "
        "(%s::text[])[r.part], (%s::text[])[r.part], (%s::timestamptz[])[r.part], "
        "r.job_id, r.line, r.byte "
        "FROM unnest(%s::int[], %s::uuid[], %s::int[], %s::bigint[]) "
        "AS r(part, job_id, line, byte) "
        f"JOIN unnest({', '.join(f'%s::{type_}[]' for _column, type_ in kept)}) "
        f"AS j({', '.join(column for column, _type in kept)}) ON j.{kept[0][0]} = r.job_id"
    )


def _job_rows(job_ids: list) -> Iterator[tuple]:
    """The jobs' rows (`_job_rows_sql`), in id order, streamed by `COPY` in binary (no escaping
    to undo): PostgreSQL writes them while they are read. Each: the job's id, creation day (in
    UTC), its `COUNTED` children, its record, whole, unless a row of it has a stored file; then
    its sections (`_sections`): for each whether a row has a file, and its JSON if one of the
    record's does."""
    connection.ensure_connection()
    with (
        connection.connection.cursor() as cursor,
        cursor.copy(_job_rows_sql(), [array_literal(job_ids)]) as copy,
    ):
        copy.set_types(_JOB_ROW_TYPES)
        yield from copy.rows()


def _has_files(model: type[models.Model], alias: str) -> str:
    """SQL: whether the row has a stored file (few do: they are parsed and copied)."""
    names = [f"{alias}.{quote(f.column)} <> ''" for f in _file_fields(model)]
    return f"({' OR '.join(names)})" if names else "false"


def _file_fields(model: type[models.Model]) -> list[models.FileField]:
    return [f for f in model._meta.concrete_fields if isinstance(f, models.FileField)]


# PostgreSQL writes each row's JSON (`row_to_json`, and `array_to_json` for a job's children
# in their order): every column, those added later included (the audit hashes, say), with no
# per-column work here; and puts each record together, but where a row has a stored file (to
# copy, and to name in the record: `_record_with_files`). Each kind of child is grouped by job
# by a subquery of its own, run for each job in turn (`LATERAL`, by its index on the job): the
# first rows stream out at once, where grouping every job's children first (merge joins) had
# PostgreSQL read and sort them all before the first row. Its parameter: the jobs' ids.
RECORD_START = f'{{"archive_format":{ARCHIVE_FORMAT}'
COUNTED = (*(key for key, _model, _order in CHILDREN), "deliveries")
_RECORD_AT = 2 + len(COUNTED)
_JOB_ROW_TYPES = [
    *("text", "date"),
    *("int8",) * len(COUNTED),
    "bytea",
    *("bool", "text") * (len(CHILDREN) + 2),
]


@functools.cache
def _sections() -> list[tuple[str, type[models.Model] | None, str, str]]:
    """The record's sections, in order: key, model (whose rows may have files), SQL of their
    JSON and of whether one of their rows has a stored file."""
    return [
        ("job", ExtractionJob, "row_to_json(j)::text", _has_files(ExtractionJob, "j")),
        *(
            (key, model, f"coalesce({key}.rows, '[]')", f"coalesce({key}.has_files, false)")
            for key, model, _order in CHILDREN
        ),
        ("deliveries", None, "coalesce(deliveries.summary, '{}')", "false"),
    ]


@functools.cache
def _job_rows_sql() -> str:
    job = ExtractionJob._meta
    pk = quote(job.pk.column)
    sections = _sections()
    files = " OR ".join(has_files for _key, _model, _json, has_files in sections)
    record = ", ".join(
        [
            _literal(RECORD_START),
            *(f"{_literal(_key(key))}, {json}" for key, _model, json, _f in sections),
            "'}'",
        ]
    )
    columns = [
        f"j.{pk}::text",
        f"(j.{quote(job.get_field('created_at').column)} AT TIME ZONE 'UTC')::date",
        *(f"coalesce({key}.count, 0)" for key in COUNTED),
        f"CASE WHEN {files} THEN NULL ELSE convert_to(concat({record}), 'UTF8') END",
        *(
            f"{has_files}, CASE WHEN {files} THEN {json} END"
            for _key, _model, json, has_files in sections
        ),
    ]
    children = [(key, _rows_sql(model, order)) for key, model, order in CHILDREN]
    joins = [*children, ("deliveries", _deliveries_sql())]
    return (
        # The jobs ordered before the joins, which keep their order: no sort of the records.
        f"COPY (SELECT {', '.join(columns)} FROM (SELECT * FROM {table(ExtractionJob)} "
        f"WHERE {pk} = ANY(%s::uuid[]) ORDER BY {pk}) j "
        + " ".join(f"LEFT JOIN LATERAL ({sql}) {key} ON true" for key, sql in joins)
        + f" ORDER BY j.{pk}) TO STDOUT (FORMAT BINARY)"
    )


def _key(key: str) -> str:
    """What comes before a section's JSON in a record."""
    return f',"{key}":'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _rows_sql(model: type[models.Model], order: tuple[str, ...]) -> str:
    job = quote(model._meta.get_field("job").column)
    ordering = ", ".join(f"c.{quote(model._meta.get_field(name).column)}" for name in order)
    # The events' ids too: their deliveries are looked up by them (`_deliveries_sql`).
    ids = f", array_agg(c.{quote(model._meta.pk.column)}) AS ids" if model is JobEvent else ""
    return (
        f"SELECT count(*) AS count, bool_or({_has_files(model, 'c')}) AS has_files, "
        # array_to_json, not json_agg, which puts line breaks between elements.
        f"array_to_json(array_agg(c ORDER BY {ordering}))::text AS rows{ids} "
        f"FROM {table(model)} c WHERE c.{job} = j.id"
    )


def _deliveries_sql() -> str:
    """Per job: how many deliveries, and per state their count, attempts and last delivery; by
    the job's events' ids, which `events` (joined before) holds, so the events are not read
    again."""
    event = quote(WebhookDelivery._meta.get_field("event").column)
    return (
        "SELECT sum(count)::bigint AS count, jsonb_object_agg(state, jsonb_build_object("
        "'count', count, 'attempts', attempts, 'last_delivered_at', last_delivered_at))::text "
        "AS summary FROM "
        "(SELECT d.state, count(*) AS count, sum(d.attempts) AS attempts, "
        "max(d.delivered_at) AS last_delivered_at "
        f"FROM {table(WebhookDelivery)} d WHERE d.{event} = ANY(events.ids) GROUP BY d.state) s"
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


def _manifest(
    run: ArchiveRun, number: int, day: date, stored: StoredFile, part: _DayPart, now: datetime
):
    return {
        "archive_format": ARCHIVE_FORMAT,
        "run": run.id,
        "part": number,
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
