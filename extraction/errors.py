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
    SOURCE_UNUSABLE = (
        "source_unusable",
        "The file's URL cannot be used (missing, refused, not allowed or too large)",
    )


# The codes of a source that failed (the service's own fetch, or a job-protocol extractor's):
# the source's fault, whether it may pass or not.
SOURCE_CODES = frozenset({ErrorCode.SOURCE_UNAVAILABLE, ErrorCode.SOURCE_UNUSABLE})


# Whether a requeue (the same input, submitted again) may succeed, and why: the job page shows
# it, and the API's `error.requeue_may_help` says it. Each code has its entry (a test holds it).
REQUEUE_ADVICE: dict[str, tuple[bool, str]] = {
    ErrorCode.EXTRACTOR_UNAVAILABLE: (
        True,
        "The extractor was unavailable: once it is back, a requeue may succeed.",
    ),
    ErrorCode.REJECTED_BY_EXTRACTOR: (
        False,
        "The extractor refused this request: the same input will be refused again.",
    ),
    ErrorCode.EXTRACTOR_AUTH: (
        True,
        "The extractor refused our key: once staff fix it, a requeue may succeed.",
    ),
    ErrorCode.EXTERNAL_JOB_LOST: (
        True,
        "The extractor lost the job: a requeue submits it again.",
    ),
    ErrorCode.EXTRACTION_FAILED: (
        False,
        "The extractor could not extract this document: it will fail again unless the "
        "document changes.",
    ),
    ErrorCode.INVALID_RESPONSE: (
        True,
        "The extractor's answer could not be read: a requeue may get a readable one.",
    ),
    ErrorCode.INVALID_EXTRACTOR_ANSWER: (
        True,
        "The extractor's answer for this job could not be recorded: a requeue may get another.",
    ),
    ErrorCode.INVALID_RESULT: (
        False,
        "The extractor's result cannot be stored: the same document gives the same result.",
    ),
    ErrorCode.DEADLINE_EXCEEDED: (
        True,
        "The job ran out of time: a requeue, perhaps at a quieter hour, may finish.",
    ),
    ErrorCode.SOURCE_UNAVAILABLE: (
        True,
        "The document could not be read from its source for now (it timed out, failed to "
        "connect or answered with a server error): a requeue may succeed.",
    ),
    ErrorCode.SOURCE_UNUSABLE: (
        False,
        "The document's URL answered that it is not there or refused it, or it may not be "
        "fetched (a non-public address, a redirect, over the size limit): the same URL will "
        "fail again. Requeue once it serves the document, or create a job with one that does.",
    ),
}


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


class SourceError(PermanentExtractorError):
    """The document's source URL failed before any extractor call (the service fetches it
    itself for an extractor that does not report what it extracted): the source's fault, never
    the extractor's, so it counts on no extractor's circuit. `code` says whether a requeue may
    help (`source_unavailable`) or not (`source_unusable`)."""


class ExternalJobLostError(PermanentExtractorError):
    """The extractor no longer knows the job we are polling."""

    def __init__(self, message: str, *, http_status: int | None = 404) -> None:
        super().__init__(message, code=ErrorCode.EXTERNAL_JOB_LOST, http_status=http_status)
