"""The generic asynchronous job protocol (DESIGN §6), spoken by the bundled sandbox too.

POST {base}/v1/extractions → 202 {"id", "status"}; GET {base}/v1/extractions/{id} → status;
GET …/{id}/result → the result JSON; DELETE …/{id} → cancel.
"""

import json

from urllib3 import encode_multipart_formdata

from extraction.clients.base import (
    DocumentFacts,
    ExtractionOutput,
    ExtractorClient,
    PollResult,
    RemoteStatus,
    Submission,
    SubmitRequest,
    describe,
    json_body,
    percent,
)
from extraction.documents import job_protocol
from extraction.errors import ErrorCode, PermanentExtractorError, TransientExtractorError
from extraction.redaction import redact_text

STATUS_WORDS = {
    "queued": RemoteStatus.QUEUED,
    "running": RemoteStatus.RUNNING,
    "succeeded": RemoteStatus.SUCCEEDED,
    "failed": RemoteStatus.FAILED,
    "canceled": RemoteStatus.CANCELED,
    "cancelled": RemoteStatus.CANCELED,
}


def _content(request: SubmitRequest) -> bytes:
    """The document's bytes (a file's are read from its start)."""
    content = request.content
    if hasattr(content, "read"):
        content.seek(0)
        return content.read()
    return content or b""


def _type(request: SubmitRequest) -> str:
    return request.content_type or "application/octet-stream"


class HttpAsyncClient(ExtractorClient):
    document = staticmethod(job_protocol.read)
    reports_document = True
    billable_pages = staticmethod(job_protocol.billable_pages)

    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": "application/json", **extra}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    @property
    def collection_url(self) -> str:
        return self.config.base_url.rstrip("/") + "/v1/extractions"

    def submit(self, request: SubmitRequest) -> Submission:
        headers = self._headers()
        if request.idempotency_key:
            headers["Idempotency-Key"] = request.idempotency_key
        options = dict(request.options)
        if request.source_url:
            body = json_body({"url": request.source_url, "options": options})
            headers["Content-Type"] = "application/json"
        else:
            body, headers["Content-Type"] = encode_multipart_formdata(
                [
                    ("options", json.dumps(options)),
                    ("file", (request.file_name or "document", _content(request), _type(request))),
                ]
            )
        url = self.collection_url
        response = self.request("POST", url, headers=headers, body=body)
        body = response.json_object(describe("POST", url))
        external_id = str(body.get("id") or "")
        if not external_id:
            raise TransientExtractorError(
                f"{describe('POST', url)}: accepted without an id", http_status=202
            )
        return Submission(
            external_id=external_id,
            poll_url=f"{url}/{external_id}",
            request_id=response.headers.get("X-Request-Id", ""),
            retry_after=response.retry_after,
        )

    def poll(self, poll_url: str) -> PollResult:
        response, body = self.get_json(poll_url)
        raw_status = str(body.get("status", ""))
        error = body.get("error") if isinstance(body.get("error"), dict) else {}
        return PollResult(
            status=STATUS_WORDS.get(raw_status.lower(), RemoteStatus.UNKNOWN),
            raw_status=raw_status,
            progress=percent(body.get("progress")),
            error_code=redact_text(str(error.get("code", "")))[:100],
            error_message=redact_text(str(error.get("message", "")))[:1000],
            retry_after=response.retry_after,
            request_id=response.headers.get("X-Request-Id", ""),
            billed_pages=job_protocol.billed_pages(body),
        )

    def fetch_result(self, poll_url: str) -> ExtractionOutput:
        response, payload = self.get_json(poll_url + "/result")
        pages = payload.get("pages")
        return ExtractionOutput(
            payload=payload,
            page_count=len(pages) if isinstance(pages, list) else None,
            model_version=str(payload.get("model", ""))[:200],
            raw=response.body,
            document=DocumentFacts.read(payload.get("document")),
        )

    def check_connection(self) -> str:
        url = self.collection_url + "/connection-check"
        try:
            self.request("GET", url, headers=self._headers(), missing_is_lost=True)
        except PermanentExtractorError as error:
            if error.code != ErrorCode.EXTERNAL_JOB_LOST:
                raise
        # A 404 for an id that does not exist proves the service answers and accepts our key.
        return f"{describe('GET', self.collection_url)} answered"
