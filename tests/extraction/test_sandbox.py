"""The http_async client against the real sandbox extractor process, over real HTTP."""

import time
from pathlib import Path

import pytest

from extraction.clients.base import ClientConfig, PollResult, RemoteStatus, SubmitRequest
from extraction.clients.http_async import HttpAsyncClient
from extraction.errors import (
    ErrorCode,
    ExternalJobLostError,
    PermanentExtractorError,
    TransientExtractorError,
)
from extraction.sandbox import extract as extract_module
from extraction.sandbox.extract import CorruptDocumentError, DocumentTooLargeError

SAMPLES = Path(__file__).resolve().parents[2] / "extraction" / "sandbox" / "samples"


def make_client(sandbox, **config) -> HttpAsyncClient:
    return HttpAsyncClient(ClientConfig(base_url=sandbox.url, **config))


def sample_request(name: str, **kwargs) -> SubmitRequest:
    types = {".pdf": "application/pdf", ".txt": "text/plain", ".csv": "text/csv"}
    path = SAMPLES / name
    return SubmitRequest(
        file_name=name, content_type=types[path.suffix], content=path.read_bytes(), **kwargs
    )


def poll_until_done(client, poll_url: str, timeout: float = 10) -> PollResult:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = client.poll(poll_url)
        if result.status not in (RemoteStatus.QUEUED, RemoteStatus.RUNNING):
            return result
        time.sleep(max(0.05, result.retry_after or 0))
    raise AssertionError("the extraction did not finish")


@pytest.mark.parametrize(
    ("name", "pages", "expected_text", "expected_pair"),
    [
        ("financial-statement.pdf", 3, "Statement of Activities", ("Total revenue", 1234500.0)),
        ("grant-report.txt", 2, "after-school literacy", ("Participants served", 1480.0)),
        ("budget.csv", 1, "Program supplies", ("Total budget", 652475.0)),
    ],
)
def test_sandbox_extracts_each_sample_through_submit_poll_result(
    sandbox, name, pages, expected_text, expected_pair
):
    sandbox.configure(latency_min=0.3, latency_max=0.3)
    client = make_client(sandbox)

    submission = client.submit(sample_request(name, idempotency_key=f"key-{name}"))
    first = client.poll(submission.poll_url)
    final = poll_until_done(client, submission.poll_url)
    output = client.fetch_result(submission.poll_url)

    assert first.status in (RemoteStatus.QUEUED, RemoteStatus.RUNNING)
    assert final.status is RemoteStatus.SUCCEEDED and final.progress == 100
    assert output.page_count == pages
    assert expected_text in " ".join(page["text"] for page in output.payload["pages"])
    pairs = {pair["key"]: pair["number"] for pair in output.payload["key_values"]}
    assert pairs[expected_pair[0]] == expected_pair[1]
    assert output.model_version.startswith("sandbox-extractor/")


def test_sandbox_fetches_a_source_url(sandbox, httpserver):
    httpserver.expect_request("/files/report.txt").respond_with_data(
        "Total grants: 42\n", content_type="text/plain"
    )
    client = make_client(sandbox)
    submission = client.submit(
        SubmitRequest(file_name="report.txt", source_url=httpserver.url_for("/files/report.txt"))
    )
    assert poll_until_done(client, submission.poll_url).status is RemoteStatus.SUCCEEDED
    output = client.fetch_result(submission.poll_url)
    assert output.payload["key_values"][0]["number"] == 42


def test_sandbox_does_not_follow_a_redirecting_source_url(sandbox, httpserver):
    httpserver.expect_request("/files/moved.txt").respond_with_data(
        "", status=302, headers={"Location": "http://169.254.169.254/latest/meta-data"}
    )
    client = make_client(sandbox)
    with pytest.raises(PermanentExtractorError) as refused:
        client.submit(
            SubmitRequest(file_name="moved.txt", source_url=httpserver.url_for("/files/moved.txt"))
        )
    assert refused.value.code == ErrorCode.REJECTED_BY_EXTRACTOR
    assert "redirects are not followed" in refused.value.message
    assert len(httpserver.log) == 1


@pytest.mark.parametrize(
    ("bound", "value", "refusal"),
    [("MAX_PAGES", 2, "more than 2 pages"), ("MAX_TEXT_CHARS", 100, "over 100 characters")],
)
def test_sandbox_pdf_reading_is_bounded_per_document(monkeypatch, bound, value, refusal):
    monkeypatch.setattr(extract_module, bound, value)
    with pytest.raises(DocumentTooLargeError, match=refusal):
        extract_module._pdf_pages((SAMPLES / "financial-statement.pdf").read_bytes())


def test_sandbox_pdf_reading_is_bounded_in_time():
    pdf = (SAMPLES / "financial-statement.pdf").read_bytes()
    with pytest.raises(DocumentTooLargeError, match="took over -1 s"):
        extract_module._pdf_pages(pdf, max_seconds=-1)


def test_sandbox_pdf_errors_of_any_kind_end_in_a_refusal_not_a_crash(monkeypatch):
    def explode(*args, **kwargs):
        raise RecursionError("deeply nested objects")

    monkeypatch.setattr(extract_module, "PdfReader", explode)
    with pytest.raises(CorruptDocumentError, match="RecursionError"):
        extract_module._pdf_pages(b"%PDF-1.7")


def test_sandbox_idempotency_key_returns_the_same_extraction(sandbox):
    client = make_client(sandbox)
    first = client.submit(sample_request("budget.csv", idempotency_key="job-1:1"))
    again = client.submit(sample_request("budget.csv", idempotency_key="job-1:1"))
    other = client.submit(sample_request("budget.csv", idempotency_key="job-1:2"))

    assert again.external_id == first.external_id
    assert other.external_id != first.external_id
    stats = sandbox.stats()
    assert stats["posts_by_key"] == {"job-1:1": 2, "job-1:2": 1}
    assert stats["created_by_key"] == {"job-1:1": 1, "job-1:2": 1}
    assert stats["duplicate_keys"] == []


def test_sandbox_transient_faults_are_transient_errors(sandbox):
    sandbox.configure(transient_rate=1.0)
    client = make_client(sandbox)
    statuses = set()
    for _ in range(8):
        with pytest.raises(TransientExtractorError) as caught:
            client.submit(sample_request("budget.csv"))
        statuses.add(caught.value.http_status)
    # Both outage shapes: the proxy's HTML 502 and the JSON 503.
    assert statuses == {502, 503}
    assert sandbox.stats()["jobs"] == 0


def test_sandbox_throttling_carries_retry_after(sandbox):
    sandbox.configure(throttle_rate=1.0, throttle_retry_after=7)
    with pytest.raises(TransientExtractorError) as caught:
        make_client(sandbox).submit(sample_request("budget.csv"))
    assert caught.value.http_status == 429
    assert caught.value.retry_after == 7


def test_sandbox_rate_limit_answers_429_beyond_its_bucket_and_counts_them(sandbox):
    sandbox.configure(submit_rate_limit=5, poll_rate_limit=1000)
    client = make_client(sandbox)
    outcomes = []
    for n in range(12):
        try:
            client.submit(sample_request("grant-report.txt", idempotency_key=f"rate-{n}"))
            outcomes.append("accepted")
        except TransientExtractorError as error:
            assert error.http_status == 429 and 0 < error.retry_after <= 1
            outcomes.append("throttled")
    # A full bucket holds one second's worth (5); the burst of 12 gets the rest refused.
    assert 5 <= outcomes.count("accepted") <= 7
    assert sandbox.stats()["faults"]["rate_limited"] == outcomes.count("throttled")
    time.sleep(0.25)  # a token comes back every 0.2 s
    client.submit(sample_request("grant-report.txt", idempotency_key="rate-after"))


def test_sandbox_permanent_failure_ends_the_extraction_failed(sandbox):
    sandbox.configure(permanent_failure_rate=1.0)
    client = make_client(sandbox)
    submission = client.submit(sample_request("budget.csv"))
    final = poll_until_done(client, submission.poll_url)
    assert final.status is RemoteStatus.FAILED
    assert final.error_code == "extraction_failed"


def test_sandbox_corrupt_pdf_ends_the_extraction_failed(sandbox):
    client = make_client(sandbox)
    submission = client.submit(
        SubmitRequest(file_name="broken.pdf", content_type="application/pdf", content=b"%PDF-1.4 x")
    )
    final = poll_until_done(client, submission.poll_url)
    assert (final.status, final.error_code) == (RemoteStatus.FAILED, "corrupt_document")


def test_sandbox_unsupported_document_is_rejected(sandbox):
    with pytest.raises(PermanentExtractorError) as caught:
        make_client(sandbox).submit(
            SubmitRequest(file_name="photo.bin", content=bytes(range(256)) * 4)
        )
    assert caught.value.code == ErrorCode.REJECTED_BY_EXTRACTOR
    assert caught.value.http_status == 415


def test_sandbox_lost_job_is_external_job_lost(sandbox):
    sandbox.configure(lost_rate=1.0)
    client = make_client(sandbox)
    submission = client.submit(sample_request("budget.csv"))
    with pytest.raises(ExternalJobLostError) as caught:
        client.poll(submission.poll_url)
    assert caught.value.code == ErrorCode.EXTERNAL_JOB_LOST


def test_sandbox_slow_response_times_out_as_transient(sandbox):
    sandbox.configure(slow_rate=1.0, slow_seconds=1.5)
    client = make_client(sandbox, read_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TransientExtractorError, match="timed out"):
        client.submit(sample_request("budget.csv"))
    assert time.monotonic() - started < 1.4


def test_sandbox_poll_retry_after_is_reported_and_early_polls_are_counted(sandbox):
    sandbox.configure(latency_min=5, latency_max=5, poll_retry_after=2)
    client = make_client(sandbox)
    submission = client.submit(sample_request("budget.csv"))
    first = client.poll(submission.poll_url)
    assert first.retry_after == 2
    assert sandbox.stats()["early_polls"] == []
    client.poll(submission.poll_url)  # deliberately too soon
    stats = sandbox.stats()
    assert len(stats["polls"][submission.external_id]) == 2
    assert len(stats["early_polls"]) == 1


def test_sandbox_cancel_stops_the_extraction(sandbox):
    sandbox.configure(latency_min=5, latency_max=5)
    client = make_client(sandbox)
    submission = client.submit(sample_request("budget.csv"))
    client.cancel(submission.poll_url)
    assert client.poll(submission.poll_url).status is RemoteStatus.CANCELED


def test_sandbox_refuses_a_wrong_key_and_the_error_hides_ours(sandbox):
    sandbox.configure(api_key="right-key")
    client = make_client(sandbox, api_key="sk-wrong-key-12345")
    with pytest.raises(PermanentExtractorError) as caught:
        client.submit(sample_request("budget.csv"))
    assert caught.value.code == ErrorCode.EXTRACTOR_AUTH
    assert "sk-wrong-key-12345" not in str(caught.value)
    assert "sk-wrong-key-12345" not in repr(client.config)
    ok = make_client(sandbox, api_key="right-key").submit(sample_request("budget.csv"))
    assert ok.external_id


def test_sandbox_connection_check(sandbox):
    assert "answered" in make_client(sandbox).check_connection()


def test_sandbox_keeps_the_webhooks_it_receives(sandbox):
    import requests

    requests.post(
        f"{sandbox.url}/_sandbox/webhooks",
        data=b'{"type": "job.created"}',
        headers={"webhook-id": "msg_1", "Content-Type": "application/json"},
        timeout=5,
    ).raise_for_status()
    (received,) = requests.get(f"{sandbox.url}/_sandbox/webhooks", timeout=5).json()
    assert {k.lower(): v for k, v in received["headers"].items()} == {"webhook-id": "msg_1"}
    assert received["body"] == '{"type": "job.created"}'
