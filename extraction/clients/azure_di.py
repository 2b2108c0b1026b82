"""Azure AI Document Intelligence REST, api-version 2024-11-30.

POST {endpoint}/documentintelligence/documentModels/{model}:analyze → 202 with Operation-Location;
GET that location → {"status", "analyzeResult" | "error"}; DELETE it → purge (our cancel).
A failed analysis is a 200 whose status is "failed". Azure takes no idempotency key.
"""

import base64
import io
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

from extraction.clients.base import (
    ExtractionOutput,
    ExtractorClient,
    PollResult,
    RemoteStatus,
    Response,
    Submission,
    SubmitRequest,
    describe,
    json_body,
    percent,
)
from extraction.clients.transport import Body
from extraction.documents import azure_di as azure_document
from extraction.errors import ErrorCode, PermanentExtractorError, TransientExtractorError
from extraction.redaction import redact_text

API_VERSION = "2024-11-30"
KEY_HEADER = "Ocp-Apim-Subscription-Key"

STATUS_WORDS = {
    "notstarted": RemoteStatus.QUEUED,
    "running": RemoteStatus.RUNNING,
    "succeeded": RemoteStatus.SUCCEEDED,
    "failed": RemoteStatus.FAILED,
    "canceled": RemoteStatus.CANCELED,
    # Used by batch analysis for documents it did not process: nothing will come of the job.
    "skipped": RemoteStatus.FAILED,
}

# Our option names → the analyze call's query parameters.
QUERY_OPTIONS = {
    "pages": "pages",
    "locale": "locale",
    "features": "features",
    "output_content_format": "outputContentFormat",
    "outputContentFormat": "outputContentFormat",
    "string_index_type": "stringIndexType",
    "stringIndexType": "stringIndexType",
    "query_fields": "queryFields",
    "queryFields": "queryFields",
}


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) with the scheme's default port filled in; None if unreadable."""
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    return parts.scheme.lower(), parts.hostname or "", port


def _query_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


class Base64SourceBody:
    """The analyze call's JSON body `{"base64Source": "…"}`, encoded from the document a chunk
    at a time as it is sent: a large document is never held whole in memory, as bytes or as
    base64. Its length is known up front, so it goes with a Content-Length (not chunked), and
    it can be sent again (each iteration reads the document from its start)."""

    PREFIX, SUFFIX = b'{"base64Source":"', b'"}'
    # A multiple of 3: no chunk's base64 but the last one's ends in padding.
    CHUNK_BYTES = 3 * 64 * 1024

    def __init__(self, content: bytes | BinaryIO | None) -> None:
        self.file = io.BytesIO(content or b"") if not hasattr(content, "read") else content
        self.size = self.file.seek(0, io.SEEK_END)

    def __len__(self) -> int:
        return len(self.PREFIX) + 4 * ((self.size + 2) // 3) + len(self.SUFFIX)

    def __iter__(self) -> Iterator[bytes]:
        self.file.seek(0)
        yield self.PREFIX
        while chunk := self.file.read(self.CHUNK_BYTES):
            yield base64.b64encode(chunk)
        yield self.SUFFIX


class AzureDocumentIntelligenceClient(ExtractorClient):
    document = staticmethod(azure_document.read)
    billable_pages = staticmethod(azure_document.billable_pages)
    result_ttl = timedelta(hours=24)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.config.api_key:
            headers[KEY_HEADER] = self.config.api_key
        return headers

    def request(self, method: str, url: str, **kwargs: Any) -> Response:
        # The key goes with every call, so only to the extractor's own origin: this also
        # covers a poll location stored before `submit` checked them.
        self._check_origin(url, describe(method, url))
        return super().request(method, url, **kwargs)

    def _check_origin(self, url: str, where: str, http_status: int | None = None) -> None:
        """Refuse a URL on another scheme (an https→http downgrade), host or port than the
        extractor's base URL: an Operation-Location there would receive the key."""
        own, theirs = _origin(self.config.base_url), _origin(url)
        if theirs is None or theirs != own:
            raise PermanentExtractorError(
                f"{where}: the location is not on the extractor's own scheme, host and port",
                code=ErrorCode.INVALID_RESPONSE,
                http_status=http_status,
            )

    def analyze_url(self) -> str:
        model = quote(self.config.model_id or "prebuilt-layout", safe="")
        return (
            f"{self.config.base_url.rstrip('/')}/documentintelligence/documentModels/"
            f"{model}:analyze"
        )

    def submit(self, request: SubmitRequest) -> Submission:
        params = {"api-version": API_VERSION}
        for name, value in request.options.items():
            if name in QUERY_OPTIONS and value not in (None, "", []):
                params[QUERY_OPTIONS[name]] = _query_value(value)
        headers = {**self._headers(), "Content-Type": "application/json"}
        if request.source_url:
            body: Body = json_body({"urlSource": request.source_url})
        else:
            body = Base64SourceBody(request.content)
        url = self.analyze_url()
        response = self.request("POST", url, headers=headers, params=params, body=body)
        location = response.headers.get("Operation-Location", "")
        if not location:
            raise TransientExtractorError(
                f"{describe('POST', url)}: HTTP {response.status_code} without Operation-Location",
                http_status=response.status_code,
            )
        self._check_origin(location, describe("POST", url), response.status_code)
        return Submission(
            external_id=urlsplit(location).path.rstrip("/").rsplit("/", 1)[-1],
            poll_url=location,
            request_id=response.headers.get("apim-request-id", ""),
            retry_after=response.retry_after,
        )

    def poll(self, poll_url: str) -> PollResult:
        response, body = self.get_json(poll_url)
        raw_status = str(body.get("status", ""))
        status = STATUS_WORDS.get(raw_status.lower(), RemoteStatus.UNKNOWN)
        error = body.get("error") if isinstance(body.get("error"), dict) else {}
        inner = error.get("innererror") if isinstance(error.get("innererror"), dict) else {}
        output = None
        if status is RemoteStatus.SUCCEEDED and isinstance(body.get("analyzeResult"), dict):
            output = self._output(body["analyzeResult"], response.body)
        return PollResult(
            status=status,
            raw_status=raw_status,
            progress=percent(body.get("percentCompleted")),
            # The inner error names the precise cause (e.g. InvalidContent under InvalidRequest).
            error_code=redact_text(str(inner.get("code") or error.get("code") or ""))[:100],
            error_message=redact_text(str(inner.get("message") or error.get("message") or ""))[
                :1000
            ],
            retry_after=response.retry_after,
            request_id=response.headers.get("apim-request-id", ""),
            output=output,
        )

    def fetch_result(self, poll_url: str) -> ExtractionOutput:
        result = self.poll(poll_url)
        if result.output is None:
            raise TransientExtractorError(
                f"{describe('GET', poll_url)}: no analyzeResult (status {result.raw_status!r})"
            )
        return result.output

    @staticmethod
    def _output(analyze_result: dict[str, Any], raw: bytes) -> ExtractionOutput:
        pages = analyze_result.get("pages")
        version = "/".join(
            str(analyze_result[key]) for key in ("modelId", "apiVersion") if analyze_result.get(key)
        )
        return ExtractionOutput(
            payload=analyze_result,
            page_count=len(pages) if isinstance(pages, list) else None,
            model_version=version,
            raw=raw,
        )

    def check_connection(self) -> str:
        url = f"{self.config.base_url.rstrip('/')}/documentintelligence/info"
        response = self.request(
            "GET", url, headers=self._headers(), params={"api-version": API_VERSION}
        )
        body = response.json_object(describe("GET", url))
        quota = body.get("customDocumentModels", {})
        return f"{describe('GET', url)} answered (custom models: {quota.get('count', '?')})"
