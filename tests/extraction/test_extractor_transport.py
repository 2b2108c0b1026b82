"""An extractor's transport applies the environment's proxy and CA settings as requests would, from
one reading per scheme and host (the base URL's when the client is made) rather than one on
every call; and it sends what requests sent."""

import contextlib
import gzip
import socket
import socketserver
import threading
import zlib

import pytest
import requests
import trustme
import urllib3
from werkzeug import Response

from extraction.clients.base import ClientConfig
from extraction.clients.http_async import HttpAsyncClient
from extraction.clients.transport import Transport
from extraction.errors import PermanentExtractorError, TransientExtractorError
from tests.hostile_http import Canned, CannedServer, http_answer

ENVIRONMENT = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)
BASE_URL = "https://extractor.internal:8443/api"


@pytest.fixture
def environment(monkeypatch):
    """`monkeypatch`, with none of the proxy and CA variables set yet."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def unreadable_environment(monkeypatch):
    """From now on, any reading of the proxy or CA settings fails the test."""

    def fail(*args, **kwargs):
        raise AssertionError("the environment was read on a call")

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", fail)
    monkeypatch.setattr(requests.utils, "get_environ_proxies", fail)
    monkeypatch.setattr(requests.utils, "should_bypass_proxies", fail)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"HTTPS_PROXY": "http://proxy.example:3128"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "extractor.internal"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": ".internal"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "extractor.internal:8443"},
        {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "elsewhere.example"},
        {"HTTP_PROXY": "http://proxy.example:3128"},
        {"ALL_PROXY": "socks5://proxy.example:1080", "NO_PROXY": "*"},
        {"REQUESTS_CA_BUNDLE": "/etc/ssl/bundle.pem"},
        {"CURL_CA_BUNDLE": "/etc/ssl/curl.pem", "HTTPS_PROXY": "http://proxy.example:3128"},
    ],
)
def test_the_transport_settles_the_environment_as_requests_reads_it(environment, values):
    for name, value in values.items():
        environment.setenv(name, value)
    url = f"{BASE_URL}/v1/extractions/abc"
    expected = requests.Session().merge_environment_settings(url, {}, None, None, None)
    transport = Transport(BASE_URL, 4)
    unreadable_environment(environment)

    assert transport.settings(url) == expected


def test_the_transport_reads_the_environment_for_a_url_elsewhere(environment):
    """A URL on another host (a poll location stored before the base URL changed) gets the
    proxies requests would give it, not the base URL's."""
    environment.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    environment.setenv("NO_PROXY", "extractor.internal")
    transport = Transport(BASE_URL, 4)

    for url in (f"{BASE_URL}/v1", "https://other.example/v1", "http://extractor.internal/v1"):
        expected = requests.Session().merge_environment_settings(url, {}, None, None, None)
        assert transport.settings(url) == expected


def test_the_transport_sends_through_the_environment_proxy(environment, httpserver):
    """The HTTP_PROXY of the environment receives the extractor's calls (the pytest server plays
    the proxy), with no reading of the environment on the call."""
    environment.setenv("HTTP_PROXY", httpserver.url_for("/"))
    environment.setenv("NO_PROXY", "elsewhere.example")
    seen = []
    httpserver.expect_request("/v1/extractions/abc").respond_with_handler(
        lambda request: seen.append(request.host) or Response('{"status": "running"}')
    )
    client = HttpAsyncClient(ClientConfig(base_url="http://extractor.internal"))
    unreadable_environment(environment)

    client.poll("http://extractor.internal/v1/extractions/abc")

    assert seen == ["extractor.internal"]


def test_the_transport_bypasses_the_proxy_for_a_no_proxy_host(environment, httpserver):
    """NO_PROXY naming the extractor's host: the call goes straight to the host (which does not
    exist), never to the proxy."""
    environment.setenv("HTTP_PROXY", httpserver.url_for("/"))
    environment.setenv("NO_PROXY", "extractor.invalid")
    client = HttpAsyncClient(ClientConfig(base_url="http://extractor.invalid"))

    with pytest.raises(TransientExtractorError, match="connection failed"):
        client.poll("http://extractor.invalid/v1/extractions/abc")

    assert httpserver.log == []


def test_a_gzip_answer_is_read_decoded(httpserver):
    """The calls ask for gzip (as requests did), so a large result travels compressed."""
    body = gzip.compress(b'{"status": "running", "progress": 40}')
    httpserver.expect_request("/v1/extractions/abc").respond_with_response(
        Response(body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    )
    client = HttpAsyncClient(ClientConfig(base_url=httpserver.url_for("/")))

    assert client.poll(httpserver.url_for("/v1/extractions/abc")).progress == 40
    ((request, _),) = httpserver.log
    assert "gzip" in request.headers["Accept-Encoding"]
    assert request.headers["User-Agent"].startswith("fluxx-extraction-jobs/")


def test_an_answer_left_unread_never_reaches_the_next_call():
    """An answer refused half-read (past the size limit) closes its connection: the next call
    on the client reads its own answer, not the rest of that one."""
    big = http_answer(200, b"x" * 300_000, framing="chunked")
    small = http_answer(200, b'{"status": "succeeded"}')
    with CannedServer(
        lambda request: Canned(big if request.path.endswith("/big") else small),
        hang_seconds=1,
    ) as server:
        client = HttpAsyncClient(ClientConfig(base_url=server.url, max_response_bytes=100_000))
        with pytest.raises(PermanentExtractorError, match="exceeds the 100000-byte limit"):
            client.poll(f"{server.url}/v1/extractions/big")
        assert client.poll(f"{server.url}/v1/extractions/abc").raw_status == "succeeded"


def test_calls_keep_their_connection_alive():
    answer = http_answer(200, b'{"status": "running"}')
    with CannedServer(lambda request: Canned(answer), hang_seconds=1) as server:
        client = HttpAsyncClient(ClientConfig(base_url=server.url))
        for _ in range(3):
            client.poll(f"{server.url}/v1/extractions/abc")

        assert len(server.requests) == 3
        assert client.transport.route(server.url).pool.num_connections == 1


def test_a_certificate_the_environment_does_not_trust_is_refused(environment, tls_server):
    """TLS is verified against requests' CA bundle (certifi's, or REQUESTS_CA_BUNDLE's): a
    server whose authority is not in it gets no call."""
    server = tls_server(trustme.CA(), trustme.CA())
    client = HttpAsyncClient(ClientConfig(base_url=server.url_for("/")))

    with pytest.raises(TransientExtractorError, match=r"connection failed \(SSLError\)"):
        client.poll(server.url_for("/v1/extractions/abc"))
    assert server.log == []


def _deflated(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(wbits=wbits)
    return packer.compress(data) + packer.flush()


JSON = b'{"status": "running", "progress": 40}'
ANSWERS = {
    "length": http_answer(200, JSON, [(b"Content-Type", b"application/json")]),
    "chunked": http_answer(200, JSON, framing="chunked"),
    "to the connection's end": http_answer(200, JSON, framing="none"),
    "gzip": http_answer(200, gzip.compress(JSON), [(b"Content-Encoding", b"gzip")]),
    "gzip, chunked": http_answer(
        200, gzip.compress(JSON), [(b"Content-Encoding", b"GZIP")], framing="chunked"
    ),
    "deflate": http_answer(200, zlib.compress(JSON), [(b"Content-Encoding", b"deflate")]),
    "raw deflate": http_answer(200, _deflated(JSON, -15), [(b"Content-Encoding", b"deflate")]),
    "an encoding not asked for": http_answer(200, JSON, [(b"Content-Encoding", b"identity")]),
    "an interim answer first": b"HTTP/1.1 100 Continue\r\nX-Early: 1\r\n\r\n"
    + http_answer(202, JSON, [(b"Retry-After", b"3")]),
    "a header twice": http_answer(200, JSON, [(b"X-Seen", b"one"), (b"x-seen", b"two")]),
    "an error": http_answer(503, b"<h1>down</h1>", [(b"Content-Type", b"text/html")]),
    "no content": http_answer(204),
    "HTTP/1.0": http_answer(200, JSON, version=b"HTTP/1.0"),
}


@pytest.mark.parametrize("raw", list(ANSWERS.values()), ids=list(ANSWERS))
def test_the_transport_reads_an_answer_as_urllib3_reads_it(raw):
    """The answer is read on urllib3's connection by `extraction.http1`, not by urllib3: its
    status, headers and decoded body are what urllib3's own reading gives."""
    framed = b"Content-Length" in raw or b"chunked" in raw or b" 204 " in raw
    with CannedServer(
        lambda request: Canned(raw, "keep" if framed else "close"), hang_seconds=1
    ) as server:
        url = f"{server.url}/v1/extractions/abc"
        expected = urllib3.PoolManager().request("GET", url, retries=False, redirect=False)
        answer = Transport(server.url, 1).send(
            "GET", url, headers={}, timeout=(2.0, 2.0), limit=1_000_000
        )

    assert (answer.status, list(answer.headers.items()), answer.body) == (
        expected.status,
        list(expected.headers.items()),
        expected.data,
    )


def test_an_answer_cut_short_is_an_interrupted_answer():
    short = http_answer(200, JSON, framing="long")
    with CannedServer(lambda request: Canned(short, "close"), hang_seconds=1) as server:
        client = HttpAsyncClient(ClientConfig(base_url=server.url))
        with pytest.raises(TransientExtractorError, match=r"response interrupted \(Protocol"):
            client.poll(f"{server.url}/v1/extractions/abc")


def test_bytes_after_an_answer_leave_its_connection_unused():
    """Bytes no request asked for follow an answer: its connection is closed, so that the next
    call never reads them as its own answer."""
    answers = iter([http_answer(200, JSON) + b"HTTP/1.1 200 OK\r\n", http_answer(200, b"{}")])
    with CannedServer(lambda request: Canned(next(answers)), hang_seconds=1) as server:
        client = HttpAsyncClient(ClientConfig(base_url=server.url))
        assert client.poll(f"{server.url}/v1/extractions/abc").progress == 40
        assert client.poll(f"{server.url}/v1/extractions/abc").raw_status == ""

        assert client.transport.route(server.url).pool.num_connections == 2


def test_a_compressed_answer_is_bounded_by_what_it_decodes_to():
    bomb = http_answer(200, gzip.compress(b"0" * 5_000_000), [(b"Content-Encoding", b"gzip")])
    with CannedServer(lambda request: Canned(bomb), hang_seconds=1) as server:
        client = HttpAsyncClient(ClientConfig(base_url=server.url, max_response_bytes=100_000))
        with pytest.raises(PermanentExtractorError, match="exceeds the 100000-byte limit"):
            client.poll(f"{server.url}/v1/extractions/abc")


class ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy that tunnels (CONNECT) and nothing else; `targets` keeps what it was asked
    to connect to."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.targets: list[str] = []
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Tunnel(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        target = self.rfile.readline().split()[1].decode()
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        self.server.targets.append(target)
        host, _, port = target.rpartition(":")
        with socket.create_connection((host, int(port))) as upstream:
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            threading.Thread(target=_relay, args=(upstream, self.connection), daemon=True).start()
            _relay(self.connection, upstream)


def _relay(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)


def test_an_https_call_goes_through_the_proxy_s_tunnel(environment, tls_server):
    """HTTPS_PROXY: the call goes through a CONNECT tunnel to the extractor, TLS inside it."""
    authority = trustme.CA()
    server = tls_server(authority, authority)
    server.expect_request("/v1/extractions/abc").respond_with_data('{"status": "running"}')
    with ConnectProxy() as proxy:
        environment.setenv("HTTPS_PROXY", proxy.url)
        client = HttpAsyncClient(ClientConfig(base_url=server.url_for("/")))

        assert client.poll(server.url_for("/v1/extractions/abc")).raw_status == "running"
        assert proxy.targets == [f"127.0.0.1:{server.port}"]
