"""The audit history's hash chains and checkpoints, as pure functions (docs/audit.md).

Each job's `JobStatusChange` rows form one chain: a row's hash is the SHA-256 of its canonical
text, which names the previous row's hash (`GENESIS` for the first). The job row keeps its
chain's head (`audit_head`), so a writer that holds the job's lock, as every transition does,
knows the previous hash without a read. A checkpoint commits to the heads of the chains that
moved (a Merkle root over them) and to the checkpoint before it, and is signed."""

import datetime
import functools
import hashlib
import json
from typing import Any

import orjson

CANONICAL_VERSION = 1
GENESIS = "0" * 64


def _normalized(value: Any) -> Any:
    """A JSON value as it comes back from jsonb: PostgreSQL reads 1e20 or 2.0 as numerics and
    may give an integer back, so a float with an integral value is written as that integer."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {str(key): _normalized(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(item) for item in value]
    return value


# Values that hold no float: most details are a flat dict of these, checked at C speed.
_SCALARS = frozenset({str, int, bool, type(None)})


def _has_float(value: Any) -> bool:
    if type(value) is dict and set(map(type, value.values())) <= _SCALARS:
        return False
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(map(_has_float, value.values()))
    if isinstance(value, list | tuple):
        return any(map(_has_float, value))
    return False


# UTC with microseconds always written: what timestamptz keeps. `MOMENT_SQL` is the same
# format in PostgreSQL's words, for readers that take the text straight from the database.
MOMENT_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
MOMENT_SQL = 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'


def _moment(value: datetime.datetime | str) -> str:
    """A moment as the canonical form writes it; text is taken as already written so (read
    with `MOMENT_SQL`)."""
    if isinstance(value, str):
        return value
    return _utc_text(value)


@functools.lru_cache(maxsize=256)
def _utc_text(value: datetime.datetime) -> str:
    # Remembered: a batch's rows share one moment (equal moments in any zone are one key).
    return value.astimezone(datetime.UTC).strftime(MOMENT_FORMAT)


def canonical_change(
    *,
    job_id,
    attempt: int,
    from_status: str | None,
    to_status: str,
    changed_at: datetime.datetime | str,
    actor_type: str,
    actor_id: int | None,
    reason: str,
    details: dict,
    prev_hash: str,
) -> bytes:
    """A status change's canonical text: a JSON object with sorted keys, no spaces, UTF-8."""
    content = {
        "actor": actor_id,
        "actor_type": actor_type,
        "attempt": attempt,
        "changed_at": _moment(changed_at),
        "details": _normalized(details) if _has_float(details) else details,
        "from": from_status,
        "job": job_id,  # orjson writes a UUID as its canonical text
        "prev": prev_hash,
        "reason": reason,
        "to": to_status,
        "v": CANONICAL_VERSION,
    }
    try:  # one call, not two and a split: orjson writes the details inside as it does alone
        return orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # details orjson refuses (an integer beyond 64 bits): written apart
        head, tail = _dumps(content | {"details": _DETAILS, "job": str(job_id)}).split(
            _DETAILS_JSON, 1
        )
        return head + canonical_details(details) + tail


# The details' place in a change's canonical text: a canonical text is the rest around the
# details' own (`verify_audit` has PostgreSQL write the rest, and writes only the details).
_DETAILS = "\x00details"
_DETAILS_JSON = b'"\\u0000details"'


def _dumps(value) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # what orjson refuses (an integer beyond 64 bits): the standard library
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_details(details) -> bytes:
    """A change's details as its canonical text writes them."""
    if details == {}:
        return b"{}"
    return _dumps(_normalized(details) if _has_float(details) else details)


def digest(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


def chain_change(change, job) -> None:
    """Link a new `JobStatusChange` to its job's chain: its hashes, and the job's new head.
    The caller holds the job's row lock (or inserts the job), so no other writer moves the
    head between this read and the write."""
    change.prev_hash = job.audit_head or GENESIS
    change.hash = digest(change_canonical(change))
    job.audit_head = change.hash


def change_canonical(change) -> bytes:
    """The canonical text of a `JobStatusChange` as it is (or will be) stored."""
    return canonical_change(
        job_id=change.job_id,
        attempt=change.attempt,
        from_status=change.from_status_id,
        to_status=change.to_status_id,
        changed_at=change.changed_at,
        actor_type=change.actor_type,
        actor_id=change.actor_id,
        reason=change.reason,
        details=change.details,
        prev_hash=change.prev_hash,
    )


# Checkpoints: a Merkle tree over the moved chains' heads, leaves sorted by job id. A leaf
# names the job's creation day too, so that a bundle of some days knows which jobs it must hold.
def leaf_hash(job_id: str, created_on: str, head: str) -> bytes:
    return hashlib.sha256(b"\x00" + f"{job_id}:{created_on}:{head}".encode()).digest()


def merkle_root(leaves: list[list[str]]) -> str:
    """The root over `[job_id, created_on, head]` leaves in the order given (RFC 6962's shape:
    0x00 before a leaf, 0x01 before a node, an odd node carried up as it is)."""
    level = [leaf_hash(*leaf) for leaf in leaves]
    if not level:
        return hashlib.sha256(b"").hexdigest()
    while len(level) > 1:
        paired = [
            hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest()
            for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0].hex()


def checkpoint_statement(
    *,
    number: int,
    created_at: datetime.datetime,
    upto: datetime.datetime,
    root: str,
    leaf_count: int,
    prev: str,
    key_id: str,
) -> bytes:
    """What a checkpoint's signature covers: canonical JSON, as for a change."""
    return orjson.dumps(
        {
            "created_at": _moment(created_at),
            "key_id": key_id,
            "leaves": leaf_count,
            "number": number,
            "prev": prev,
            "root": root,
            "upto": _moment(upto),
            "v": CANONICAL_VERSION,
        },
        option=orjson.OPT_SORT_KEYS,
    )
