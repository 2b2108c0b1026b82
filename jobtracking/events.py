"""The outbox's payloads: what an event says about its job."""

from typing import Any

from jobtracking.models import ExtractionJob, Priority


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def job_event_payload(job: ExtractionJob) -> dict[str, Any]:
    """The job as clients see it, frozen at the moment of the event."""
    return {
        "id": str(job.id),
        "status": job.status_id,
        "priority": Priority(job.priority).code,
        "extractor": job.extractor.slug,
        "file_id": job.file_id,
        "file_name": job.file_name,
        "attempt": job.attempt,
        "progress": job.progress,
        "external_job_id": job.external_job_id,
        "error_code": job.error_code,
        "error_message": job.error_message,
        "metadata": job.metadata,
        "created_at": _iso(job.created_at),
        "submitted_at": _iso(job.submitted_at),
        "started_at": _iso(job.started_at),
        "completed_at": _iso(job.completed_at),
    }
