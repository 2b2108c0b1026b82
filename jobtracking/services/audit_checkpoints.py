"""Signed checkpoints of the audit chains (docs/audit.md): at a fixed interval (a django-q2
schedule, `setup_schedules`), the heads of every chain that moved since the last checkpoint,
under a Merkle root, signed with the Ed25519 key in the environment, stored and published as an
`audit.checkpoint` event in one transaction."""

import datetime
import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobtracking import states
from jobtracking.audit import GENESIS, checkpoint_statement, digest, merkle_root
from jobtracking.infra.archive_storage import save_json
from jobtracking.infra.signing import sign, signing_configured, signing_key_id
from jobtracking.models import AuditCheckpoint, JobEvent, JobStatusChange
from jobtracking.services.deliveries import deliveries_fan_out

logger = logging.getLogger(__name__)

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def checkpoint_as_dict(checkpoint: AuditCheckpoint) -> dict[str, Any]:
    """A checkpoint as JSON-able values: the statement exactly as signed, its signature, the
    leaves its root is computed over. The export's and the archive's form."""
    return {
        "number": checkpoint.number,
        "statement": checkpoint.statement,
        "signature": checkpoint.signature,
        "key_id": checkpoint.key_id,
        "leaves": checkpoint.leaves,
    }


def moved_heads(since: datetime.datetime, upto: datetime.datetime) -> list[list[str]]:
    """`[job id, creation day, head]` of every chain with a change in (since, upto], sorted by
    job id: the head is the last such change (any row of a chain anchors the rows before it)."""
    rows = (
        JobStatusChange.objects.filter(changed_at__gt=since, changed_at__lte=upto)
        .order_by("job_id", "changed_at", "id")
        .values_list("job_id", "job__created_at", "hash")
    )
    heads: dict[str, list[str]] = {}
    for job_id, created_at, row_hash in rows.iterator(chunk_size=10_000):
        day = created_at.astimezone(datetime.UTC).date().isoformat()
        heads[str(job_id)] = [str(job_id), day, row_hash]
    return [heads[job_id] for job_id in sorted(heads)]


def audit_checkpoint_create(*, now: datetime.datetime | None = None) -> AuditCheckpoint | None:
    """Sign and store the next checkpoint, covering changes up to `now` less
    `AUDIT_CHECKPOINT_LAG_SECONDS` (a change's transaction commits after its `changed_at`, so
    the newest seconds wait for the next one). None when no chain moved, or no key is set (then
    logged: checkpoints are off). Two schedulers at once: the second one's number is taken
    (primary key) and it writes nothing."""
    if not signing_configured():
        logger.warning("No audit signing key in the environment: no checkpoint written.")
        return None
    now = now or timezone.now()
    upto = now - datetime.timedelta(seconds=settings.AUDIT_CHECKPOINT_LAG_SECONDS)
    last = AuditCheckpoint.objects.order_by("-number").first()
    since = last.upto if last else EPOCH
    if upto <= since:
        return None
    leaves = moved_heads(since, upto)
    if not leaves:
        return None
    number = last.number + 1 if last else 1
    key_id = signing_key_id()
    statement = checkpoint_statement(
        number=number,
        created_at=now,
        upto=upto,
        root=merkle_root(leaves),
        leaf_count=len(leaves),
        prev=digest(last.statement.encode()) if last else GENESIS,
        key_id=key_id,
    )
    signature = sign(statement)
    checkpoint = AuditCheckpoint(
        number=number,
        created_at=now,
        upto=upto,
        statement=statement.decode(),
        signature=signature,
        key_id=key_id,
        leaves=leaves,
    )
    try:
        with transaction.atomic():
            checkpoint.save(force_insert=True)
            event = JobEvent.objects.create(
                type=states.AUDIT_CHECKPOINT,
                payload={k: v for k, v in checkpoint_as_dict(checkpoint).items() if k != "leaves"},
                created_at=now,
            )
            deliveries_fan_out([event])
    except IntegrityError:
        logger.info("Checkpoint %s was written by another scheduler.", number)
        return None
    logger.info("Audit checkpoint %s: %s chains up to %s.", number, len(leaves), upto)
    try:
        # A copy outside the database: what a rewritten or deleted history is held against.
        save_json(checkpoint_archive_path(number), checkpoint_as_dict(checkpoint))
    except Exception:
        logger.exception("Audit checkpoint %s could not be written to the archive.", number)
    return checkpoint


def checkpoint_archive_path(number: int) -> str:
    return f"audit/checkpoints/{number:010d}.json"
