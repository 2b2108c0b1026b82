"""The audit history's hash chains and signed checkpoints: every write links its row, the
verifier finds each kind of tampering done with raw SQL (docs/audit.md), and the signing key
reaches no row, event or message."""

import io
import logging
import threading
import uuid

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.utils import timezone

from jobtracking import states
from jobtracking.audit import (
    GENESIS,
    canonical_change,
    canonical_details,
    change_canonical,
    digest,
)
from jobtracking.infra.signing import SigningKeyError, public_key_bytes, sign
from jobtracking.models import (
    ArchivedJob,
    AuditCheckpoint,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    Priority,
    WebhookDelivery,
)
from jobtracking.services import SYSTEM, Actor, job_cancel, job_transition, jobs_set_priority
from jobtracking.services.audit_checkpoints import (
    audit_checkpoint_create,
    checkpoint_archive_path,
    checkpoint_as_dict,
)
from jobtracking.services.audit_verification import audit_verify
from jobtracking.services.retention import jobs_purge
from tests.factories import ExtractorFactory, UserFactory, WebhookSubscriptionFactory, api_job
from tests.jobtracking.services.test_archive import finished_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_lag(settings):
    """Checkpoints cover changes up to now (in service, they wait a minute for commits)."""
    settings.AUDIT_CHECKPOINT_LAG_SECONDS = 0


@pytest.fixture
def signing_key(monkeypatch) -> str:
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex()
    monkeypatch.setenv("AUDIT_SIGNING_KEY", raw)
    monkeypatch.delenv("AUDIT_PUBLIC_KEY", raising=False)
    return raw


def history(job) -> list[JobStatusChange]:
    return list(JobStatusChange.objects.filter(job=job).order_by("id"))


def verify(**kwargs):
    return audit_verify(public_key=public_key_bytes(), **kwargs)


def jobs_with_history(count: int = 3) -> list[ExtractionJob]:
    extractor = ExtractorFactory()
    jobs = [api_job(extractor, f"file-{n}") for n in range(count)]
    for job in jobs:
        job_transition(job_id=job.pk, to_status=states.SUBMITTING, actor=SYSTEM)
        job_transition(job_id=job.pk, to_status=states.SUBMITTED, actor=SYSTEM)
    return jobs


def sql(statements: str, params=()) -> None:
    with connection.cursor() as cursor:
        for statement in statements.split("; "):
            cursor.execute(statement, params)


def test_audit_chain_links_each_row_to_the_one_before(signing_key):
    user = UserFactory()
    job = api_job(ExtractorFactory())
    job_transition(job_id=job.pk, to_status=states.SUBMITTING, actor=SYSTEM)
    job_cancel(job_id=job.pk, actor=Actor("admin", user), reason="wrong file")
    rows = history(job)
    assert [row.to_status_id for row in rows] == ["pending", "submitting", "cancelled"]
    assert [row.prev_hash for row in rows] == [GENESIS, rows[0].hash, rows[1].hash]
    for row in rows:  # read back from the database: the hash is of what is stored
        assert row.hash == digest(change_canonical(row))
    job.refresh_from_db()
    assert job.audit_head == rows[-1].hash
    assert b'"reason":"wrong file"' in change_canonical(rows[-1])
    assert verify().broken is None


def test_audit_chain_canonical_form_survives_jsonb(signing_key):
    """jsonb gives 1e20 back as an integer and reorders keys, and PostgreSQL writes the text
    around the details when verifying: the canonical form of what was written and of what is
    read back agree."""
    job = api_job(ExtractorFactory())
    details = {"z": 1e20, "a": [1.0, 0.1, -2.5e-7, "é\u2028"], "nested": {"b": None, "a": True}}
    # Every character JSON escapes, and some it does not: PostgreSQL writes the reason when
    # verify_audit reads it back.
    reason = "".join(map(chr, range(1, 32))) + '"\\/é\u2028\u007f😀 done'
    job_transition(
        job_id=job.pk, to_status=states.CANCELLED, actor=SYSTEM, details=details, reason=reason
    )
    assert verify().broken is None
    assert history(job)[-1].details["z"] == 10**20


@pytest.mark.parametrize(
    "details",
    [
        {"external_status": "running", "http_status": 200, "progress": 50},
        {"z": 1e20, "a": [1.0, 0.1, {"y": 2.0, "b": None}], "é\u2028": '\x00"😀'},
        {"big": 2**64, "list": [1.0, -(2**70)]},  # beyond orjson: the standard library's
        {1: "a key that is not a string", "b": {2: 3.0}},
    ],
)
def test_audit_canonical_change_writes_details_as_verify_audit_does(details):
    """verify_audit has PostgreSQL write the text around the details and writes them with
    `canonical_details`: the writer's text must be that, byte for byte."""
    row = {
        "job_id": uuid.uuid4(),
        "attempt": 1,
        "from_status": states.SUBMITTED,
        "to_status": states.PROCESSING,
        "changed_at": timezone.now(),
        "actor_type": "system",
        "actor_id": None,
        "reason": "",
        "prev_hash": GENESIS,
    }
    head, tail = canonical_change(**row, details={}).split(b'"details":{}')
    assert canonical_change(**row, details=details) == (
        head + b'"details":' + canonical_details(details) + tail
    )


def test_audit_chain_has_no_fork_under_concurrent_writers(seeded_statuses, signing_key):
    """Two writers on one chain at once: the job's row lock orders them, each links to the
    other's row."""
    job = api_job(ExtractorFactory())
    barrier = threading.Barrier(2)

    def write(priority: Priority) -> None:
        barrier.wait()
        for _ in range(10):
            jobs_set_priority(job_ids=[job.pk], priority=priority, actor=SYSTEM)
        connections.close_all()

    threads = [
        threading.Thread(target=write, args=(p,)) for p in (Priority.BULK, Priority.INTERACTIVE)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = history(job)
    assert len(rows) == 21
    assert len({row.prev_hash for row in rows}) == 21  # no two rows follow the same row
    assert verify().broken is None


@pytest.mark.parametrize(
    "tamper, where",
    [
        # An edited field.
        ("UPDATE {change} SET reason = 'nothing happened' WHERE id = {second}", "hash of its"),
        # A row deleted from the middle, and from the end.
        ("DELETE FROM {change} WHERE id = {second}", "previous hash"),
        ("DELETE FROM {change} WHERE id = {last}", "head of its chain"),
        # A forged row inserted, copying a real one's links.
        (
            "INSERT INTO {change} (job_id, from_status_id, to_status_id, attempt, changed_at, "
            "actor_type, reason, details, prev_hash, hash) SELECT job_id, from_status_id, "
            "'cancelled', attempt, changed_at, actor_type, 'forged', details, prev_hash, hash "
            "FROM {change} WHERE id = {second}",
            "previous hash",
        ),
        # Two rows swapped (their ids).
        (
            "UPDATE {change} SET id = -1 WHERE id = {second}; "
            "UPDATE {change} SET id = {second} WHERE id = {last}; "
            "UPDATE {change} SET id = {last} WHERE id = -1",
            "previous hash",
        ),
        # A row's hash recomputed after an edit: the next row no longer follows it.
        ("UPDATE {change} SET hash = repeat('a', 64) WHERE id = {second}", "hash of its"),
    ],
    ids=["edit", "delete-middle", "delete-last", "insert", "reorder", "rehash"],
)
def test_verify_audit_finds_raw_sql_tampering(signing_key, tamper, where):
    jobs = jobs_with_history()
    rows = history(jobs[1])
    sql(tamper.format(change=JobStatusChange._meta.db_table, second=rows[1].pk, last=rows[-1].pk))
    broken = verify().broken
    assert broken is not None and where in broken.where
    assert str(jobs[1].pk) in broken.where
    with pytest.raises(CommandError, match="Broken link: job") as raised:
        call_command("verify_audit")
    assert raised.value.returncode == 1
    # The other chains are sound, and --job says so.
    call_command("verify_audit", "--job", str(jobs[0].pk))


def test_verify_audit_finds_a_deleted_job_against_an_earlier_checkpoint(signing_key):
    jobs = jobs_with_history()
    checkpoint = audit_checkpoint_create()
    assert [leaf[0] for leaf in checkpoint.leaves] == sorted(str(job.pk) for job in jobs)
    assert verify().broken is None
    sql(f"DELETE FROM {JobEvent._meta.db_table} WHERE job_id = %s", [jobs[2].pk])
    sql(f"DELETE FROM {JobStatusChange._meta.db_table} WHERE job_id = %s", [jobs[2].pk])
    sql(f"DELETE FROM {ExtractionJob._meta.db_table} WHERE id = %s", [jobs[2].pk])
    broken = verify().broken
    assert broken.where == f"checkpoint 1: job {jobs[2].pk}"
    assert broken.expected.startswith("a change with hash")


def test_audit_checkpoint_is_written_to_the_archive_as_signed(signing_key, archive):
    jobs_with_history()
    checkpoint = audit_checkpoint_create()

    stored = orjson.loads((archive / checkpoint_archive_path(checkpoint.number)).read_bytes())
    assert stored == orjson.loads(orjson.dumps(checkpoint_as_dict(checkpoint)))
    assert stored["signature"] == checkpoint.signature


def test_verify_audit_finds_a_purged_jobs_signed_head_in_its_archived_record(
    signing_key, archive, django_capture_on_commit_callbacks
):
    kept, purged = finished_job("grant-1/kept.csv"), finished_job("grant-2/purged.csv")
    audit_checkpoint_create()
    with django_capture_on_commit_callbacks(execute=True):
        assert jobs_purge(ids=[purged.pk]) == 1
    assert verify().broken is None

    # An index row is no alibi: the record it names must hold the head the checkpoint signed.
    entry = ArchivedJob.objects.get(pk=purged.pk)
    sql(
        f"DELETE FROM {WebhookDelivery._meta.db_table} WHERE event_id IN "
        f"(SELECT id FROM {JobEvent._meta.db_table} WHERE job_id = %s)",
        [kept.pk],
    )
    sql(f"DELETE FROM {JobEvent._meta.db_table} WHERE job_id = %s", [kept.pk])
    sql(f"DELETE FROM {JobStatusChange._meta.db_table} WHERE job_id = %s", [kept.pk])
    sql(f"DELETE FROM {ExtractionResult._meta.db_table} WHERE job_id = %s", [kept.pk])
    sql(f"DELETE FROM {ExtractionJob._meta.db_table} WHERE id = %s", [kept.pk])
    entry.pk = kept.pk
    entry.save()
    assert verify().broken.where == f"checkpoint 1: job {kept.pk}"


def test_verify_audit_finds_a_rewritten_chain_against_an_earlier_checkpoint(signing_key):
    """Every row of a chain rewritten consistently, its head too: only the checkpoint knows."""
    jobs = jobs_with_history()
    audit_checkpoint_create()
    prev = GENESIS
    for row in history(jobs[0]):
        row.reason, row.prev_hash = "rewritten", prev
        prev = digest(change_canonical(row))
        sql(
            f"UPDATE {JobStatusChange._meta.db_table} SET reason = %s, prev_hash = %s, hash = %s "
            "WHERE id = %s",
            [row.reason, row.prev_hash, prev, row.pk],
        )
    sql(
        f"UPDATE {ExtractionJob._meta.db_table} SET audit_head = %s WHERE id = %s",
        [prev, jobs[0].pk],
    )
    broken = verify().broken
    assert broken.where == f"checkpoint 1: job {jobs[0].pk}"


def test_audit_checkpoints_chain_sign_and_cover_only_moved_chains(signing_key):
    jobs = jobs_with_history(2)
    first = audit_checkpoint_create()
    assert audit_checkpoint_create() is None  # nothing moved since
    job_cancel(job_id=jobs[1].pk, actor=SYSTEM)
    second = audit_checkpoint_create()
    assert second.number == 2
    assert second.leaves == [
        [str(jobs[1].pk), jobs[1].created_at.date().isoformat(), history(jobs[1])[-1].hash]
    ]
    assert f'"prev":"{digest(first.statement.encode())}"' in second.statement
    event = JobEvent.objects.get(type=states.AUDIT_CHECKPOINT, payload__number=2)
    assert event.payload["signature"] == second.signature
    assert checkpoint_as_dict(second)["leaves"] == second.leaves
    assert verify().checkpoints == 2


@pytest.mark.parametrize(
    "tamper, where",
    [
        (
            "UPDATE {cp} SET statement = replace(statement, '\"leaves\":2', '\"leaves\":1')",
            "checkpoint 1",
        ),
        ("UPDATE {cp} SET leaves = '[]'", "checkpoint 1: signed root"),
        ("DELETE FROM {cp} WHERE number = 1", "checkpoint 2: previous checkpoint"),
    ],
    ids=["statement", "leaves", "deleted"],
)
def test_verify_audit_finds_tampered_checkpoints(signing_key, tamper, where):
    jobs = jobs_with_history(2)
    audit_checkpoint_create()
    job_cancel(job_id=jobs[0].pk, actor=SYSTEM)
    audit_checkpoint_create()
    sql(tamper.format(cp=AuditCheckpoint._meta.db_table))
    broken = verify().broken
    assert broken is not None and broken.where.startswith(where)


def test_verify_audit_refuses_a_checkpoint_signed_by_another_key(signing_key, monkeypatch):
    jobs_with_history(1)
    audit_checkpoint_create()
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert audit_verify(public_key=other).broken.expected == "a valid signature by the public key"


def test_audit_signing_key_reaches_no_row_event_or_message(signing_key, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    jobs_with_history(1)
    checkpoint = audit_checkpoint_create()
    stored = [checkpoint_as_dict(checkpoint), *JobEvent.objects.values_list("payload", flat=True)]
    assert signing_key not in repr(stored) and signing_key not in caplog.text
    monkeypatch.setenv("AUDIT_SIGNING_KEY", signing_key[:-2] + "zz")
    with pytest.raises(SigningKeyError) as raised:
        sign(b"x")
    assert signing_key[:-2] not in str(raised.value)


def test_audit_checkpoint_without_a_key_writes_nothing(monkeypatch):
    monkeypatch.delenv("AUDIT_SIGNING_KEY", raising=False)
    jobs_with_history(1)
    assert audit_checkpoint_create() is None
    assert not AuditCheckpoint.objects.exists()


def test_verify_audit_passes_history_older_than_the_chain_and_chains_on_from_it(signing_key):
    """Rows the migration found have empty hashes: skipped before a job's first chained row,
    which starts from GENESIS; an emptied row after it is a break."""
    jobs = jobs_with_history(2)
    change, job_table = JobStatusChange._meta.db_table, ExtractionJob._meta.db_table
    sql(f"UPDATE {change} SET hash = '', prev_hash = ''")
    sql(f"UPDATE {job_table} SET audit_head = ''")
    assert verify().unchained == 6
    job_cancel(job_id=jobs[0].pk, actor=SYSTEM)
    assert history(jobs[0])[-1].prev_hash == GENESIS
    result = verify()
    assert (result.broken, result.rows, result.unchained) == (None, 1, 6)
    last = history(jobs[0])[-1]
    sql(f"UPDATE {change} SET hash = '', prev_hash = '' WHERE id = %s", [last.pk])
    assert "head of its chain" in verify().broken.where


def test_verify_audit_since_walks_what_moved_and_later_checkpoints(signing_key):
    jobs = jobs_with_history(2)
    audit_checkpoint_create()
    since = timezone.now()
    job_cancel(job_id=jobs[0].pk, actor=SYSTEM)
    audit_checkpoint_create()
    result = audit_verify(public_key=public_key_bytes(), since=since)
    assert (result.broken, result.rows, result.chains, result.checkpoints) == (None, 4, 1, 1)
    out = io.StringIO()
    call_command("verify_audit", "--since", since.isoformat(), stdout=out)
    assert "Verified 4 change(s) in 1 chain(s) and 1 checkpoint(s)" in out.getvalue()
    sql(f"DELETE FROM {JobStatusChange._meta.db_table} WHERE job_id = %s", [jobs[1].pk])
    assert audit_verify(public_key=public_key_bytes(), since=since).broken is None  # not moved
    assert verify().broken.where == f"job {jobs[1].pk}: head of its chain"


def test_audit_checkpoint_event_reaches_only_subscriptions_that_see_every_job(signing_key):
    operators = WebhookSubscriptionFactory()  # no owner: the operators' own
    clients = WebhookSubscriptionFactory(created_by=UserFactory())
    jobs_with_history(1)
    checkpoint = audit_checkpoint_create()
    event = JobEvent.objects.get(type=states.AUDIT_CHECKPOINT)
    assert (event.job_id, event.batch_id, event.payload["number"]) == (None, None, 1)
    assert event.payload["statement"] == checkpoint.statement
    delivered = set(
        WebhookDelivery.objects.filter(event=event).values_list("subscription", flat=True)
    )
    assert delivered == {operators.pk} and clients.pk not in delivered
