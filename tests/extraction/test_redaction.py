"""An extractor that echoes credentials: nothing of them survives into what we keep."""

import json

import pytest
from django.utils import timezone
from werkzeug import Response

from extraction.clients.base import RemoteStatus
from extraction.errors import PermanentExtractorError
from extraction.models import Adapter
from extraction.redaction import redact_text
from jobtracking.engine.tasks import process_jobs
from jobtracking.models import ExtractionJob, JobEvent, JobStatusChange
from tests.extraction.test_http_errors import SECRET, answer, make, poll_url
from tests.factories import ExtractionJobFactory, ExtractorFactory

ECHO = (
    f"Denied: Authorization: Bearer {SECRET}; Ocp-Apim-Subscription-Key={SECRET}; "
    f'api_key: "{SECRET}"'
)


def test_error_messages_never_carry_the_key_or_credentials(adapter, httpserver):
    body = {"error": {"code": f"Bad-{SECRET}", "message": ECHO}}
    answer(httpserver, Response(json.dumps(body), 403, {"X-Echo": f"Bearer {SECRET}"}))
    with pytest.raises(PermanentExtractorError) as refused:
        make(adapter, httpserver.url_for("")).poll(poll_url(httpserver))
    text = f"{refused.value.message} {refused.value.remote_code}"
    assert SECRET not in text and "[redacted]" in text


def test_a_failed_analysis_echoing_the_key_is_kept_without_it(adapter, httpserver):
    error = {"code": "InvalidRequest", "message": ECHO}
    answer(
        httpserver,
        Response(
            json.dumps({"id": "abc", "status": "failed", "error": error}),
            200,
            {"Content-Type": "application/json", "apim-request-id": SECRET},
        ),
    )
    result = make(adapter, httpserver.url_for("")).poll(poll_url(httpserver))
    assert result.status is RemoteStatus.FAILED
    assert SECRET not in f"{result.error_code} {result.error_message} {result.request_id}"


def test_credentials_of_other_shapes_are_redacted_too():
    assert redact_text("auth failed for Bearer eyJhbGciOi.J9.x") == (
        "auth failed for Bearer [redacted]"
    )
    assert redact_text("x-api-key abcdef123456") == "x-api-key [redacted]"
    assert redact_text("Invalid input at page 3") == "Invalid input at page 3"


@pytest.mark.django_db
def test_a_job_failed_by_an_echoing_extractor_stores_and_publishes_no_key(httpserver, monkeypatch):
    monkeypatch.setenv("EXTRACTOR_ECHO_KEY", SECRET)
    extractor = ExtractorFactory(
        adapter=Adapter.HTTP_ASYNC,
        base_url=httpserver.url_for(""),
        api_key_env="EXTRACTOR_ECHO_KEY",
    )
    job = ExtractionJobFactory(
        extractor=extractor, submitted=True, external_url=poll_url(httpserver)
    )
    answer(httpserver, Response(json.dumps({"error": {"code": "E", "message": ECHO}}), 401))
    ExtractionJob.objects.filter(pk=job.pk).update(claimed_at=timezone.now())
    process_jobs([str(job.pk)])
    job.refresh_from_db()
    assert (job.status_id, job.error_code) == ("failed", "extractor_auth")
    kept = [
        job.error_message,
        *JobStatusChange.objects.filter(job=job).values_list("reason", flat=True),
        *(
            json.dumps(d)
            for d in JobStatusChange.objects.filter(job=job).values_list("details", flat=True)
        ),
        *(
            json.dumps(p)
            for p in JobEvent.objects.filter(job=job).values_list("payload", flat=True)
        ),
    ]
    assert all(SECRET not in text for text in kept), kept
    assert "[redacted]" in job.error_message
