"""Walk the audit chains and checkpoints in the database and find the first broken link
(`verify_audit`; docs/audit.md). Reads only.

Rows are read in id order: a job's rows are written under its row lock, one transaction after
another, so their ids follow the chain. Each row's hash is recomputed from its columns and its
`prev_hash` compared with the hash of the job's row before it; each job's last hash with its
`audit_head`; each checkpoint's signature, its link to the one before and its Merkle root; and
each head a checkpoint signed must still be a row of its job's chain."""

import datetime
import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from uuid import UUID

import orjson
from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL
from psycopg.types.string import TextLoader

from jobtracking.audit import (
    CANONICAL_VERSION,
    GENESIS,
    MOMENT_SQL,
    canonical_details,
    change_canonical,
    digest,
    merkle_root,
)
from jobtracking.infra.archive_storage import ArchiveError, read_record
from jobtracking.infra.signing import signature_valid
from jobtracking.models import ArchivedJob, AuditCheckpoint, ExtractionJob, JobStatusChange

CHUNK = 20_000


@dataclass(frozen=True)
class Break:
    """The first broken link: where, what the chain expected there, and what was found."""

    where: str
    expected: str
    found: str

    def __str__(self) -> str:
        return f"{self.where}: expected {self.expected}, found {self.found}"


@dataclass
class Verified:
    rows: int = 0
    unchained: int = 0
    chains: int = 0
    checkpoints: int = 0
    broken: Break | None = None
    last: dict = field(default_factory=dict, repr=False)


def _rows(job_ids: list[UUID] | None, since: datetime.datetime | None) -> Iterator[list[tuple]]:
    """The chosen chains' rows in id order, a chunk at a time, each (id, job id, text, details,
    tail, prev_hash, hash): `text` is the row's canonical text whole where `details` is None,
    else the part before its details (`details` their JSON as stored, `tail` the part after)."""
    rows = JobStatusChange.objects.order_by("id")
    if job_ids is not None:
        rows = rows.filter(job_id__in=job_ids)
    elif since is not None:
        moved = JobStatusChange.objects.filter(changed_at__gte=since).values("job_id")
        rows = rows.filter(job_id__in=moved)
    if connection.vendor == "postgresql":
        head, tail = canonical_sql()
        # Empty details (most rows): PostgreSQL writes the whole text, Python only hashes it.
        empty = "details = '{}'"
        yield from _chunks(
            rows.annotate(
                text=RawSQL(
                    f"CASE WHEN {empty} THEN {head} || '{{}}' || {tail} ELSE {head} END", []
                ),
                details_text=RawSQL(f"CASE WHEN NOT {empty} THEN details::text END", []),
                tail=RawSQL(f"CASE WHEN NOT {empty} THEN {tail} END", []),
            ).values_list("id", "job_id", "text", "details_text", "tail", "prev_hash", "hash")
        )
        return
    for chunk in _chunks(rows):  # (SQLite: a first local run's history)
        yield [
            (c.pk, str(c.job_id), change_canonical(c).decode(), None, None, c.prev_hash, c.hash)
            for c in chunk
        ]


def _chunks(query: QuerySet) -> Iterator[list]:
    """A query's rows (or objects), CHUNK at a time. On PostgreSQL, a `values_list` query's
    through a server-side cursor, UUIDs as text: psycopg builds a chunk's rows in C, where it
    parses the rows of a `COPY` one at a time in Python. Call it in a transaction."""
    if connection.vendor != "postgresql":
        rows = query.iterator(chunk_size=CHUNK)
        while chunk := list(itertools.islice(rows, CHUNK)):
            yield chunk
        return
    sql = connection.ops.compose_sql(*query.query.sql_with_params())
    connection.ensure_connection()
    with connection.connection.cursor(name=f"audit_{next(_cursor_numbers)}") as cursor:
        cursor.adapters.register_loader("uuid", TextLoader)
        cursor.execute(sql)
        yield from _read_ahead(functools.partial(cursor.fetchmany, CHUNK))


def _read_ahead(fetch: Callable[[], list]) -> Iterator[list]:
    """`fetch()`'s chunks up to an empty one, each fetched in a thread while the caller checks
    the one before: PostgreSQL writes the next rows while this process hashes these (a FETCH
    leaves each side idle while the other works). psycopg waits for the server without the GIL."""
    with ThreadPoolExecutor(max_workers=1) as reader:
        ahead = reader.submit(fetch)
        try:
            while chunk := ahead.result():
                ahead = reader.submit(fetch)
                yield chunk
        finally:
            wait([ahead])  # before the cursor closes, when the caller stops early


_cursor_numbers = itertools.count()


def canonical_sql() -> tuple[str, str]:
    """The canonical text before and after the details, written by PostgreSQL: at millions of
    rows, reading each column into a Python object and writing it again costs most of the
    check. The details, whose JSON PostgreSQL writes otherwise, are written by
    `canonical_details`. Where this and `canonical_change` disagree, every row breaks (the
    tests verify rows written by the one with the other). `prev_hash` is quoted as it is, not
    escaped as JSON: a row whose `prev_hash` is not its chain's previous hash (64 hex digits)
    breaks the chain before its text is hashed."""
    moment = f"to_char(changed_at AT TIME ZONE 'UTC', '{MOMENT_SQL}')"
    head = (
        "'{\"actor\":' || coalesce(actor_id::text, 'null') || ',\"actor_type\":' || "
        'to_json(actor_type)::text || \',"attempt":\' || attempt || \',"changed_at":"\' || '
        f'{moment} || \'","details":\''
    )
    tail = (
        "',\"from\":' || coalesce(to_json(from_status_id)::text, 'null') || ',\"job\":\"' || "
        'job_id || \'","prev":"\' || prev_hash || \'","reason":\' || '
        "to_json(reason)::text || ',\"to\":' || to_json(to_status_id)::text || "
        f"',\"v\":{CANONICAL_VERSION}}}'"
    )
    return head, tail


def _verify_rows(result: Verified, chunks: Iterator[list[tuple]], signed: set[str]) -> None:
    """Check each row's links and hash; strike the heads the checkpoints signed off `signed`
    as their rows go by."""
    last = result.last
    for chunk in chunks:
        for row_id, job_id, text, details, tail, prev_hash, row_hash in chunk:
            if not row_hash and not prev_hash and job_id not in last:
                # Written before the chain existed (the migration left its hashes empty): only
                # before a job's first chained row, which then starts from GENESIS.
                result.unchained += 1
                continue
            expected_prev = last.get(job_id, GENESIS)
            if prev_hash != expected_prev:
                result.broken = Break(
                    f"job {job_id}, change {row_id}: previous hash", expected_prev, prev_hash
                )
                return
            if details is None:
                canonical = text.encode()
            else:
                canonical = b"".join(
                    (text.encode(), canonical_details(orjson.loads(details)), tail.encode())
                )
            computed = digest(canonical)
            if computed != row_hash:
                result.broken = Break(
                    f"job {job_id}, change {row_id}: hash of its content", computed, row_hash
                )
                return
            last[job_id] = row_hash
            result.rows += 1
            signed.discard(row_hash)


def _verify_heads(result: Verified, job_ids: list[UUID] | None) -> None:
    """Each job's `audit_head` is its chain's last hash, so a row deleted from a chain's end
    shows. `job_ids` None: every job (a job whose rows were all deleted shows too)."""
    jobs = ExtractionJob.objects.order_by().values_list("pk", "audit_head")
    if job_ids is None:
        chunks = _chunks(jobs)
    else:
        chunks = (
            chunk
            for i in range(0, len(job_ids), CHUNK)
            for chunk in _chunks(jobs.filter(pk__in=job_ids[i : i + CHUNK]))
        )
    for chunk in chunks:
        for job_id, head in chunk:
            expected = result.last.get(str(job_id), "")
            if head != expected:
                result.broken = Break(
                    f"job {job_id}: head of its chain", expected or "no rows", head or "none"
                )
                return
            result.chains += 1


def _verify_checkpoints(
    result: Verified,
    public_key: bytes,
    checkpoints: list[AuditCheckpoint],
    job_ids: list[UUID] | None,
    *,
    first: int | None,
) -> set[str]:
    """Check each checkpoint's signature, its number and link to the one before (from `first`,
    if given), and its root over its leaves; the heads they sign (of `job_ids` only, if given),
    which the walk of the rows then looks for."""
    wanted = None if job_ids is None else {str(job_id) for job_id in job_ids}
    heads, previous, number = set(), None, first
    for checkpoint in checkpoints:
        where = f"checkpoint {checkpoint.number}"
        if number is not None and checkpoint.number != number:
            result.broken = Break(
                f"{where}: previous checkpoint", f"checkpoint {number}", "none before it"
            )
            return heads
        number = checkpoint.number + 1
        statement = checkpoint.statement.encode()
        if not signature_valid(public_key, statement, checkpoint.signature):
            result.broken = Break(where, "a valid signature by the public key", "none valid")
            return heads
        signed = orjson.loads(statement)
        if previous is not None or checkpoint.number == 1:
            expected = digest(previous.statement.encode()) if previous else GENESIS
            if signed["prev"] != expected:
                result.broken = Break(f"{where}: previous checkpoint", expected, signed["prev"])
                return heads
        if signed["number"] != checkpoint.number:
            result.broken = Break(f"{where}: number", str(checkpoint.number), str(signed["number"]))
            return heads
        root = merkle_root(checkpoint.leaves)
        if signed["root"] != root or signed["leaves"] != len(checkpoint.leaves):
            result.broken = Break(f"{where}: signed root", signed["root"], root)
            return heads
        heads.update(
            head for job_id, _day, head in checkpoint.leaves if wanted is None or job_id in wanted
        )
        previous = checkpoint
        result.checkpoints += 1
    return heads


def _archived_heads(missing: set[str], checkpoints: list[AuditCheckpoint]) -> None:
    """Strike off `missing` the signed heads of purged jobs that their archived record holds
    (`jobtracking.services.archive`): the archive, outside the database, accounts for them. A
    job deleted without an archived record, or whose record lacks the row, stays missing."""
    signed = defaultdict(set)
    for checkpoint in checkpoints:
        for job_id, _day, head in checkpoint.leaves:
            if head in missing:
                signed[job_id].add(head)
    for entry in ArchivedJob.objects.filter(job_id__in=list(signed)).iterator():
        try:
            line = read_record(entry.storage, entry.path, entry.offset, entry.job_id)
        except ArchiveError:  # no record of the job where its index row says: it stays missing
            continue
        record = orjson.loads(line)
        archived = {change.get("hash") for change in record.get("status_changes") or ()}
        missing -= signed[str(entry.job_id)] & archived


def _missing_head(result: Verified, checkpoints: list[AuditCheckpoint], missing: set[str]):
    """Name the first signed head the walk did not find, nor a purged job's archived record:
    its job, or the row, is gone."""
    _archived_heads(missing, checkpoints)
    for checkpoint in checkpoints:
        for job_id, _day, head in checkpoint.leaves:
            if head in missing:
                result.broken = Break(
                    f"checkpoint {checkpoint.number}: job {job_id}",
                    f"a change with hash {head} (signed)",
                    "none",
                )
                return


def audit_verify(
    *,
    public_key: bytes,
    since: datetime.datetime | None = None,
    job_ids: list[UUID] | None = None,
) -> Verified:
    """Verify the checkpoints (all, or those created `since`), the chains (all; those of
    `job_ids`; or those that moved since the changes the first of those checkpoints covers)
    with their heads, and that every head a checkpoint signed is a row of its chain; stop at the
    first broken link."""
    with _snapshot():
        return _verify(public_key, since, job_ids)


@contextmanager
def _snapshot():
    """A transaction (the server-side cursors need one) in which, on PostgreSQL, every read sees
    one snapshot, unless the caller's transaction has begun already: a transition committed
    during the walk of the rows would otherwise show in its job's head but not in its chain."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _verify(
    public_key: bytes, since: datetime.datetime | None, job_ids: list[UUID] | None
) -> Verified:
    result = Verified()
    checkpoints = AuditCheckpoint.objects.order_by("number")
    rows_since = since
    if since is not None:
        checkpoints = checkpoints.filter(created_at__gte=since)
        before = AuditCheckpoint.objects.filter(created_at__lt=since).order_by("-number").first()
        rows_since = min(since, before.upto) if before else since
    checkpoints = list(checkpoints)
    signed = _verify_checkpoints(
        result, public_key, checkpoints, job_ids, first=None if since is not None else 1
    )
    if result.broken is None:
        _verify_rows(result, _rows(job_ids, rows_since), signed)
    if result.broken is None:
        walked = job_ids if job_ids is not None or since is None else list(result.last)
        _verify_heads(result, walked)
    if result.broken is None and signed:
        _missing_head(result, checkpoints, signed)
    return result
