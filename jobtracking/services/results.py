"""A finished attempt's result as it is stored (`ExtractionResult`): the extractor's output made
storable (`Result`), and its row (`result_row`). Written by the engine's record step and by a
reuse of an identical document's result (`services.reuse`)."""

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile

from extraction.clients.base import DocumentFacts, ExtractionOutput
from jobtracking.infra.storable import safe_json, safe_text
from jobtracking.models import ExtractionJob, ExtractionResult


@dataclass(frozen=True)
class Result:
    """A finished job's output, serialized once for its digest, size and storage. `made_safe`
    lists what was changed to store it (`from_output`), `original` the bytes as sent."""

    payload: dict[str, Any]
    page_count: int | None
    model_version: str
    billable_pages: int
    made_safe: list[str] = field(default_factory=list)
    original: bytes = field(default=b"", repr=False)
    document: DocumentFacts | None = None
    body: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        body = json.dumps(self.payload, separators=(",", ":"), sort_keys=True).encode()
        object.__setattr__(self, "body", body)

    @classmethod
    def from_output(cls, output: ExtractionOutput, billable_pages: int) -> "Result":
        """The extractor's output as it can be stored (`jobtracking.infra.storable`): a copy
        made safe, with the answer's bytes kept verbatim beside it, and the pages the extractor
        bills for it. Raises `TooDeepError`."""
        payload, made_safe = safe_json(output.payload)
        return cls(
            payload,
            output.page_count,
            safe_text(output.model_version),
            billable_pages,
            made_safe=made_safe,
            original=output.raw if made_safe else b"",
            document=output.document,
        )


def result_row(job: ExtractionJob, result: Result) -> ExtractionResult:
    inline = len(result.body) <= settings.JOBS_RESULT_INLINE_MAX_BYTES
    row = ExtractionResult(
        job=job,
        attempt=job.attempt,
        payload=result.payload if inline else None,
        content_sha256=hashlib.sha256(result.body).hexdigest(),
        size_bytes=len(result.body),
        page_count=result.page_count,
        model_version=result.model_version[:200],
    )
    if not inline:
        # Written inside the transaction so that a failed commit leaves no result row; an
        # orphaned file is harmless and named after the job and attempt.
        row.payload_file.save(f"{job.id}-{job.attempt}.json", ContentFile(result.body), save=False)
    if result.made_safe:
        row.made_safe = result.made_safe
        row.original_sha256 = hashlib.sha256(result.original).hexdigest()
        row.original_file.save(f"{job.id}-{job.attempt}", ContentFile(result.original), save=False)
    return row
