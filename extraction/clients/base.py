"""The one interface every extractor adapter implements, and the HTTP plumbing they share.

Clients take plain values and return plain typed values; they know nothing about jobs. Every call
has connect and read timeouts and a bounded response size, and no message ever holds the API key.
"""

import email.utils
import enum
import json
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, BinaryIO
from urllib.parse import urlencode, urlsplit

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from urllib3 import HTTPHeaderDict

from extraction.clients.transport import (
    AnswerTooLarge,
    Body,
    Interrupted,
    Transport,
    TransportError,
    TransportTimeout,
)
from extraction.errors import (
    SOURCE_CODES,
    ErrorCode,
    ExternalJobLostError,
    ExtractorError,
    PermanentExtractorError,
    TransientExtractorError,
)
from extraction.metrics import EXTRACTOR_CALL_ERRORS, EXTRACTOR_CALL_SECONDS
from extraction.redaction import REDACTED, redact_bytes, redact_text
from extraction.results import Document

MAX_RETRY_AFTER_SECONDS = 24 * 3600.0
_trace_context = TraceContextTextMapPropagator()


class RemoteStatus(enum.StrEnum):
    """The extractor's own status word, mapped onto what the job engine needs to know."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    UNKNOWN = "unknown"  # a word we do not know: keep polling until the deadline


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    model_id: str = ""
    api_key: str = field(default="", repr=False)
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_response_bytes: int = 64 * 1024 * 1024
    # Kept-alive connections: at least as many as the calls made at once (a smaller pool
    # discards connections and opens new ones).
    pool_size: int = 16


@dataclass(frozen=True)
class SubmitRequest:
    """One file to extract: either a URL the extractor fetches, or the bytes themselves (or a
    buffered binary file holding them, read from its start)."""

    file_name: str
    content_type: str = ""
    source_url: str = ""
    content: bytes | BinaryIO | None = field(default=None, repr=False)
    options: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str = ""


@dataclass(frozen=True)
class Submission:
    external_id: str
    poll_url: str
    request_id: str = ""
    retry_after: float | None = None
    # What was submitted, as the service measured it fetching a URL job's source itself (for
    # an extractor that does not report the document); None otherwise.
    document: "DocumentFacts | None" = None


@dataclass(frozen=True)
class DocumentFacts:
    """What the extractor says of the document it extracted (the job protocol's result
    `document`): a URL job learns its content type, size and digest from them."""

    content_type: str
    size: int
    sha256: str

    @classmethod
    def read(cls, value: Any) -> "DocumentFacts | None":
        """The facts of a result's `document`, if each is what it claims to be; else None."""
        if not isinstance(value, dict):
            return None
        content_type, size, sha256 = (value.get(k) for k in ("content_type", "size", "sha256"))
        valid = (
            isinstance(content_type, str)
            and MEDIA_TYPE.fullmatch(content_type)
            and type(size) is int
            and 0 <= size < 1 << 62
            and isinstance(sha256, str)
            and SHA256_HEX.fullmatch(sha256)
        )
        return cls(content_type, size, sha256) if valid else None


# A media type without parameters ("application/pdf"), and a SHA-256 in lower-case hex.
MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,48}/[a-z0-9][a-z0-9!#$&^_.+-]{0,48}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def bare_media_type(value: str) -> str:
    """A Content-Type's media type without its parameters, lower-cased ("text/html")."""
    return value.split(";")[0].strip().lower()


def is_transient_status(status: int) -> bool:
    """An HTTP error that may pass if asked again: a timeout, a rate limit, a server error."""
    return status in (408, 425, 429) or status >= 500


@dataclass(frozen=True)
class ExtractionOutput:
    payload: dict[str, Any]
    page_count: int | None = None
    model_version: str = ""
    # The answer's bytes as the extractor sent them (kept verbatim when the payload must be
    # made safe to store).
    raw: bytes = field(default=b"", repr=False)
    # What the extractor says of the document it extracted; None where it says nothing.
    document: DocumentFacts | None = None


@dataclass(frozen=True)
class PollResult:
    status: RemoteStatus
    raw_status: str
    progress: int | None = None
    error_code: str = ""
    error_message: str = ""
    retry_after: float | None = None
    request_id: str = ""
    # Set when the protocol hands the result over with the final poll (Azure does).
    output: ExtractionOutput | None = None
    # The pages the extractor says it billed for a job it ended without a result; None where
    # it says nothing.
    billed_pages: int | None = None


class ExtractorClient(ABC):
    """Submit, poll, fetch result, cancel. Raises only `extraction.errors.ExtractorError`s."""

    # How long the extractor keeps a job's result; None when it does not say.
    result_ttl: timedelta | None = None
    # Whether its results say which document it extracted (the job protocol's `document`). If
    # not, the service fetches a URL job's source itself and submits those bytes
    # (`extraction.sources`), so that the job records what was extracted.
    reports_document: bool = False

    def __init__(self, config: ClientConfig, transport: Transport | None = None) -> None:
        self.config = config
        self.transport = transport or Transport(config.base_url, config.pool_size)

    @abstractmethod
    def submit(self, request: SubmitRequest) -> Submission: ...

    @abstractmethod
    def poll(self, poll_url: str) -> PollResult: ...

    @abstractmethod
    def fetch_result(self, poll_url: str) -> ExtractionOutput: ...

    @staticmethod
    @abstractmethod
    def document(payload: Any) -> Document:
        """A result this protocol's `fetch_result` gave (its `payload`, as stored) in the one
        shape every reader of results uses (`extraction.results`)."""

    @staticmethod
    @abstractmethod
    def billable_pages(payload: Any, content_type: str) -> int:
        """The pages the extractor bills for this result (its `payload`, as stored) of a
        document of `content_type`, counted by the extractor's own rules."""

    def cancel(self, poll_url: str) -> None:
        """Ask the extractor to drop the job (both protocols: DELETE on the poll location)."""
        self.request("DELETE", poll_url, headers=self._headers(), missing_is_lost=True)

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """Accept and authentication headers for every call."""

    def get_json(self, url: str) -> tuple["Response", dict[str, Any]]:
        """GET a JSON object from a job's location; 404 means the job is lost."""
        response = self.request("GET", url, headers=self._headers(), missing_is_lost=True)
        return response, response.json_object(describe("GET", url))

    @abstractmethod
    def check_connection(self) -> str:
        """Make one cheap authenticated call; return a short description of what answered."""

    # HTTP plumbing shared by the adapters.

    def request(
        self, method: str, url: str, *, missing_is_lost: bool = False, **kwargs: Any
    ) -> "Response":
        """Send one request and classify the outcome.

        Returns 2xx answers; raises `TransientExtractorError` for connection trouble, timeouts,
        408/429/5xx; `ExternalJobLostError` for 404 when `missing_is_lost`; otherwise
        `PermanentExtractorError`.
        """
        where = describe(method, url)
        labels = {"adapter": type(self).__name__, "operation": method}
        started = time.perf_counter()
        try:
            return self._request(method, url, where, missing_is_lost=missing_is_lost, **kwargs)
        except ExtractorError as error:
            EXTRACTOR_CALL_ERRORS.labels(error_class=type(error).__name__, **labels).inc()
            raise
        finally:
            EXTRACTOR_CALL_SECONDS.labels(**labels).observe(time.perf_counter() - started)

    def _request(
        self,
        method: str,
        url: str,
        where: str,
        *,
        missing_is_lost: bool,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        body: Body = None,
    ) -> "Response":
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        timeout = (self.config.connect_timeout, self.config.read_timeout)
        limit = self.config.max_response_bytes
        try:
            answer = self.transport.send(
                method,
                url,
                headers=with_trace_context(headers),
                body=body,
                timeout=timeout,
                limit=limit,
            )
        except TransportTimeout:
            raise TransientExtractorError(f"{where}: timed out") from None
        except TransportError as error:
            raise TransientExtractorError(f"{where}: connection failed ({error})") from None
        except Interrupted as error:
            raise TransientExtractorError(f"{where}: response interrupted ({error})") from None
        except AnswerTooLarge as error:
            size = "" if error.declared is None else f" of {error.declared} bytes"
            raise PermanentExtractorError(
                f"{where}: response{size} exceeds the {limit}-byte limit",
                code=ErrorCode.INVALID_RESPONSE,
                http_status=error.status,
            ) from None
        body = redact_bytes(answer.body, self.config.api_key)
        response = Response(answer.status, answer.headers, body, self.config.api_key)
        response.raise_for_status(where, missing_is_lost=missing_is_lost)
        return response


class Response:
    """A fully read, size-bounded HTTP answer."""

    def __init__(
        self, status_code: int, headers: Mapping[str, str], body: bytes, key: str = ""
    ) -> None:
        self.status_code = status_code
        # Header values are kept (request ids, poll locations): never with the key in them.
        self.headers = headers
        if key and any(key in value for value in headers.values()):
            self.headers = HTTPHeaderDict(
                {name: value.replace(key, REDACTED) for name, value in headers.items()}
            )
        self.body = body

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers)

    def json(self, where: str) -> Any:
        try:
            return json.loads(self.body)
        except RecursionError:
            raise PermanentExtractorError(
                f"{where}: answered HTTP {self.status_code} with JSON nested too deeply to read",
                code=ErrorCode.INVALID_RESPONSE,
                http_status=self.status_code,
            ) from None
        except ValueError:
            raise TransientExtractorError(
                f"{where}: answered HTTP {self.status_code} with a body that is not JSON "
                f"({self.headers.get('Content-Type', 'no content type')})",
                http_status=self.status_code,
            ) from None

    def json_object(self, where: str) -> dict[str, Any]:
        data = self.json(where)
        if not isinstance(data, dict):
            raise TransientExtractorError(
                f"{where}: expected a JSON object, got {type(data).__name__}",
                http_status=self.status_code,
            )
        return data

    def error_detail(self) -> tuple[str, str]:
        """(code, message) from a JSON error body of either protocol, else from the text."""
        try:
            data = json.loads(self.body)
        except (ValueError, RecursionError):
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            code, message = str(error.get("code", "")), str(error.get("message", ""))
            return redact_text(code)[:100], redact_text(message)[:500]
        text = self.body[:200].decode("utf-8", "replace").strip()
        return "", redact_text(" ".join(text.split()))

    def raise_for_status(self, where: str, *, missing_is_lost: bool) -> None:
        status = self.status_code
        if 200 <= status < 300:
            return
        remote_code, remote_message = self.error_detail()
        message = f"{where}: HTTP {status}" + (f" {remote_message}" if remote_message else "")
        if is_transient_status(status):
            raise TransientExtractorError(message, http_status=status, retry_after=self.retry_after)
        if status == 404 and missing_is_lost:
            raise ExternalJobLostError(message)
        code = ErrorCode.EXTRACTOR_AUTH if status in (401, 403) else ErrorCode.REJECTED_BY_EXTRACTOR
        if remote_code in SOURCE_CODES:  # a job-protocol extractor could not fetch the URL
            code = ErrorCode(remote_code)
        raise PermanentExtractorError(
            message, code=code, http_status=status, remote_code=remote_code
        )


def json_body(value: Any) -> bytes:
    """A JSON request body (its Content-Type is the caller's to set): no NaN or Infinity, which
    JSON does not have."""
    return json.dumps(value, allow_nan=False).encode()


def percent(value: Any) -> int | None:
    """A progress figure from an answer: a finite number, as a whole percentage from 0 to 100."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(max(0, min(100, value)))


def with_trace_context(headers: Mapping[str, str] | None) -> dict[str, str]:
    """`headers` and, inside a span, its W3C `traceparent` (and `tracestate`): the caller's span
    (a job's step) is the extractor's parent. Added here rather than by requests' own
    instrumentation, whose client span per call doubled a job's spans. Outside a span (tracing
    off: there is none) the headers go as they are."""
    headers = dict(headers or {})
    if trace.get_current_span().get_span_context().is_valid:
        _trace_context.inject(headers)
    return headers


def describe(method: str, url: str) -> str:
    """`METHOD host/path` without the query string, which may carry tokens."""
    parts = urlsplit(url)
    return f"{method} {parts.netloc}{parts.path}"


# Where a call went, as `describe` begins the clients' messages ("POST host:port/path: ").
CALL_LOCATION = re.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE) \S+: ")


def client_text(message: str) -> str:
    """An extractor error as API clients read it (the job's error message and events, its
    history, the extractor's health): the status and the extractor's own words, without the
    internal host and port, which staff find in the audit row's details and in the logs."""
    return CALL_LOCATION.sub("", message)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from `Retry-After` (delta-seconds or HTTP-date) or `retry-after-ms`."""
    millis = headers.get("retry-after-ms") or headers.get("x-ms-retry-after-ms")
    if millis:
        try:
            return _clamp(float(millis) / 1000)
        except ValueError:
            pass
    value = (headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return _clamp(float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment is None or moment.tzinfo is None:
        return None
    return _clamp(moment.timestamp() - (time.time() if now is None else now))


def _clamp(seconds: float) -> float | None:
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)
