"""The azure_di adapter replaying the service's published response shapes from a local server."""

import base64
import hashlib
import json
import socketserver
import tempfile
import threading
import tracemalloc
from pathlib import Path

import pytest
import trustme
from pytest_httpserver import HTTPServer
from werkzeug import Response

from extraction.clients.azure_di import AzureDocumentIntelligenceClient, Base64SourceBody
from extraction.clients.base import ClientConfig, RemoteStatus, SubmitRequest
from extraction.errors import (
    ErrorCode,
    ExternalJobLostError,
    PermanentExtractorError,
    TransientExtractorError,
)
from tests.hostile_http import http_answer

FIXTURES = Path(__file__).parent / "fixtures" / "azure_di"
ANALYZE = "/documentintelligence/documentModels/prebuilt-layout:analyze"
RESULT = (
    "/documentintelligence/documentModels/prebuilt-layout/analyzeResults/"
    "3b31320d-8bab-4f88-b19c-2322a7f11034"
)
KEY = "azure-key-0123456789abcdef"


def replay(name: str, server) -> Response:
    recorded = json.loads((FIXTURES / f"{name}.json").read_text())
    headers = {
        k: v.replace("{server}", server.url_for("").rstrip("/"))
        for k, v in recorded["headers"].items()
    }
    body = json.dumps(recorded["body"]) if recorded["body"] is not None else ""
    if body:
        headers["Content-Type"] = "application/json; charset=utf-8"
    return Response(body, status=recorded["status"], headers=headers)


@pytest.fixture
def client(httpserver) -> AzureDocumentIntelligenceClient:
    config = ClientConfig(base_url=httpserver.url_for("/"), model_id="prebuilt-layout", api_key=KEY)
    return AzureDocumentIntelligenceClient(config)


def submitted(client, httpserver):
    httpserver.expect_oneshot_request(ANALYZE, method="POST").respond_with_response(
        replay("analyze_accepted", httpserver)
    )
    return client.submit(
        SubmitRequest(file_name="a.pdf", source_url="https://files.example.org/a.pdf")
    )


def test_azure_submit_sends_url_source_options_and_key(client, httpserver):
    httpserver.expect_oneshot_request(
        ANALYZE,
        method="POST",
        query_string={
            "api-version": "2024-11-30",
            "pages": "1-2,4",
            "locale": "en-US",
            "features": "keyValuePairs,queryFields",
            "outputContentFormat": "markdown",
        },
        headers={"Ocp-Apim-Subscription-Key": KEY},
        json={"urlSource": "https://files.example.org/a.pdf"},
    ).respond_with_response(replay("analyze_accepted", httpserver))

    submission = client.submit(
        SubmitRequest(
            file_name="a.pdf",
            source_url="https://files.example.org/a.pdf",
            options={
                "pages": "1-2,4",
                "locale": "en-US",
                "features": ["keyValuePairs", "queryFields"],
                "output_content_format": "markdown",
            },
        )
    )

    assert submission.external_id == "3b31320d-8bab-4f88-b19c-2322a7f11034"
    assert submission.poll_url == httpserver.url_for(RESULT) + "?api-version=2024-11-30"
    assert submission.request_id == "3b31320d-8bab-4f88-b19c-2322a7f11034"
    # The 202 carries no Retry-After: the caller falls back to the extractor's interval.
    assert submission.retry_after is None
    httpserver.check_assertions()


def test_azure_submit_sends_uploaded_bytes_as_base64(client, httpserver):
    httpserver.expect_oneshot_request(
        ANALYZE, method="POST", json={"base64Source": base64.b64encode(b"%PDF-1.4 doc").decode()}
    ).respond_with_response(replay("analyze_accepted", httpserver))
    submission = client.submit(SubmitRequest(file_name="a.pdf", content=b"%PDF-1.4 doc"))
    assert submission.external_id
    httpserver.check_assertions()


def test_azure_submit_streams_a_documents_file_as_base64_with_its_length(client, httpserver):
    """A fetched source is sent from its file a chunk at a time: the body Azure receives is
    the whole document in base64, announced by its length rather than sent chunked."""
    document = bytes(range(256)) * 2000 + b"odd"  # several chunks, not a multiple of 3
    with tempfile.SpooledTemporaryFile(max_size=1024) as file:
        file.write(document)
        file.seek(100)  # sent from its start, wherever it was left
        httpserver.expect_oneshot_request(
            ANALYZE, method="POST", json={"base64Source": base64.b64encode(document).decode()}
        ).respond_with_response(replay("analyze_accepted", httpserver))
        client.submit(SubmitRequest(file_name="a.pdf", content=file))
    httpserver.check_assertions()
    (request, _) = httpserver.log[0]
    assert request.headers["Content-Type"] == "application/json"
    assert int(request.headers["Content-Length"]) == len(request.get_data())
    assert "Transfer-Encoding" not in request.headers


class DiscardingAnalyze(socketserver.StreamRequestHandler):
    """Azure's analyze call as a server that keeps no body: it reads it a chunk at a time,
    keeping its digest, and answers 202 with an Operation-Location (pytest-httpserver would keep
    the body, in this process, where the memory is measured)."""

    def handle(self) -> None:
        length = 0
        while (line := self.rfile.readline(65537)) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        digest = hashlib.sha256()
        while length and (chunk := self.rfile.read(min(length, 65536))):
            digest.update(chunk)
            length -= len(chunk)
        self.server.digests.append(digest.hexdigest())
        location = f"http://127.0.0.1:{self.server.server_address[1]}{RESULT}"
        self.wfile.write(http_answer(202, headers=[(b"Operation-Location", location.encode())]))


def test_azure_submit_holds_a_chunk_of_a_large_document_not_the_document():
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), DiscardingAnalyze) as server:
        server.digests = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        client = AzureDocumentIntelligenceClient(
            ClientConfig(base_url=f"http://127.0.0.1:{port}/", api_key=KEY)
        )
        with tempfile.TemporaryFile() as file:
            for _ in range(128):  # 8 MiB, written without holding it
                file.write(bytes(range(256)) * 256)
            tracemalloc.start()
            try:
                client.submit(SubmitRequest(file_name="big.pdf", content=file))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            file.seek(0)
            sent = b"".join(Base64SourceBody(file))
        server.shutdown()
    # The document and its base64 would be 8 and 10.7 MiB; the call holds a few chunks.
    assert peak < 2 << 20
    assert server.digests == [hashlib.sha256(sent).hexdigest()]


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, Base64SourceBody.CHUNK_BYTES + 1])
def test_azure_base64_body_is_as_long_as_it_says(size):
    body = Base64SourceBody(b"x" * size)
    sent = b"".join(body)
    assert len(body) == len(sent) and b"".join(body) == sent
    assert json.loads(sent) == {"base64Source": base64.b64encode(b"x" * size).decode()}


@pytest.mark.parametrize(
    ("fixture", "status", "raw"),
    [
        ("result_notstarted", RemoteStatus.QUEUED, "notStarted"),
        ("result_running", RemoteStatus.RUNNING, "running"),
        ("result_canceled", RemoteStatus.CANCELED, "canceled"),
        ("result_skipped", RemoteStatus.FAILED, "skipped"),
        ("result_completed_unknown", RemoteStatus.UNKNOWN, "completed"),
    ],
)
def test_azure_poll_maps_every_status_word(client, httpserver, fixture, status, raw):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(RESULT, method="GET").respond_with_response(
        replay(fixture, httpserver)
    )
    result = client.poll(submission.poll_url)
    assert (result.status, result.raw_status, result.output) == (status, raw, None)


def test_azure_poll_running_reports_retry_after(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(RESULT).respond_with_response(
        replay("result_running", httpserver)
    )
    assert client.poll(submission.poll_url).retry_after == 2


def test_azure_poll_succeeded_carries_the_analyze_result(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(
        RESULT,
        query_string={"api-version": "2024-11-30"},
        headers={"Ocp-Apim-Subscription-Key": KEY},
    ).respond_with_response(replay("result_succeeded", httpserver))
    result = client.poll(submission.poll_url)
    assert result.status is RemoteStatus.SUCCEEDED
    assert result.output.page_count == 2
    assert result.output.model_version == "prebuilt-layout/2024-11-30"
    assert result.output.payload["content"].startswith("Riverbend")
    assert result.request_id == "3b31320d-8bab-4f88-b19c-2322a7f11034"


def test_azure_failed_analysis_is_a_200_with_the_inner_error(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(RESULT).respond_with_response(
        replay("result_failed", httpserver)
    )
    result = client.poll(submission.poll_url)
    assert result.status is RemoteStatus.FAILED
    assert result.error_code == "InvalidContent"
    assert "corrupted" in result.error_message


def test_azure_fetch_result_reads_the_analyze_result(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(RESULT).respond_with_response(
        replay("result_succeeded", httpserver)
    )
    assert client.fetch_result(submission.poll_url).page_count == 2


def test_azure_fetch_result_before_success_is_transient(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(RESULT).respond_with_response(
        replay("result_running", httpserver)
    )
    with pytest.raises(TransientExtractorError, match="no analyzeResult"):
        client.fetch_result(submission.poll_url)


def test_azure_cancel_deletes_the_result(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(
        RESULT, method="DELETE", headers={"Ocp-Apim-Subscription-Key": KEY}
    ).respond_with_response(replay("delete_result", httpserver))
    client.cancel(submission.poll_url)
    httpserver.check_assertions()


@pytest.mark.parametrize(
    ("fixture", "code"),
    [
        ("error_400_invalid_source", ErrorCode.REJECTED_BY_EXTRACTOR),
        ("error_401", ErrorCode.EXTRACTOR_AUTH),
        ("error_404_model", ErrorCode.REJECTED_BY_EXTRACTOR),
    ],
)
def test_azure_submit_permanent_errors(client, httpserver, fixture, code):
    httpserver.expect_oneshot_request(ANALYZE, method="POST").respond_with_response(
        replay(fixture, httpserver)
    )
    with pytest.raises(PermanentExtractorError) as caught:
        client.submit(
            SubmitRequest(file_name="a.pdf", source_url="https://files.example.org/a.pdf")
        )
    assert caught.value.code == code
    assert KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("fixture", "retry_after"),
    [("error_429", 3.0), ("error_429_no_retry_after", None), ("error_503", 10.0)],
)
def test_azure_throttling_and_outages_are_transient(client, httpserver, fixture, retry_after):
    httpserver.expect_oneshot_request(ANALYZE, method="POST").respond_with_response(
        replay(fixture, httpserver)
    )
    with pytest.raises(TransientExtractorError) as caught:
        client.submit(
            SubmitRequest(file_name="a.pdf", source_url="https://files.example.org/a.pdf")
        )
    assert caught.value.retry_after == retry_after


def test_azure_poll_of_a_forgotten_result_is_external_job_lost(client, httpserver):
    submission = submitted(client, httpserver)
    httpserver.expect_oneshot_request(RESULT).respond_with_response(
        replay("error_404_result", httpserver)
    )
    with pytest.raises(ExternalJobLostError):
        client.poll(submission.poll_url)


def test_azure_accepted_without_operation_location_is_transient(client, httpserver):
    httpserver.expect_oneshot_request(ANALYZE, method="POST").respond_with_data("", status=202)
    with pytest.raises(TransientExtractorError, match="Operation-Location"):
        client.submit(
            SubmitRequest(file_name="a.pdf", source_url="https://files.example.org/a.pdf")
        )


@pytest.fixture
def other_port():
    server = HTTPServer(host="localhost")
    server.start()
    yield server
    server.clear()
    if server.is_running():
        server.stop()


@pytest.fixture
def other_host(httpserver):
    # Loopback answers on all of 127/8: the same port on another address is another host.
    server = HTTPServer(host="127.0.0.2", port=httpserver.port)
    server.start()
    yield server
    server.clear()
    if server.is_running():
        server.stop()


@pytest.mark.parametrize("elsewhere", ["other_port", "other_host"])
def test_azure_operation_location_elsewhere_never_receives_the_key(
    client, httpserver, elsewhere, request
):
    other = request.getfixturevalue(elsewhere)
    other.expect_request(RESULT).respond_with_response(replay("result_running", other))
    httpserver.expect_oneshot_request(ANALYZE, method="POST").respond_with_response(
        replay("analyze_accepted", other)
    )
    with pytest.raises(PermanentExtractorError) as caught:
        client.submit(
            SubmitRequest(file_name="a.pdf", source_url="https://files.example.org/a.pdf")
        )
    assert caught.value.code == ErrorCode.INVALID_RESPONSE
    # A location stored before the check existed is refused too, before any call.
    for call in (client.poll, client.cancel):
        with pytest.raises(PermanentExtractorError, match="own scheme, host and port"):
            call(other.url_for(RESULT))
    assert other.log == []


@pytest.fixture
def tls_extractor(tls_server):
    authority = trustme.CA()
    return tls_server(authority, authority)


def test_azure_operation_location_downgraded_to_http_is_refused(tls_extractor):
    # The extractor is https; its 202 points at http on the same host and port.
    accepted = replay("analyze_accepted", tls_extractor)
    location = accepted.headers["Operation-Location"]
    accepted.headers["Operation-Location"] = location.replace("https://", "http://")
    tls_extractor.expect_request(ANALYZE, method="POST").respond_with_response(accepted)
    config = ClientConfig(
        base_url=tls_extractor.url_for("/"), model_id="prebuilt-layout", api_key=KEY
    )
    client = AzureDocumentIntelligenceClient(config)

    with pytest.raises(PermanentExtractorError) as caught:
        client.submit(
            SubmitRequest(file_name="a.pdf", source_url="https://files.example.org/a.pdf")
        )
    assert caught.value.code == ErrorCode.INVALID_RESPONSE
    with pytest.raises(PermanentExtractorError, match="own scheme, host and port"):
        client.poll(tls_extractor.url_for(RESULT).replace("https://", "http://"))
    # The one call made went over TLS to the analyze endpoint; nothing went in plain HTTP.
    assert [request.path for request, _ in tls_extractor.log] == [ANALYZE]
