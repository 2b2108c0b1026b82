"""Archive before purge: each purged job's full record is written, read back and confirmed by a
manifest before the job is deleted; the index says where it went, and the record reads back."""

import gzip
import hashlib
import io
import json
import threading
import uuid

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from jobtracking.engine.tasks import purge_expired_jobs
from jobtracking.infra import archive_storage
from jobtracking.models import (
    ArchivedJob,
    Batch,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
)
from jobtracking.selectors import archived_job_record, archived_job_search
from jobtracking.services import SYSTEM, job_cancel
from jobtracking.services import archive as archive_module
from jobtracking.services import retention as retention_module
from jobtracking.services.archive import ArchiveRun
from jobtracking.services.batch_completion import batch_events_write
from jobtracking.services.retention import jobs_purge
from tests.factories import (
    BatchFactory,
    ExtractionResultFactory,
    WebhookDeliveryFactory,
    WebhookSubscriptionFactory,
    api_job,
)

pytestmark = pytest.mark.django_db


def finished_job(file_id: str = "grant-7/budget.csv") -> ExtractionJob:
    """A job made and ended through the services, with an inline result, a result in a file, a
    delivered webhook and one still pending."""
    WebhookSubscriptionFactory()
    job = api_job(file_id=file_id)
    job_cancel(job_id=job.pk, actor=SYSTEM, reason="closing the grant")
    ExtractionResultFactory(job=job, attempt=1)
    stored = default_storage.save("results/big.json", ContentFile(b'{"pages": []}'))
    ExtractionResultFactory(job=job, attempt=2, payload=None, payload_file=stored)
    WebhookDeliveryFactory(event=JobEvent.objects.filter(job=job).first(), state="delivered")
    return job


def columns(model) -> set[str]:
    return {f.attname for f in model._meta.concrete_fields}


def test_jobs_purge_archives_the_whole_record_before_deleting(
    archive, django_capture_on_commit_callbacks
):
    job = finished_job()
    changes = list(JobStatusChange.objects.filter(job=job).values())
    with django_capture_on_commit_callbacks(execute=True):
        assert jobs_purge(ids=[job.pk]) == 1
    assert not ExtractionJob.objects.filter(pk=job.pk).exists()

    entry = ArchivedJob.objects.get(pk=job.pk)
    assert (entry.file_id, entry.status, entry.storage) == (job.file_id, "cancelled", "archive")
    day = f"{job.created_at:%Y/%m/%d}"
    assert entry.path.startswith(f"jobs/{day}/") and entry.path.endswith(".jsonl.gz")
    lines = gzip.decompress((archive / entry.path).read_bytes()).splitlines()
    record = json.loads(lines[entry.line])
    assert json.loads(archived_job_record(entry)) == record

    assert record["job"]["id"] == str(job.pk) and set(record["job"]) == columns(ExtractionJob)
    # Every column of every audit row, in order: columns added later go along unchanged.
    assert [set(row) for row in record["status_changes"]] == [columns(JobStatusChange)] * 2
    assert [row["id"] for row in record["status_changes"]] == [c["id"] for c in changes]
    assert [row["to_status_id"] for row in record["status_changes"]] == ["pending", "cancelled"]
    assert [e["type"] for e in record["events"]] == ["job.created", "job.cancelled"]
    assert record["deliveries"]["delivered"]["count"] == 1
    inline, in_file = record["results"]
    assert inline["payload"] == {"pages": [{"number": 1, "text": "Total: 10"}]}
    copied = in_file["archived_files"]["payload_file"]
    assert (archive / copied["path"]).read_bytes() == b'{"pages": []}'
    assert not default_storage.exists(in_file["payload_file"])  # the original went with the job

    manifest = json.loads((archive / entry.manifest).read_bytes())
    data, attachment = manifest["files"]
    assert data["path"] == entry.path
    assert data["sha256"] == hashlib.sha256((archive / entry.path).read_bytes()).hexdigest()
    assert (data["jobs"], data["status_changes"], data["results"], data["events"]) == (1, 2, 2, 2)
    assert attachment["path"] == copied["path"] and attachment["sha256"] == copied["sha256"]


def test_a_file_that_reads_back_wrong_deletes_nothing(archive, monkeypatch):
    job = finished_job()
    monkeypatch.setattr(archive_storage, "stored_sha256", lambda *args: "0" * 64)
    with pytest.raises(archive_storage.ArchiveError):
        jobs_purge(ids=[job.pk])
    assert ExtractionJob.objects.filter(pk=job.pk).exists()
    assert JobStatusChange.objects.filter(job=job).count() == 2
    assert ExtractionResult.objects.filter(job=job).count() == 2
    assert not ArchivedJob.objects.exists()


def test_one_run_writes_parts_per_chunk_and_day(archive):
    jobs = [finished_job(f"file-{n}") for n in range(4)]
    run = ArchiveRun()
    assert jobs_purge(ids=[job.pk for job in jobs[:3]], run=run) == 3
    assert jobs_purge(ids=[jobs[3].pk], run=run) == 1
    entries = ArchivedJob.objects.order_by("job_id")
    # A chunk is two parts, its jobs shared in id order; a part's small records share a member.
    assert [(e.line, e.offset) for e in entries] == [(0, 0), (1, 0), (0, 0), (0, 0)]
    assert [e.path.rsplit("/", 1)[1] for e in entries] == [
        f"{run.id}-00001.jsonl.gz",
        f"{run.id}-00001.jsonl.gz",
        f"{run.id}-00002.jsonl.gz",
        f"{run.id}-00003.jsonl.gz",
    ]
    assert [json.loads(archived_job_record(e))["job"]["file_id"] for e in entries] == [
        "file-0",
        "file-1",
        "file-2",
        "file-3",
    ]


def test_archive_lookup_says_when_and_where_by_job_or_file(archive):
    job = finished_job("grant-9/report.pdf")
    call_command("purge_jobs", stdout=io.StringIO())
    entry = ArchivedJob.objects.get(pk=job.pk)
    for term in (str(job.pk), "grant-9/report.pdf"):
        out = io.StringIO()
        call_command("archive_lookup", term, "--record", stdout=out)
        said, record = out.getvalue().splitlines()
        assert said.startswith(f"Job {job.pk} (file grant-9/report.pdf, cancelled, created ")
        assert f"to storage 'archive': {entry.path}, line 0 (its gzip member at byte 0)" in said
        assert json.loads(record)["job"]["id"] == str(job.pk)
    with pytest.raises(CommandError, match="No archived job"):
        call_command("archive_lookup", "no-such-file", stdout=io.StringIO())


def test_purge_without_archiving_writes_nothing(archive, settings):
    settings.JOBS_ARCHIVE_BEFORE_PURGE = False
    job = finished_job()
    assert jobs_purge(ids=[job.pk]) == 1
    assert not ArchivedJob.objects.exists() and not archive.exists()


def test_what_happened_to_a_file_is_an_index_lookup_in_the_archive():
    # Enough rows, analysed, that the planner weighs its indexes.
    now = timezone.now()
    ArchivedJob.objects.bulk_create(
        ArchivedJob(
            job_id=uuid.uuid4(),
            file_id=f"file-{n}",
            external_job_id=f"ext-{n}",
            status="succeeded",
            created_at=now,
            archived_at=now,
            storage="archive",
            path="jobs/x.jsonl.gz",
            line=n,
            offset=n,
            manifest="jobs/x.manifest.json",
        )
        for n in range(5000)
    )
    query = archived_job_search(ArchivedJob.objects.all(), "file-7")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ArchivedJob._meta.db_table}")
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "archived_file_id_idx" in plan and "archived_external_id_idx" in plan
    assert "Seq Scan" not in plan


def test_the_daily_purge_archives_everything_as_one_run(archive):
    for n in range(3):
        finished_job(f"daily-{n}")
    assert purge_expired_jobs() == 3
    assert not ExtractionJob.objects.exists()
    runs = {e.path.rsplit("/", 1)[1].rsplit("-", 1)[0] for e in ArchivedJob.objects.all()}
    assert len(runs) == 1 and ArchivedJob.objects.count() == 3


def test_a_column_added_later_is_archived_with_no_code_change(archive):
    """As the audit's hash columns will be: a column the models do not know yet."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {JobStatusChange._meta.db_table} "
            "ADD COLUMN row_hash bytea NOT NULL DEFAULT '\\x0102ff'::bytea"
        )
    job = finished_job()
    assert jobs_purge(ids=[job.pk]) == 1
    record = json.loads(archived_job_record(ArchivedJob.objects.get(pk=job.pk)))
    assert [row["row_hash"] for row in record["status_changes"]] == ["\\x0102ff"] * 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_outside_a_transaction_the_archive_is_written_beside_the_deletes(archive, monkeypatch):
    """On a connection of its own, in a thread, while the purge's transaction deletes the jobs'
    children: none of which commits unless the archive is confirmed."""
    jobs = [finished_job(f"beside-{n}") for n in range(2)]
    threads = []
    written = archive_module.jobs_archive

    def jobs_archive(*args, **kwargs):
        threads.append(threading.current_thread())
        return written(*args, **kwargs)

    monkeypatch.setattr(archive_module, "jobs_archive", jobs_archive)
    monkeypatch.setattr(archive_storage, "stored_sha256", lambda *args: "0" * 64)
    with pytest.raises(archive_storage.ArchiveError):
        jobs_purge(ids=[job.pk for job in jobs])
    assert threads and threading.main_thread() not in threads
    assert ExtractionJob.objects.count() == 2 and not ArchivedJob.objects.exists()
    assert JobStatusChange.objects.filter(job__in=jobs).count() == 4
    assert JobEvent.objects.filter(job__in=jobs).count() == 4

    monkeypatch.undo()
    assert jobs_purge(ids=[job.pk for job in jobs]) == 2
    assert not ExtractionJob.objects.exists()
    for job in jobs:
        record = json.loads(archived_job_record(ArchivedJob.objects.get(pk=job.pk)))
        assert record["job"]["file_id"] == job.file_id
        assert len(record["status_changes"]) == 2 and len(record["events"]) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_on_another_database_the_purge_refuses_with_the_archives_reason(archive, monkeypatch):
    """Outside a transaction too: the archive is not started beside the deletes, so its reason
    comes first, not a statement that database does not speak."""
    job = finished_job()
    monkeypatch.setattr(connection, "vendor", "sqlite")
    with pytest.raises(archive_storage.ArchiveError, match="needs PostgreSQL"):
        jobs_purge(ids=[job.pk])
    monkeypatch.undo()
    assert ExtractionJob.objects.filter(pk=job.pk).exists()
    assert JobStatusChange.objects.filter(job=job).count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_a_run_keeps_its_writers_and_deletes_the_jobs_before_the_wait(archive, monkeypatch):
    """Chunk after chunk, a run's parts are written by the same threads on the same
    connections, which its end closes; and the jobs are deleted while the parts are written."""
    jobs = [finished_job(f"kept-{n}") for n in range(4)]
    writers, deleted = [], threading.Event()
    written, delete = archive_module.jobs_archive, retention_module.jobs_delete_indexed

    def jobs_archive(*args, **kwargs):
        assert deleted.wait(timeout=10)  # not waited for before the jobs' delete
        connection.ensure_connection()
        writers.append((threading.current_thread(), connection.connection))
        return written(*args, **kwargs)

    def jobs_delete_indexed(jobs):
        gone = delete(jobs)
        deleted.set()
        return gone

    monkeypatch.setattr(archive_module, "jobs_archive", jobs_archive)
    monkeypatch.setattr(retention_module, "jobs_delete_indexed", jobs_delete_indexed)
    with ArchiveRun() as run:
        assert jobs_purge(ids=[job.pk for job in jobs[:2]], run=run) == 2
        deleted.clear()
        assert jobs_purge(ids=[job.pk for job in jobs[2:]], run=run) == 2
    assert len(set(writers)) == 2 and set(writers[:2]) == set(writers[2:])
    assert not any(thread.is_alive() or not kept.closed for thread, kept in writers)
    assert sorted(ArchivedJob.objects.values_list("file_id", flat=True)) == [
        f"kept-{n}" for n in range(4)
    ]


def test_the_index_keeps_the_jobs_fields_as_they_were(archive):
    """Taken from the deleted rows and read back by PostgreSQL: quotes, commas, braces and
    backslashes, a text "NULL", a null and a time each arrive as they were."""
    job = finished_job('grant "7", {budget}\\2026.csv')
    ExtractionJob.objects.filter(pk=job.pk).update(external_job_id="NULL")
    job.refresh_from_db()
    assert jobs_purge(ids=[job.pk]) == 1
    entry = ArchivedJob.objects.get(pk=job.pk)
    indexed = archive_module.INDEXED.items()
    assert [getattr(entry, ArchivedJob._meta.get_field(own).attname) for own, _ in indexed] == [
        getattr(job, ExtractionJob._meta.get_field(taken).attname) for _, taken in indexed
    ]
    assert entry.file_id == 'grant "7", {budget}\\2026.csv' and entry.external_job_id == "NULL"
    assert entry.requested_by_id is None and entry.completed_at is not None


def checked_at_once() -> bool:
    """Whether this transaction checks its foreign keys as each statement runs: a result of a
    job that does not exist is refused at once (else only at commit: it is taken back here)."""
    try:
        with transaction.atomic():
            ExtractionResult.objects.create(
                job_id=uuid.uuid4(), attempt=1, payload={}, content_sha256="", size_bytes=0
            )
    except IntegrityError:
        return True
    ExtractionResult.objects.filter(content_sha256="", size_bytes=0).delete()
    return False


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_beside_the_parts_the_deletes_are_checked_before_the_wait(archive, monkeypatch):
    """The deletes' foreign-key checks run with the deletes, while the parts are written, not
    at commit after the wait; a batch's too, which goes with its last job."""
    job = finished_job("checked")
    batch = BatchFactory(closed=True)
    ExtractionJob.objects.filter(pk=job.pk).update(batch=batch)
    batch_events_write([batch], "batch.created")
    at_the_wait = []
    waited = retention_module.archived_jobs_insert

    def archived_jobs_insert(parts, jobs):
        at_the_wait.append(checked_at_once())
        return waited(parts, jobs)

    monkeypatch.setattr(retention_module, "archived_jobs_insert", archived_jobs_insert)
    assert jobs_purge(ids=[job.pk]) == 1
    assert at_the_wait == [True]
    assert not Batch.objects.exists() and not JobEvent.objects.exists()
    assert ArchivedJob.objects.get().file_id == "checked"


def test_inside_a_transaction_the_purge_leaves_its_checks_deferred(archive):
    """A caller's transaction (which the parts cannot be written beside) keeps its foreign-key
    checks for its commit: the purge's setting would outlive the purge there."""
    job = finished_job("deferred")
    assert jobs_purge(ids=[job.pk]) == 1
    assert not checked_at_once()


def test_a_record_without_files_is_put_together_as_one_with_files(archive):
    """PostgreSQL puts together the records of jobs without a stored file, Python those with
    one: the same document either way."""
    with_file, without = finished_job("with-file"), finished_job("without")
    ExtractionResult.objects.filter(job=without, attempt=2).delete()
    assert jobs_purge(ids=[with_file.pk, without.pk]) == 2
    lines = {
        job.file_id: archived_job_record(ArchivedJob.objects.get(pk=job.pk))
        for job in (with_file, without)
    }
    records = {file_id: json.loads(line) for file_id, line in lines.items()}
    for record in records.values():
        assert list(record) == [
            "archive_format",
            "job",
            "status_changes",
            "results",
            "events",
            "deliveries",
        ]
        assert record["archive_format"] == 2 and record["deliveries"]["delivered"]["count"] == 1
    assert lines["without"].count(b"\n") == 1 and lines["without"].endswith(b"\n")
    assert [len(records[f]["results"]) for f in ("with-file", "without")] == [2, 1]
    assert records["without"]["job"]["id"] == str(without.pk)
    assert set(records["without"]["job"]) == columns(ExtractionJob)
    assert [set(row) for row in records["without"]["status_changes"]] == [
        columns(JobStatusChange)
    ] * 2
    assert records["without"]["results"][0]["payload"] == {
        "pages": [{"number": 1, "text": "Total: 10"}]
    }
    entry = ArchivedJob.objects.get(pk=without.pk)
    counts = json.loads((archive / entry.manifest).read_bytes())["files"][0]
    delivered = sum(state["count"] for state in records["without"]["deliveries"].values())
    assert [counts[key] for key in ("jobs", "status_changes", "results", "events")] == [1, 2, 1, 2]
    assert counts["deliveries"] == delivered
