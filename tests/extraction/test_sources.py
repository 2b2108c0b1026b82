"""The service's own fetch of a source URL, against a real local HTTP server."""

import hashlib
import time

import pytest
from werkzeug import Request, Response

from extraction.errors import REQUEUE_ADVICE, ErrorCode, SourceError
from extraction.sources import CHUNK_BYTES, fetch_source, status_error_code
from tests.names import resolve_as

DOCUMENT = b"%PDF-1.4 " + bytes(range(256)) * 1000


@pytest.fixture
def loopback_allowed(settings):
    """The guard as configured for tests and demos that serve sources on loopback."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def fetch(url: str, *, max_bytes: int = 1 << 20, timeout: float = 5.0):
    return fetch_source(url, max_bytes=max_bytes, timeout=timeout)


def refusal(url: str, **kwargs) -> SourceError:
    with pytest.raises(SourceError) as refused:
        fetch(url, **kwargs)
    return refused.value


def test_fetch_source_hashes_what_it_keeps(httpserver, loopback_allowed):
    httpserver.expect_request("/a.pdf").respond_with_data(
        DOCUMENT, content_type="Application/PDF; charset=binary"
    )
    with fetch(httpserver.url_for("/a.pdf")) as fetched:
        kept = fetched.file.read()
    assert kept == DOCUMENT
    assert fetched.facts.content_type == "application/pdf"
    assert fetched.facts.size == len(DOCUMENT)
    assert fetched.facts.sha256 == hashlib.sha256(DOCUMENT).hexdigest()
    assert fetched.file.closed


def test_fetch_source_calls_an_undeclared_type_octet_stream(httpserver, loopback_allowed):
    httpserver.expect_request("/a").respond_with_response(Response(b"abc", content_type=""))
    with fetch(httpserver.url_for("/a")) as fetched:
        assert fetched.facts.content_type == "application/octet-stream"


def test_fetch_source_refuses_a_private_address_without_connecting(httpserver, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    httpserver.expect_request("/a.pdf").respond_with_data(DOCUMENT)
    refused = refusal(httpserver.url_for("/a.pdf"))
    assert refused.code == ErrorCode.SOURCE_UNUSABLE
    assert "non-public address (loopback)" in refused.message
    assert httpserver.log == []


def test_fetch_source_connects_to_the_address_the_guard_approved(httpserver, settings, monkeypatch):
    """DNS rebinding: the name answers a public address to the guard, then loopback. The fetch
    goes to the approved address (here unreachable), never to loopback."""
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    httpserver.expect_request("/a.pdf").respond_with_data(DOCUMENT)
    resolve_as(monkeypatch, "rebind.example", "93.184.216.34", "127.0.0.1")
    refused = refusal(f"http://rebind.example:{httpserver.port}/a.pdf", timeout=0.5)
    assert refused.code == ErrorCode.SOURCE_UNAVAILABLE
    assert httpserver.log == []


def test_fetch_source_keeps_the_name_in_the_host_header(httpserver, settings, monkeypatch):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    httpserver.expect_request("/a.pdf").respond_with_data(DOCUMENT)
    resolve_as(monkeypatch, "named.example", "127.0.0.1")
    with fetch(f"http://named.example:{httpserver.port}/a.pdf") as fetched:
        assert fetched.facts.size == len(DOCUMENT)
    (request, _) = httpserver.log[0]
    assert request.headers["Host"] == f"named.example:{httpserver.port}"


def test_fetch_source_follows_no_redirect(httpserver, loopback_allowed):
    httpserver.expect_request("/moved").respond_with_data(
        "", status=302, headers={"Location": httpserver.url_for("/a.pdf")}
    )
    httpserver.expect_request("/a.pdf").respond_with_data(DOCUMENT)
    refused = refusal(httpserver.url_for("/moved"))
    assert (refused.code, refused.http_status) == (ErrorCode.SOURCE_UNUSABLE, 302)
    assert "redirects are not followed" in refused.message
    assert len(httpserver.log) == 1


def test_fetch_source_refuses_a_declared_oversize_before_its_body(httpserver, loopback_allowed):
    def body():
        yield b""  # werkzeug sends the headers with the first piece
        time.sleep(1.0)
        yield b"x" * (4 * CHUNK_BYTES)

    length = {"Content-Length": str(4 * CHUNK_BYTES)}
    httpserver.expect_request("/big").respond_with_response(Response(body(), headers=length))
    started = time.monotonic()
    refused = refusal(httpserver.url_for("/big"), max_bytes=CHUNK_BYTES)
    assert time.monotonic() - started < 0.8  # refused on the headers, not after the body
    assert refused.code == ErrorCode.SOURCE_UNUSABLE
    assert f"larger than the {CHUNK_BYTES}-byte limit" in refused.message
    while not httpserver.log and time.monotonic() - started < 5:
        time.sleep(0.05)


def test_fetch_source_stops_reading_an_undeclared_oversize_at_the_limit(
    httpserver, loopback_allowed
):
    sent = []

    def body():
        for _ in range(1024):  # 64 MiB, sent chunked without a length
            sent.append(CHUNK_BYTES)
            yield b"x" * CHUNK_BYTES

    httpserver.expect_request("/big").respond_with_response(Response(body()))
    refused = refusal(httpserver.url_for("/big"), max_bytes=2 * CHUNK_BYTES)
    assert refused.code == ErrorCode.SOURCE_UNUSABLE
    # Far from all of it: the server gets ahead of the reader only by what the kernel's socket
    # buffers on loopback hold (a few MiB).
    assert sum(sent) < 256 * CHUNK_BYTES


@pytest.mark.parametrize(
    ("status", "code", "may_help"),
    [
        (404, ErrorCode.SOURCE_UNUSABLE, False),
        (410, ErrorCode.SOURCE_UNUSABLE, False),
        (403, ErrorCode.SOURCE_UNUSABLE, False),
        (500, ErrorCode.SOURCE_UNAVAILABLE, True),
        (503, ErrorCode.SOURCE_UNAVAILABLE, True),
        (429, ErrorCode.SOURCE_UNAVAILABLE, True),
    ],
)
def test_fetch_source_says_whether_a_failing_source_may_pass(
    httpserver, loopback_allowed, status, code, may_help
):
    httpserver.expect_request("/a.pdf").respond_with_data("no", status=status)
    refused = refusal(httpserver.url_for("/a.pdf"))
    assert (refused.code, refused.http_status) == (code, status)
    assert f"answered HTTP {status}" in refused.message
    assert REQUEUE_ADVICE[refused.code][0] is may_help


def test_fetch_source_times_out_a_silent_source_as_transient(httpserver, loopback_allowed):
    def silent(request: Request) -> Response:
        time.sleep(1.0)
        return Response(DOCUMENT)

    httpserver.expect_request("/slow").respond_with_handler(silent)
    started = time.monotonic()
    refused = refusal(httpserver.url_for("/slow"), timeout=0.3)
    assert time.monotonic() - started < 1.2
    assert refused.code == ErrorCode.SOURCE_UNAVAILABLE
    assert "did not answer in time" in refused.message
    assert REQUEUE_ADVICE[refused.code][0] is True
    # The server answers one request at a time: let it finish before the next test's.
    while not httpserver.log and time.monotonic() - started < 5:
        time.sleep(0.05)


def test_fetch_source_ends_a_trickling_source_at_its_deadline(httpserver, loopback_allowed):
    def trickle():
        for _ in range(40):
            time.sleep(0.05)
            yield b"x"

    httpserver.expect_request("/trickle").respond_with_response(Response(trickle()))
    started = time.monotonic()
    refused = refusal(httpserver.url_for("/trickle"), timeout=0.5)
    assert time.monotonic() - started < 1.0  # every read is quick; the whole is not
    assert refused.code == ErrorCode.SOURCE_UNAVAILABLE
    assert "did not send it all in time" in refused.message


@pytest.mark.parametrize(
    ("status", "code"),
    [(404, "source_unusable"), (301, "source_unusable"), (408, "source_unavailable")],
)
def test_status_error_code_tells_lasting_failures_from_passing_ones(status, code):
    assert status_error_code(status) == code
