"""The http_async client against the real sandbox extractor process, over real HTTP."""

import json
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from extraction.clients.base import (
    ClientConfig,
    DocumentFacts,
    PollResult,
    RemoteStatus,
    SubmitRequest,
)
from extraction.clients.http_async import HttpAsyncClient
from extraction.errors import (
    ErrorCode,
    ExternalJobLostError,
    PermanentExtractorError,
    TransientExtractorError,
)
from extraction.sandbox import extract as extract_module
from extraction.sandbox import server as server_module
from extraction.sandbox.extract import CorruptDocumentError, Deadline, DocumentTooLargeError
from extraction.sandbox.server import SandboxConfig, SandboxServer, control_headers
from tests.processes import answers, free_port, start_command, stop, wait_until

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
    assert refused.value.code == ErrorCode.SOURCE_UNUSABLE
    assert "redirects are not followed" in refused.value.message
    assert len(httpserver.log) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (404, ErrorCode.SOURCE_UNUSABLE),
        (403, ErrorCode.SOURCE_UNUSABLE),
        (500, ErrorCode.SOURCE_UNAVAILABLE),
    ],
)
def test_a_source_url_that_fails_is_the_sources_fault_not_the_extractors(
    sandbox, httpserver, status, code
):
    httpserver.expect_request("/files/gone.txt").respond_with_data("", status=status)
    client = make_client(sandbox)
    with pytest.raises(PermanentExtractorError) as refused:
        client.submit(
            SubmitRequest(file_name="gone.txt", source_url=httpserver.url_for("/files/gone.txt"))
        )
    assert (refused.value.code, refused.value.http_status) == (code, 422)
    assert f"URL answered HTTP {status}" in refused.value.message


@pytest.mark.parametrize(
    ("bound", "value", "refusal"),
    [("MAX_PAGES", 2, "more than 2 pages"), ("MAX_TEXT_CHARS", 100, "over 100 characters")],
)
def test_sandbox_pdf_reading_is_bounded_per_document(monkeypatch, bound, value, refusal):
    monkeypatch.setattr(extract_module, bound, value)
    with pytest.raises(DocumentTooLargeError, match=refusal):
        extract_module._pdf_pages((SAMPLES / "financial-statement.pdf").read_bytes(), Deadline(10))


def test_sandbox_pdf_reading_is_bounded_in_time():
    pdf = (SAMPLES / "financial-statement.pdf").read_bytes()
    with pytest.raises(DocumentTooLargeError, match="took over -1 s"):
        extract_module._pdf_pages(pdf, Deadline(-1))


def test_sandbox_pdf_errors_of_any_kind_end_in_a_refusal_not_a_crash(monkeypatch):
    def explode(*args, **kwargs):
        raise RecursionError("deeply nested objects")

    monkeypatch.setattr(extract_module, "PdfReader", explode)
    with pytest.raises(CorruptDocumentError, match="RecursionError"):
        extract_module._pdf_pages(b"%PDF-1.7", Deadline(10))


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


def test_sandbox_counts_the_pages_each_extraction_analysed_once_per_key(sandbox):
    client = make_client(sandbox)
    client.submit(sample_request("financial-statement.pdf", idempotency_key="pdf"))
    client.submit(sample_request("financial-statement.pdf", idempotency_key="pdf"))  # a replay
    # The same file again under a new key: its kept result, analysed (and paid) again.
    client.submit(sample_request("financial-statement.pdf", idempotency_key="pdf-again"))
    client.submit(sample_request("grant-report.txt", idempotency_key="txt"))
    broken = SubmitRequest(
        file_name="broken.pdf",
        content_type="application/pdf",
        content=b"%PDF-1.4 x",
        idempotency_key="broken",
    )
    client.submit(broken)
    sandbox.configure(permanent_failure_rate=1.0)
    failed = client.submit(sample_request("grant-report.txt", idempotency_key="failed"))
    client.submit(sample_request("budget.csv"))  # no key: in the total only

    final = poll_until_done(client, failed.poll_url)
    stats = sandbox.stats()

    assert (final.status, final.billed_pages) == (RemoteStatus.FAILED, 2)
    assert stats["pages_by_key"] == {"pdf": 3, "pdf-again": 3, "txt": 2, "broken": 0, "failed": 2}
    assert stats["pages_analysed"] == 3 + 3 + 2 + 0 + 2 + 1
    sandbox.reset()
    assert (sandbox.stats()["pages_by_key"], sandbox.stats()["pages_analysed"]) == ({}, 0)


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
    (received,) = sandbox.webhooks()
    assert {k.lower(): v for k, v in received["headers"].items()} == {"webhook-id": "msg_1"}
    assert received["body"] == '{"type": "job.created"}'


def protocol_calls(sandbox, job_id: str) -> dict[str, requests.Response]:
    """One request of each kind of the extractor protocol, answered however the sandbox likes."""
    job = f"{sandbox.url}/v1/extractions/{job_id}"
    return {
        "submit": requests.post(
            f"{sandbox.url}/v1/extractions", files={"file": ("a.txt", b"Total: 1\n")}, timeout=5
        ),
        "poll": requests.get(job, timeout=5),
        "result": requests.get(f"{job}/result", timeout=5),
        "cancel": requests.delete(job, timeout=5),
    }


def test_sandbox_outage_answers_503_without_retry_after_to_every_protocol_route(sandbox):
    client = make_client(sandbox)
    submission = client.submit(sample_request("budget.csv"))
    sandbox.outage(30)

    calls = protocol_calls(sandbox, submission.external_id)
    with pytest.raises(TransientExtractorError) as caught:
        client.poll(submission.poll_url)

    for answer in calls.values():
        assert answer.status_code == 503
        assert "Retry-After" not in answer.headers
        assert answer.json()["error"]["code"] == "unavailable"
    assert (caught.value.http_status, caught.value.retry_after) == (503, None)
    # The control and inspection routes keep answering.
    assert requests.get(f"{sandbox.url}/healthz", timeout=5).ok
    assert sandbox.webhooks() == []
    stats = sandbox.stats()
    assert stats["down"] is True
    assert stats["outage_calls"] == 5
    assert stats["outage_calls_by_kind"] == {"submit": 1, "poll": 2, "result": 1, "cancel": 1}
    assert stats["jobs"] == 1  # the submission during the outage created nothing


def test_sandbox_outage_of_zero_seconds_ends_it_at_once(sandbox):
    answer = requests.post(
        f"{sandbox.url}/_sandbox/outage", json={"seconds": 30}, headers=control_headers(), timeout=5
    )
    assert answer.json() == {"down_for": 30}
    assert {call.status_code for call in protocol_calls(sandbox, "none").values()} == {503}

    sandbox.outage(0)

    assert sandbox.stats()["down"] is False
    client = make_client(sandbox)
    submission = client.submit(sample_request("budget.csv"))
    assert poll_until_done(client, submission.poll_url).status is RemoteStatus.SUCCEEDED
    assert sandbox.stats()["outage_calls"] == 4


def test_sandbox_outage_ends_when_its_time_runs_out(sandbox):
    started = time.monotonic()
    sandbox.outage(0.5)
    assert {call.status_code for call in protocol_calls(sandbox, "none").values()} == {503}

    wait_until(lambda: not sandbox.stats()["down"], 5, "the outage to end")

    assert time.monotonic() - started >= 0.45
    calls = protocol_calls(sandbox, "none")
    statuses = {kind: answer.status_code for kind, answer in calls.items()}
    assert statuses == {"submit": 202, "poll": 404, "result": 404, "cancel": 404}
    by_kind = sandbox.stats()["outage_calls_by_kind"]
    assert by_kind == {"submit": 1, "poll": 1, "result": 1, "cancel": 1}


def test_sandbox_reset_clears_the_outage_counters_and_ends_the_outage(sandbox):
    sandbox.outage(30)
    protocol_calls(sandbox, "none")
    assert sandbox.stats()["outage_calls"] == 4

    sandbox.reset()

    stats = sandbox.stats()
    assert (stats["down"], stats["outage_calls"], stats["outage_calls_by_kind"]) == (False, 0, {})
    assert protocol_calls(sandbox, "none")["submit"].status_code == 202


@pytest.mark.parametrize("body", [{}, {"seconds": -1}, {"seconds": "5"}, [5]])
def test_sandbox_outage_refuses_a_bad_duration(sandbox, body):
    answer = requests.post(
        f"{sandbox.url}/_sandbox/outage", json=body, headers=control_headers(), timeout=5
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "bad_outage"
    assert sandbox.stats()["down"] is False


def test_sandbox_outage_seconds_flag_starts_the_process_down(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_command(
        "run_sandbox_extractor",
        "--port",
        str(port),
        "--outage-seconds",
        "60",
        log=tmp_path / "sandbox.log",
    )
    try:
        wait_until(lambda: answers(f"{url}/healthz"), 20, "the sandbox extractor")
        submitted = requests.post(f"{url}/v1/extractions", json={}, timeout=5)
        stats = requests.get(f"{url}/_sandbox/stats", headers=control_headers(), timeout=5).json()
        assert submitted.status_code == 503 and "Retry-After" not in submitted.headers
        assert (stats["down"], stats["outage_calls_by_kind"]) == (True, {"submit": 1})
    finally:
        stop(process)


def test_sandbox_listen_backlog_fits_many_connections_at_once(sandbox):
    server = SandboxServer(("127.0.0.1", 0), SandboxConfig())
    server.server_close()
    assert server.request_queue_size >= 128
    if shutil.which("ss") is None:
        return
    # The running process's listening socket: `ss` shows its backlog as Send-Q.
    port = sandbox.url.rsplit(":", 1)[1]
    listening = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    assert int(listening[2]) >= min(128, somaxconn)


# Security review: the sandbox is a peer of the service, never a way to attack it.


@pytest.fixture
def local_sandbox():
    """Start sandboxes in this process, so that the test's settings and resolver apply to them."""
    servers = []

    def start(**config) -> SandboxServer:
        server = SandboxServer(("127.0.0.1", 0), SandboxConfig(**config))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# Lines of n characters a number or key/value pattern could backtrack on quadratically (the
# former ones did on the first and the last).
HOSTILE_LINES = {
    "digits": lambda n: "Total: " + "1" * n + "x",
    "digits after a point": lambda n: "Total: 1." + "1" * n + "x",
    "spaces inside a value": lambda n: "Total: a" + " " * n + "b",
}


@pytest.mark.parametrize("hostile", HOSTILE_LINES.values(), ids=HOSTILE_LINES.keys())
def test_sandbox_key_value_search_is_linear_in_the_line(monkeypatch, hostile):
    line = hostile(40_000)
    monkeypatch.setattr(extract_module, "MAX_LINE_CHARS", len(line))  # the patterns alone
    started = time.monotonic()
    (pair,) = extract_module.key_values(line, 1)
    assert time.monotonic() - started < 0.2
    assert (pair["key"], pair["number"]) == ("Total", None)


@pytest.mark.parametrize("hostile", HOSTILE_LINES.values(), ids=HOSTILE_LINES.keys())
def test_sandbox_reads_a_400_kb_hostile_line_within_a_second(hostile):
    started = time.monotonic()
    result = extract_module.extract(hostile(400_000).encode(), "a.txt", "text/plain")
    assert time.monotonic() - started < 1
    assert result["pages"][0]["text"] and result["key_values"] == []  # too long to be a pair


def test_sandbox_time_bound_covers_the_search_for_pairs(monkeypatch):
    monkeypatch.setattr(extract_module, "MAX_SECONDS", -1)
    with pytest.raises(DocumentTooLargeError, match="took over -1 s"):
        extract_module.extract(b"Total: 1\n", "a.txt", "text/plain")


# The pattern before the security review (quadratic on long lines): the new search must agree.
FORMER_KEY_VALUE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 &/()'.,-]{0,60}?)\s*:\s*(\S.*?)\s*$")


def test_sandbox_key_values_are_those_the_former_pattern_found():
    lines = [
        *(SAMPLES / "grant-report.txt").read_text().splitlines(),
        *(SAMPLES / "budget.csv").read_text().splitlines(),
        "  Net (loss) :  (1,200.50)  ",
        "Fee: €12.5",
        "A" * 62 + ": a key one too long",
        "A" * 60 + ": 1",
        "1st: not a key",
        "Empty:   ",
        "Two: colons: here",
        "https://example.org/a: b",
    ]
    expected = []
    for line in lines:
        if match := FORMER_KEY_VALUE.match(line):
            expected.append((match.group(1).strip(), match.group(2)))
    pairs = extract_module.key_values("\n".join(lines), 1)
    assert [(pair["key"], pair["value"]) for pair in pairs] == expected and len(pairs) >= 8
    assert extract_module.parse_number("(1,200.50)") == -1200.5
    assert extract_module.parse_number("$1,234,500") == 1234500.0


def test_sandbox_forgets_a_job_after_its_retention(local_sandbox):
    server = local_sandbox(job_retention=0.3)
    client = make_client(server)
    submission = client.submit(sample_request("budget.csv", idempotency_key="kept-a-while"))
    assert client.poll(submission.poll_url).status is RemoteStatus.SUCCEEDED

    time.sleep(0.4)

    with pytest.raises(ExternalJobLostError):
        client.poll(submission.poll_url)
    stats = server.state.stats()
    assert (stats["jobs"], stats["polls"]) == (0, {})
    assert server.state.job_by_key == {}


def test_sandbox_keeps_results_within_its_byte_cap_oldest_first(local_sandbox):
    sizes = [
        len(json.dumps(server_module.extracted((SAMPLES / name).read_bytes(), name, media)))
        for name, media in (("budget.csv", "text/csv"), ("grant-report.txt", "text/plain"))
    ]
    cap = max(sizes) + 100  # room for either result, not both
    server = local_sandbox(max_result_bytes=cap)
    client = make_client(server)
    first = client.submit(sample_request("budget.csv"))
    again = client.submit(sample_request("budget.csv"))  # the same file: one result kept
    assert server.state.stats()["results"] == 1
    other = client.submit(sample_request("grant-report.txt"))

    for dropped in (first, again):
        with pytest.raises(ExternalJobLostError):
            client.poll(dropped.poll_url)
    assert client.poll(other.poll_url).status is RemoteStatus.SUCCEEDED
    assert "after-school" in json.dumps(client.fetch_result(other.poll_url).payload)
    stats = server.state.stats()
    assert stats["results"] == 1 and stats["result_bytes"] <= cap


def test_sandbox_webhook_receiver_refuses_a_huge_body(sandbox):
    answer = requests.post(f"{sandbox.url}/_sandbox/webhooks", data=b"x" * (2 << 20), timeout=5)
    assert answer.status_code == 413
    assert sandbox.webhooks() == []


def rebinding_resolver(monkeypatch, *answers: str) -> None:
    """`rebind.example` answers each address in turn, then the last one for good."""
    real = socket.getaddrinfo
    queue = list(answers)

    def resolve(host, port, *args, **kwargs):
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)


def test_sandbox_refuses_a_source_url_whose_name_resolves_to_loopback(
    local_sandbox, settings, monkeypatch, httpserver
):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    httpserver.expect_request("/internal").respond_with_data("Secret: 1")
    rebinding_resolver(monkeypatch, "127.0.0.1")
    client = make_client(local_sandbox())
    with pytest.raises(PermanentExtractorError) as refused:
        client.submit(
            SubmitRequest(
                file_name="a.txt", source_url=f"http://rebind.example:{httpserver.port}/internal"
            )
        )
    assert "non-public" in refused.value.message
    assert httpserver.log == []


def test_sandbox_fetches_from_the_address_the_guard_approved(
    local_sandbox, settings, monkeypatch, httpserver
):
    """DNS rebinding: the name passes the guard with one address, then points at loopback."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.2/32"]  # nothing listens there
    httpserver.expect_request("/internal").respond_with_data("Secret: 1")
    rebinding_resolver(monkeypatch, "127.0.0.2", "127.0.0.1")
    client = make_client(local_sandbox())
    with pytest.raises(PermanentExtractorError, match="ConnectionError"):
        client.submit(
            SubmitRequest(
                file_name="a.txt", source_url=f"http://rebind.example:{httpserver.port}/internal"
            )
        )
    assert httpserver.log == []


CONTROL_ROUTES = [
    ("GET", "stats", None),
    ("GET", "webhooks", None),
    ("POST", "reset", None),
    ("POST", "config", {"api_key": "taken-over"}),
    ("POST", "outage", {"seconds": 60}),
]


@pytest.mark.parametrize("token", [None, "wrong"])
@pytest.mark.parametrize(("method", "route", "body"), CONTROL_ROUTES)
def test_sandbox_control_routes_need_the_token(sandbox, method, route, body, token):
    sandbox.configure(latency_min=5, latency_max=5)
    headers = {"X-Sandbox-Token": token} if token else {}
    answer = requests.request(
        method, f"{sandbox.url}/_sandbox/{route}", json=body, headers=headers, timeout=5
    )
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    stats = sandbox.stats()  # with the token: nothing changed
    assert stats["config"]["latency_min"] == 5 and stats["down"] is False
    assert make_client(sandbox).submit(sample_request("budget.csv")).external_id


def test_a_source_url_cannot_read_the_webhooks_the_sandbox_received(sandbox):
    requests.post(
        f"{sandbox.url}/_sandbox/webhooks", data=b'{"secret": "another client"}', timeout=5
    ).raise_for_status()
    client = make_client(sandbox)
    with pytest.raises(PermanentExtractorError) as refused:
        client.submit(
            SubmitRequest(file_name="w.txt", source_url=f"{sandbox.url}/_sandbox/webhooks")
        )
    assert "URL answered HTTP 401" in refused.value.message
    assert sandbox.stats()["jobs"] == 0


def test_sandbox_serves_its_samples_over_http(sandbox):
    listing = requests.get(f"{sandbox.url}/samples/", timeout=5)
    names = sorted(path.name for path in SAMPLES.iterdir())
    assert listing.json() == names
    types = {".pdf": "application/pdf", ".txt": "text/plain", ".csv": "text/csv"}
    for name in names:
        served = requests.get(f"{sandbox.url}/samples/{name}?download=1", timeout=5)
        assert served.status_code == 200
        assert served.content == (SAMPLES / name).read_bytes()
        assert served.headers["Content-Type"] == types[Path(name).suffix]


@pytest.mark.parametrize("path", ["/samples/server.py", "/samples/..%2Fserver.py", "/samples/x"])
def test_sandbox_serves_nothing_but_its_samples(sandbox, path):
    answer = requests.get(f"{sandbox.url}{path}", timeout=5)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "document",
    [
        None,
        "text/csv",
        {"content_type": "text/csv", "size": 10},
        {"content_type": "text/csv; charset=utf-8", "size": 10, "sha256": "a" * 64},
        {"content_type": "text/csv", "size": -1, "sha256": "a" * 64},
        {"content_type": "text/csv", "size": True, "sha256": "a" * 64},
        {"content_type": "text/csv", "size": 10, "sha256": "A" * 64},
        {"content_type": "text/csv", "size": 10, "sha256": "a" * 63 + "\x00"},
        {"content_type": "x" * 200 + "/csv", "size": 10, "sha256": "a" * 64},
    ],
)
def test_document_facts_are_read_only_when_each_is_what_it_claims(document):
    assert DocumentFacts.read(document) is None


def test_document_facts_read_a_wellformed_document():
    facts = DocumentFacts.read({"content_type": "application/pdf", "size": 0, "sha256": "0" * 64})
    assert facts == DocumentFacts("application/pdf", 0, "0" * 64)
