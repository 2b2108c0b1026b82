"""An auditor's bundle of the audit history (`export_audit`; docs/audit.md): the jobs created on
each day, each with its chained rows as canonical text exactly as hashed, the checkpoints, the
public key and a manifest. `docs/verify_bundle.py` checks one without this project's code.
Reads only; memory stays flat (a day is written a chunk of jobs at a time)."""

import datetime
import gzip
import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from jobtracking.audit import change_canonical
from jobtracking.models import AuditCheckpoint, ExtractionJob, JobStatusChange
from jobtracking.services.audit_checkpoints import checkpoint_as_dict

FORMAT = "audit-bundle/1"
CHUNK = 2_000
_JOB_FIELDS = ("pk", "created_at", "extractor__slug", "file_id", "file_name", "audit_head")


def _day_file(day: datetime.date) -> str:
    return f"jobs-{day.isoformat()}.jsonl.gz"


def _job_lines(day: datetime.date):
    """The day's jobs (created on it, UTC) as bundle lines, a chunk of jobs at a time."""
    start = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)
    jobs = (
        ExtractionJob.objects.filter(
            created_at__gte=start, created_at__lt=start + datetime.timedelta(days=1)
        )
        .order_by("created_at", "pk")
        .values_list(*_JOB_FIELDS)
    )
    chunk = []
    for job in jobs.iterator(chunk_size=CHUNK):
        chunk.append(job)
        if len(chunk) == CHUNK:
            yield from _with_changes(chunk)
            chunk = []
    yield from _with_changes(chunk)


def _with_changes(jobs: list[tuple]):
    changes = defaultdict(list)
    rows = JobStatusChange.objects.filter(job_id__in=[job[0] for job in jobs]).order_by("id")
    for change in rows.iterator(chunk_size=CHUNK * 8):
        changes[change.job_id].append(
            {
                "canonical": change_canonical(change).decode(),
                "hash": change.hash,
                "prev_hash": change.prev_hash,
            }
        )
    for pk, created_at, extractor, file_id, file_name, head in jobs:
        yield {
            "job": str(pk),
            "created_at": created_at.astimezone(datetime.UTC).isoformat(),
            "extractor": extractor,
            "file_id": file_id,
            "file_name": file_name,
            "audit_head": head,
            "changes": changes[pk],
        }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as opened:
        while block := opened.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def audit_export(
    *, first_day: datetime.date, last_day: datetime.date, directory: Path, public_key: bytes
) -> dict[str, Any]:
    """Write the bundle of the jobs created from `first_day` to `last_day` (UTC, both included)
    into `directory`; its manifest. Every checkpoint goes in, so that their chain is whole and
    any job a checkpoint signed in those days must be in the bundle."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    day = first_day
    while day <= last_day:
        path, jobs, changes = directory / _day_file(day), 0, 0
        # mtime 0: the same history gives the same bytes, whenever it is exported.
        with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            for line in _job_lines(day):
                out.write(orjson.dumps(line) + b"\n")
                jobs, changes = jobs + 1, changes + len(line["changes"])
        files[path.name] = {"jobs": jobs, "changes": changes}
        day += datetime.timedelta(days=1)
    path = directory / "checkpoints.jsonl"
    with path.open("wb") as out:
        count = 0
        for checkpoint in AuditCheckpoint.objects.order_by("number").iterator(chunk_size=10):
            out.write(orjson.dumps(checkpoint_as_dict(checkpoint)) + b"\n")
            count += 1
    files[path.name] = {"checkpoints": count}
    (directory / "public_key.txt").write_text(public_key.hex() + "\n")
    files["public_key.txt"] = {}
    for name, entry in files.items():
        entry["sha256"] = _sha256(directory / name)
    manifest = {
        "format": FORMAT,
        "from": first_day.isoformat(),
        "to": last_day.isoformat(),
        "jobs": sum(entry.get("jobs", 0) for entry in files.values()),
        "changes": sum(entry.get("changes", 0) for entry in files.values()),
        "files": files,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
