"""A job as clients see it, written in one place: the API's job (`ExtractionJobSerializer`),
every event's payload (the outbox, so the pull feed and webhook bodies too) and the OpenAPI
document's example job all come from `JobRepresentation`.

Moments are written one way everywhere (`moment`): ISO 8601 in UTC with a "Z", with
microseconds when the moment has any, whatever the current time zone."""

import datetime
import functools
from typing import Any

from django.urls import reverse

from extraction.errors import REQUEUE_ADVICE, SOURCE_CODES
from extraction.registry import service_fetches_source
from jobtracking import states
from jobtracking.models import Batch, ExtractionJob, FileFactsOrigin, Priority

# The moments `JobRepresentation` writes, in the order clients read them.
DATETIME_FIELDS = (
    "created_at",
    "submitted_at",
    "started_at",
    "completed_at",
    "updated_at",
    "deadline_at",
    "held_since",
)


def moment(value: datetime.datetime | None) -> str | None:
    """`value` as clients read moments: what DRF's DateTimeField writes in UTC
    (`api.serializers.UtcDateTimeField`), "2026-12-03T09:15:02.118000Z"."""
    if value is None:
        return None
    # An aware moment in UTC always ends "+00:00".
    return value.astimezone(datetime.UTC).isoformat()[:-6] + "Z"


@functools.cache
def jobs_path() -> str:
    return reverse("api:job-list")


@functools.cache
def batches_path() -> str:
    return reverse("api:batch-list")


def batches_url_beside(jobs_url: str) -> str:
    """The batches' URL on the same service as `jobs_url` (absolute or a path)."""
    return jobs_url[: len(jobs_url) - len(jobs_path())] + batches_path()


# Where a job's content type, size and SHA-256 come from (`file_facts`).
UPLOAD, CLIENT = "upload", "client"
FILE_FACTS_ORIGINS = (UPLOAD, *FileFactsOrigin.values, CLIENT)
MEASURED = {
    UPLOAD: "Measured by the service as the upload was stored.",
    FileFactsOrigin.SERVICE: "Measured by the service as it fetched the URL; the extractor was "
    "sent those very bytes.",
    FileFactsOrigin.EXTRACTOR: "As the extractor reported the document it fetched from the URL.",
}


def file_facts(job: ExtractionJob) -> tuple[str | None, str]:
    """(origin, note): who measured the job's `content_type`, `file_size` and `file_sha256`
    (one of `FILE_FACTS_ORIGINS`, None while nobody has), and a sentence saying so, or why
    they are not known (yet)."""
    if job.upload:
        return UPLOAD, MEASURED[UPLOAD]
    if job.file_facts_origin:
        origin = str(job.file_facts_origin)  # the plain word, though a move just set the member
        return origin, MEASURED[origin]
    fetches = service_fetches_source(job.extractor.adapter)
    learnt = (
        "the service measures them as it fetches the URL to submit the job"
        if fetches
        else "they are learnt from the extractor when the job succeeds, if it reports them"
    )
    if job.content_type or job.file_size is not None or job.file_sha256:
        unchecked = "As the client declared them, not checked"
        return CLIENT, f"{unchecked}." if job.is_terminal else f"{unchecked}: {learnt}."
    if not job.is_terminal:
        return None, f"Not known yet: {learnt}."
    if not fetches:
        if job.status_id == states.SUCCEEDED:
            return None, "Not known: the extractor did not report the document it fetched."
        return None, "Not known: the job ended before the extractor reported the document."
    if job.error_code in SOURCE_CODES:
        return None, "Not known: the service could not fetch the URL (see the error)."
    if job.external_job_id:  # submitted as a URL, before the service fetched sources itself
        return None, "Not known: the extractor fetched the URL itself and does not report it."
    return None, "Not known: the job ended before the service fetched the URL."


def _seconds(start, end) -> float | None:
    return (end - start).total_seconds() if start and end else None


class JobRepresentation:
    """Writes jobs as clients see them. Links start at `jobs_url`: the API passes the absolute
    URL of its request; events, written by workers that have no request (and no setting names
    the service's public address), get the API's path, `/api/v1/jobs/<id>/`.

    Make one per response, or one for a process's events: it reads the jobs URL once and
    writes each moment once for the jobs it writes, which share many (a bulk create's creation
    moment, the `now` of a batch of transitions). `moments_kept` bounds that memory for an
    instance that lives long; a response's keeps them all."""

    def __init__(self, *, jobs_url: str | None = None, moments_kept: int | None = None) -> None:
        self.jobs_url = jobs_path() if jobs_url is None else jobs_url
        self.moment = functools.lru_cache(maxsize=moments_kept)(moment)

    def __call__(self, job: ExtractionJob) -> dict[str, Any]:
        """The job: a plain dict build (no serializer field per job), reading only what the job
        has loaded when its extractor and requester are (`select_related`, or cached at
        creation)."""
        pk, write = str(job.pk), self.moment
        return {
            "id": pk,
            "status": job.status_id,
            "priority": Priority(job.priority).code,
            "extractor": job.extractor.slug,
            "file_id": job.file_id,
            "file_name": job.file_name,
            "content_type": job.content_type,
            "file_size": job.file_size,
            "file_sha256": job.file_sha256,
            "file_facts": self.file_facts(job),
            "expected_pages": job.expected_pages,
            "source_url": job.source_url,
            "has_upload": self.has_upload(job),
            "options": job.options,
            "metadata": job.metadata,
            "reuse_result": job.reuse_result,
            "reused_from": self.reused_from(job),
            "requested_by": job.requested_by.username if job.requested_by_id else None,
            "batch": str(job.batch_id) if job.batch_id else None,
            "attempt": job.attempt,
            "submit_attempts": job.submit_attempts,
            "poll_count": job.poll_count,
            "progress": job.progress,
            "external_job_id": job.external_job_id,
            "external_status": job.external_status,
            "error": self.error(job),
            "created_at": write(job.created_at),
            "submitted_at": write(job.submitted_at),
            "started_at": write(job.started_at),
            "completed_at": write(job.completed_at),
            "updated_at": write(job.updated_at),
            "deadline_at": write(job.deadline_at),
            "held_since": write(job.held_since),
            "durations": self.durations(job),
            "links": self.links(pk, job.batch_id),
        }

    @functools.cached_property
    def batches_url(self) -> str:
        # Not at __init__: the docs' examples are written while the URLconf loads.
        return batches_url_beside(self.jobs_url)

    @staticmethod
    def has_upload(job: ExtractionJob) -> bool:
        return bool(job.upload)

    @staticmethod
    def file_facts(job: ExtractionJob) -> dict[str, str | None]:
        origin, note = file_facts(job)
        return {"origin": origin, "note": note}

    def reused_from(self, job: ExtractionJob) -> dict[str, Any] | None:
        """The job and attempt whose result this attempt's is a copy of (no extractor was
        called: `services.reuse`), or None."""
        if job.reused_from_job is None:
            return None
        source = str(job.reused_from_job)
        return {
            "job": source,
            "attempt": job.reused_from_attempt,
            "link": f"{self.jobs_url}{source}/",
        }

    @staticmethod
    def error(job: ExtractionJob) -> dict[str, Any] | None:
        if not job.error_code:
            return None
        may_help = REQUEUE_ADVICE.get(job.error_code, (True, ""))[0]
        return {"code": job.error_code, "message": job.error_message, "requeue_may_help": may_help}

    @staticmethod
    def durations(job: ExtractionJob) -> dict[str, float | None]:
        """The current attempt's times: a requeued job's count from its requeue."""
        turnaround = job.turnaround
        return {
            "waiting_seconds": _seconds(job.attempt_started_at, job.submitted_at),
            "processing_seconds": _seconds(job.submitted_at, job.completed_at),
            "turnaround_seconds": turnaround.total_seconds() if turnaround is not None else None,
        }

    def links(self, pk: str, batch_id=None) -> dict[str, str | None]:
        own = f"{self.jobs_url}{pk}/"
        return {
            "self": own,
            "history": own + "history/",
            "result": own + "result/",
            "cancel": own + "cancel/",
            "requeue": own + "requeue/",
            "batch": f"{self.batches_url}{batch_id}/" if batch_id else None,
        }


def job_representation(job: ExtractionJob, *, jobs_url: str | None = None) -> dict[str, Any]:
    """One job as clients see it (see `JobRepresentation`; a response of many jobs makes one
    `JobRepresentation` for all of them)."""
    return JobRepresentation(jobs_url=jobs_url)(job)


def batch_representation(
    batch: Batch, summary, *, batches_url: str | None = None, jobs_url: str | None = None
) -> dict[str, Any]:
    """A batch as clients see it: `GET /api/v1/batches/<id>/` and its events' payloads (whose
    links are the API's paths). `summary` is its `selectors.BatchSummary`; its failed jobs are
    listed when it holds them (a batch's own page), not in lists and events."""
    batches_url = batches_path() if batches_url is None else batches_url
    jobs_url = jobs_path() if jobs_url is None else jobs_url
    pk = str(batch.pk)
    own = f"{batches_url}{pk}/"
    failures: dict[str, Any] = {"count": summary.failed, "by_error_code": summary.failures_by_code}
    if summary.failed_jobs is not None:
        failures["jobs"] = [
            {
                "id": str(job.pk),
                "status": job.status_id,
                "file_id": job.file_id,
                "file_name": job.file_name,
                "error": JobRepresentation.error(job),
                "completed_at": moment(job.completed_at),
                "link": f"{jobs_url}{job.pk}/",
            }
            for job in summary.failed_jobs
        ]
        failures["jobs_truncated"] = summary.failed > len(summary.failed_jobs)
    return {
        "id": pk,
        "client_reference": batch.client_reference,
        "metadata": batch.metadata,
        "requested_by": batch.requested_by.username if batch.requested_by_id else None,
        "status": summary.status(batch),
        "total": summary.total,
        "active": summary.active,
        "by_status": summary.by_status,
        "progress": summary.progress,
        "failures": failures,
        "created_at": moment(batch.created_at),
        "closed_at": moment(batch.closed_at),
        "cancelled_at": moment(batch.cancelled_at),
        "completed_at": moment(batch.completed_at),
        "first_job_created_at": moment(summary.first_created_at),
        "last_job_created_at": moment(summary.last_created_at),
        "first_job_completed_at": moment(summary.first_completed_at),
        "last_job_completed_at": moment(summary.last_completed_at),
        "links": {
            "self": own,
            "jobs": f"{jobs_url}?batch={pk}",
            "add_jobs": own + "jobs/",
            "close": own + "close/",
            "cancel": own + "cancel/",
            "requeue": own + "requeue/",
        },
    }
