"""The error taxonomy of extractor calls, and the fixed vocabulary of job error codes."""

from django.db import models


class ErrorCode(models.TextChoices):
    """Why a job failed. Stored on the job (`error_code`) and used as a filter everywhere."""

    EXTRACTOR_UNAVAILABLE = "extractor_unavailable", "Extractor unavailable (retries exhausted)"
    REJECTED_BY_EXTRACTOR = "rejected_by_extractor", "Rejected by the extractor"
    EXTRACTOR_AUTH = "extractor_auth", "Extractor refused our credentials"
    EXTERNAL_JOB_LOST = "external_job_lost", "The extractor no longer knows the job"
    EXTRACTION_FAILED = "extraction_failed", "The extractor could not extract the document"
    INVALID_RESPONSE = "invalid_response", "The extractor sent a response we cannot read"
    DEADLINE_EXCEEDED = "deadline_exceeded", "The job's deadline passed"
    SOURCE_UNAVAILABLE = "source_unavailable", "The file to extract could not be read"
