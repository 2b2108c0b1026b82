"""URL jobs of an extractor that does not report the document it extracted (Azure): the service
fetches the source itself, records what it fetched and submits those very bytes. A real local
HTTP server serves the document and replays Azure's recorded answers."""

import base64
import hashlib
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from werkzeug import Request, Response

from jobtracking import states
from jobtracking.engine import tasks
from jobtracking.models import ExtractionJob, JobStatusChange
from jobtracking.representation import JobRepresentation
from jobtracking.services import Actor, NewJob, job_create
from jobtracking.services.engine import jobs_start
from tests.extraction.test_azure_di import ANALYZE, RESULT, replay
from tests.factories import ExtractorFactory
from tests.jobtracking.api.conftest import client_for, service_account
from tests.jobtracking.engine.test_tasks import SAMPLES, run_to_end, step

pytestmark = pytest.mark.django_db

DOCUMENT = (SAMPLES / "financial-statement.pdf").read_bytes()


@pytest.fixture
def azure(httpserver, settings):
    """An Azure extractor on the local server, which also serves the sources (on loopback,
    which the guard allows here as it does for the demo)."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    return ExtractorFactory(
        azure=True,
        base_url=httpserver.url_for("/"),
        poll_initial_interval=timedelta(milliseconds=50),
    )


def azure_job(azure, httpserver, path="/files/statement.pdf") -> ExtractionJob:
    new = NewJob(extractor=azure, file_id=path, source_url=httpserver.url_for(path))
    return job_create(new, actor=Actor("api"))


def analyze_posts(httpserver) -> list:
    return [request for request, _ in httpserver.log if request.path == ANALYZE]


def test_an_azure_url_job_records_the_document_it_sent_azure(azure, httpserver):
    httpserver.expect_request("/files/statement.pdf").respond_with_data(
        DOCUMENT, content_type="application/pdf"
    )
    httpserver.expect_oneshot_request(
        ANALYZE, method="POST", json={"base64Source": base64.b64encode(DOCUMENT).decode()}
    ).respond_with_response(replay("analyze_accepted", httpserver))
    httpserver.expect_request(RESULT, method="GET").respond_with_response(
        replay("result_succeeded", httpserver)
    )
    facts = ("application/pdf", len(DOCUMENT), hashlib.sha256(DOCUMENT).hexdigest())

    job = step(azure_job(azure, httpserver))
    assert job.status_id == states.SUBMITTED
    # Recorded with the submission: what was hashed is what Azure was sent.
    assert (job.content_type, job.file_size, job.file_sha256) == facts

    job = run_to_end(job)
    assert job.status_id == states.SUCCEEDED
    assert (job.content_type, job.file_size, job.file_sha256) == facts
    assert JobRepresentation.file_facts(job)["origin"] == "service"
    httpserver.check_assertions()
    assert len(analyze_posts(httpserver)) == 1
    assert [r.path for r, _ in httpserver.log].count("/files/statement.pdf") == 1


def failed(job: ExtractionJob) -> ExtractionJob:
    job = step(job)
    assert job.status_id == states.FAILED
    return job


def test_an_azure_url_job_on_a_private_address_is_refused_unfetched(azure, httpserver, settings):
    httpserver.expect_request("/files/statement.pdf").respond_with_data(DOCUMENT)
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    job = failed(azure_job(azure, httpserver))
    assert job.error_code == "source_unusable"
    assert "non-public address (loopback)" in job.error_message
    assert httpserver.log == []  # neither the source nor Azure was called
    assert (job.content_type, job.file_size, job.file_sha256) == ("", None, "")


def test_an_oversized_source_is_refused_without_calling_azure(azure, httpserver, settings):
    settings.JOBS_UPLOAD_MAX_BYTES = 1024
    httpserver.expect_request("/files/statement.pdf").respond_with_data(DOCUMENT)
    job = failed(azure_job(azure, httpserver))
    assert job.error_code == "source_unusable"
    assert "larger than the 1024-byte limit" in job.error_message
    assert analyze_posts(httpserver) == []


@pytest.mark.parametrize(
    ("status", "code", "may_help"),
    [
        (404, "source_unusable", False),
        (410, "source_unusable", False),
        (503, "source_unavailable", True),
    ],
)
def test_a_failing_source_is_the_sources_failure_and_says_if_a_requeue_helps(
    azure, httpserver, status, code, may_help
):
    httpserver.expect_request("/files/statement.pdf").respond_with_data("", status=status)
    owner = service_account("owner")
    job = azure_job(azure, httpserver)
    ExtractionJob.objects.filter(pk=job.pk).update(requested_by=owner)
    job = failed(job)
    assert job.error_code == code and f"answered HTTP {status}" in job.error_message
    assert analyze_posts(httpserver) == []
    audit = JobStatusChange.objects.filter(job=job, to_status=states.FAILED).get()
    assert audit.details["http_status"] == status
    shown = client_for(owner).get(f"/api/v1/jobs/{job.pk}/").json()
    assert (shown["error"]["code"], shown["error"]["requeue_may_help"]) == (code, may_help)
    assert shown["file_facts"] == {
        "origin": None,
        "note": "Not known: the service could not fetch the URL (see the error).",
    }


def test_a_source_that_times_out_fails_as_transient(azure, httpserver, settings):
    settings.JOBS_SOURCE_FETCH_TIMEOUT_SECONDS = 0.3

    def silent(request: Request) -> Response:
        time.sleep(0.8)
        return Response(DOCUMENT)

    httpserver.expect_request("/files/statement.pdf").respond_with_handler(silent)
    job = failed(azure_job(azure, httpserver))
    assert job.error_code == "source_unavailable"
    assert "did not answer in time" in job.error_message
    assert analyze_posts(httpserver) == []
    deadline = time.monotonic() + 5  # the server answers one request at a time
    while not httpserver.log and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_failing_source_counts_on_no_extractors_circuit(azure, httpserver, monkeypatch):
    """Neither a failure (one client's bad URLs would open a circuit every client shares) nor a
    success (it would close an open circuit on a call that never reached the extractor)."""
    httpserver.expect_request("/files/a.pdf").respond_with_data("", status=503)
    httpserver.expect_request("/files/b.pdf").respond_with_data(DOCUMENT)
    httpserver.expect_oneshot_request(ANALYZE, method="POST").respond_with_response(
        replay("analyze_accepted", httpserver)
    )
    reported = []
    real = tasks.circuits_report
    monkeypatch.setattr(
        tasks,
        "circuits_report",
        lambda model, tallies, *args: reported.append(dict(tallies)) or real(model, tallies, *args),
    )
    jobs = [azure_job(azure, httpserver, path) for path in ("/files/a.pdf", "/files/b.pdf")]
    ExtractionJob.objects.update(claimed_at=timezone.now())
    tasks.process_jobs([str(job.pk) for job in jobs])

    statuses = dict(ExtractionJob.objects.values_list("source_url", "status"))
    assert sorted(statuses.values()) == [states.FAILED, states.SUBMITTED]
    (tallies,) = reported
    assert (tallies[azure.pk].successes, tallies[azure.pk].failed_keys) == (1, [])


def test_a_fetching_submissions_lease_covers_the_fetch(azure, httpserver, settings):
    settings.JOBS_SOURCE_FETCH_TIMEOUT_SECONDS = 100
    job = azure_job(azure, httpserver)
    ExtractionJob.objects.filter(pk=job.pk).update(claimed_at=timezone.now())
    before = timezone.now()
    (planned,) = jobs_start(job_ids=[str(job.pk)]).submits
    lease = settings.JOBS_SUBMIT_LEASE_MARGIN_SECONDS + 2 * 100
    expected = before + azure.request_timeout + timedelta(seconds=lease)
    assert expected <= planned.job.lease_expires_at <= expected + timedelta(seconds=5)
