"""The jobs list's CSV export: readable headers, what staff ask about a job, UTC moments."""

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from jobtracking.models import ExtractionJob, Priority
from jobtracking.services import SYSTEM, job_requeue
from tests.factories import ExtractionJobFactory, UserFactory
from tests.jobtracking.admin.conftest import JOBS

pytestmark = pytest.mark.django_db


def exported(client, *jobs: ExtractionJob) -> list[dict[str, str]]:
    response = client.post(
        JOBS, {"action": "export_csv", "_selected_action": [job.pk for job in jobs]}
    )
    assert response["Content-Type"] == "text/csv"
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


def test_export_csv_has_readable_headers_and_the_jobs_facts(root_client):
    created = datetime(2026, 11, 30, 8, 15, 2, tzinfo=UTC)
    job = ExtractionJobFactory(
        failed=True,
        priority=Priority.INTERACTIVE,
        requested_by=UserFactory(username="grants-portal"),
        error_code="extraction_failed",
        error_message="Page 3 is unreadable.",
        file_name="budget.csv",
        created_at=created,
        completed_at=created + timedelta(seconds=75.5),
    )
    with timezone.override("America/Sao_Paulo"):  # moments are UTC whatever the zone
        (row,) = exported(root_client, job)
    assert list(row) == [
        "Job ID",
        "Status",
        "Extractor",
        "File ID",
        "File name",
        "Priority",
        "Attempt",
        "Requested by",
        "Error code",
        "Error message",
        "Created (UTC)",
        "Requeued (UTC)",
        "Completed (UTC)",
        "Turnaround (seconds)",
    ]
    assert row["Job ID"] == str(job.pk) and row["Status"] == "failed"
    assert (row["Priority"], row["Requested by"]) == ("interactive", "grants-portal")
    assert row["Error code"] == "extraction_failed"
    assert row["Error message"] == "Page 3 is unreadable."
    assert row["Created (UTC)"] == "2026-11-30T08:15:02Z"
    assert row["Completed (UTC)"] == "2026-11-30T08:16:17.500000Z"
    assert (row["Requeued (UTC)"], row["Turnaround (seconds)"]) == ("", "75.5")


def test_export_csv_leaves_active_jobs_turnaround_and_a_commands_requester_empty(root_client):
    (row,) = exported(root_client, ExtractionJobFactory(processing=True, requested_by=None))
    assert (row["Completed (UTC)"], row["Turnaround (seconds)"], row["Requested by"]) == (
        "",
        "",
        "",
    )


def test_export_csv_counts_a_requeued_jobs_turnaround_from_its_requeue(root_client):
    job = ExtractionJobFactory(failed=True, created_at=timezone.now() - timedelta(days=3))
    requeued = job_requeue(job_id=job.pk, actor=SYSTEM).requeued_at
    ExtractionJob.objects.filter(pk=job.pk).update(
        status="succeeded", completed_at=requeued + timedelta(seconds=12)
    )
    (row,) = exported(root_client, job)
    assert row["Turnaround (seconds)"] == "12.0"
    assert row["Requeued (UTC)"].endswith("Z") and row["Attempt"] == "2"
