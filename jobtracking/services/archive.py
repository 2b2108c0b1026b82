"""Archive before purge: each purged job's full record (the job, every attempt's status changes,
its results and their files, its events and a summary of its deliveries) is written to the
"archive" storage, and a manifest confirms it, before the purge deletes the job.

Layout (docs/archive.md): `jobs/YYYY/MM/DD/<run>-<part>.jsonl.gz` plus its
`<run>-<part>.manifest.json`, by the job's creation day: ids are UUIDv7 and the purge walks them
in order, so one chunk of the purge lands in one day (or two) and a day's files sit together;
and a job's id alone says which folder holds it. A run's day is written in parts, one per chunk
of the purge, each with its own manifest, so that a chunk's jobs are deleted as soon as their own
file is confirmed, never held until the rest of the day is written.

Rows are serialised column by column from the model's fields, so a column added later (the
audit hashes, say) is archived without a change here. Children are read by job id order through
server-side cursors and merged with the jobs, one job in memory at a time."""

import itertools
import secrets
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from operator import itemgetter
from typing import Any

from django.core.files.storage import storages
from django.db import models
from django.db.models import Count, Max, Sum
from django.utils import timezone

from jobtracking.infra.archive_storage import (
    ARCHIVE_STORAGE,
    LinesWriter,
    StoredFile,
    copy_file,
    save_manifest,
)
from jobtracking.models import (
    ArchivedJob,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    WebhookDelivery,
)

ARCHIVE_FORMAT = 1
CURSOR_ROWS = 2000
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
    entries: list[ArchivedJob] = field(default_factory=list)


def jobs_archive(*, job_ids: list, run: ArchiveRun) -> list[ArchivedJob]:
    """Write these jobs' records, one file and one manifest per creation day, each read back and
    checked (`ArchiveError` otherwise: then nothing may be deleted). Returns the index rows,
    unsaved: the caller saves them in the transaction that deletes the jobs, so the index lists
    exactly the purged jobs. Call it with the jobs locked, so the record is what is deleted."""
    run.parts += 1
    days: dict[date, _DayPart] = {}
    for document in _documents(job_ids):
        job = document["job"]
        day = job["created_at"].astimezone(UTC).date()
        part = days.setdefault(day, _DayPart())
        folder = f"jobs/{day:%Y/%m/%d}"
        for key, model, row in _rows_with_files(document):
            _attach_files(model, row, f"{folder}/files", part.attachments)
            part.counts[key] += 1
        part.counts["deliveries"] += sum(s["count"] for s in document["deliveries"].values())
        line, offset = part.writer.add(document)
        part.entries.append(_entry(job, line, offset))
    now = timezone.now()
    entries = []
    for day, part in sorted(days.items()):
        name = f"jobs/{day:%Y/%m/%d}/{run.id}-{run.parts:05d}"
        stored = part.writer.save(f"{name}.jsonl.gz")
        manifest = save_manifest(f"{name}.manifest.json", _manifest(run, day, stored, part, now))
        for entry in part.entries:
            entry.path, entry.manifest, entry.archived_at = stored.path, manifest.path, now
        entries += part.entries
    return entries


def _documents(job_ids: list) -> Iterator[dict[str, Any]]:
    """Each job's record, in id order: every column of the job and of its children."""
    children = {
        key: _Children(_columns(model.objects.filter(job_id__in=job_ids), "job_id", *order))
        for key, model, order in CHILDREN
    }
    deliveries = _deliveries(job_ids)
    for job in _columns(ExtractionJob.objects.filter(pk__in=job_ids), "id"):
        document = {"archive_format": ARCHIVE_FORMAT, "job": job}
        document.update({key: rows.take(job["id"]) for key, rows in children.items()})
        document["deliveries"] = deliveries.get(job["id"], {})
        yield document


def _columns(rows: models.QuerySet, *order: str) -> Iterator[dict[str, Any]]:
    columns = [f.attname for f in rows.model._meta.concrete_fields]
    return rows.order_by(*order).values(*columns).iterator(chunk_size=CURSOR_ROWS)


class _Children:
    """One kind of child row, ordered by job id, handed out a job at a time."""

    def __init__(self, rows: Iterator[dict[str, Any]]) -> None:
        self._groups = itertools.groupby(rows, key=itemgetter("job_id"))
        self._next = next(self._groups, None)

    def take(self, job_id) -> list[dict[str, Any]]:
        if self._next is None or self._next[0] != job_id:
            return []
        rows = list(self._next[1])
        self._next = next(self._groups, None)
        return rows


def _deliveries(job_ids: list) -> dict[Any, dict[str, dict[str, Any]]]:
    """Per job, per delivery state: how many deliveries, their attempts and last delivery."""
    summary: dict[Any, dict[str, dict[str, Any]]] = defaultdict(dict)
    rows = (
        WebhookDelivery.objects.filter(event__job_id__in=job_ids)
        .values("event__job_id", "state")
        .annotate(
            count=Count("id"), attempts=Sum("attempts"), last_delivered_at=Max("delivered_at")
        )
        .order_by()
    )
    for row in rows:
        summary[row.pop("event__job_id")][row.pop("state")] = row
    return summary


def _rows_with_files(document: dict) -> Iterator[tuple[str, type[models.Model], dict]]:
    yield "jobs", ExtractionJob, document["job"]
    for key, model, _order in CHILDREN:
        for row in document[key]:
            yield key, model, row


def _attach_files(
    model: type[models.Model], row: dict, folder: str, attachments: list[StoredFile]
) -> None:
    """Copy the row's stored files into the archive; the row says where each went."""
    for file_field in model._meta.concrete_fields:
        if isinstance(file_field, models.FileField) and row[file_field.attname]:
            name = row[file_field.attname]
            stored = copy_file(file_field.storage, name, f"{folder}/{name}")
            row.setdefault("archived_files", {})[file_field.attname] = {
                "path": stored.path,
                "sha256": stored.sha256,
                "bytes": stored.bytes,
            }
            attachments.append(stored)


def _entry(job: dict, line: int, offset: int) -> ArchivedJob:
    return ArchivedJob(
        job_id=job["id"],
        file_id=job["file_id"],
        external_job_id=job["external_job_id"],
        requested_by_id=job["requested_by_id"],
        status=job["status_id"],
        created_at=job["created_at"],
        completed_at=job["completed_at"],
        storage=ARCHIVE_STORAGE,
        line=line,
        offset=offset,
    )


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
