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
    INVALID_EXTRACTOR_ANSWER = (
        "invalid_extractor_answer",
        "The extractor's answer for this job could not be recorded",
    )
    INVALID_RESULT = "invalid_result", "The extractor's result could not be stored"
    DEADLINE_EXCEEDED = "deadline_exceeded", "The job's deadline passed"
    SOURCE_UNAVAILABLE = "source_unavailable", "The file to extract could not be read"


class ExtractorError(Exception):
    """A call to an extractor did not give a usable answer. Messages never hold secrets."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status


class TransientExtractorError(ExtractorError):
    """Worth retrying later (connection trouble, timeouts, 408/429/5xx, garbled answers)."""

    def __init__(
        self, message: str, *, http_status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.retry_after = retry_after


class PermanentExtractorError(ExtractorError):
    """Retrying cannot help: the job fails with `code`."""

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode,
        http_status: int | None = None,
        remote_code: str = "",
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.code = code
        self.remote_code = remote_code


class ExternalJobLostError(PermanentExtractorError):
    """The extractor no longer knows the job we are polling."""

    def __init__(self, message: str, *, http_status: int | None = 404) -> None:
        super().__init__(message, code=ErrorCode.EXTERNAL_JOB_LOST, http_status=http_status)
