"""POSTs over kept-alive connections to the address the SSRF guard approved
(`jobtracking.webhooks.transport`), against real local servers: plain HTTP, and TLS with a test
authority's certificates."""

import socket
import ssl
import time

import pytest
import trustme

from extraction.http1 import HEAD_BYTES, BadAnswer, Disconnected
from extraction.urlsafety import UnsafeURLError
from jobtracking.webhooks import transport
from jobtracking.webhooks.transport import ANSWER_BYTES, checked_target
from tests.processes import wait_until
from tests.receivers import KeepAliveReceiver

TIMEOUT = (2.0, 2.0)


@pytest.fixture
def receiver():
    with KeepAliveReceiver() as server:
        yield server


def post(url: str) -> int:
    return answer(url).status


def answer(url: str, headers: dict | None = None) -> transport.Answer:
    target = checked_target(url)
    return transport.post(target, body=b"{}", headers=headers or {}, timeout=TIMEOUT)


def test_posts_to_a_receiver_share_a_kept_alive_connection(settings, receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    url = f"http://127.0.0.1:{receiver.port}/hooks?token=t"
    assert [post(url) for _ in range(3)] == [204] * 3
    assert len(receiver.connections) == 1


def test_a_connection_the_receiver_closed_is_replaced_not_failed(settings, receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    url = f"http://127.0.0.1:{receiver.port}/hooks"
    assert post(url) == 204
    receiver.drop_connections()
    assert post(url) == 204
    assert len(receiver.connections) == 2


@pytest.fixture
def named_loopback(settings, monkeypatch):
    """`hooks.test` resolves to loopback, which the settings allow by network (not by name):
    the POST is pinned to the approved address."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    real = socket.getaddrinfo
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, *args, **kwargs: real("127.0.0.1" if host == "hooks.test" else host, *args),
    )


def _tls_receiver(monkeypatch, name: str) -> KeepAliveReceiver:
    """A TLS receiver whose certificate is for `name`, from an authority the sender trusts."""
    authority = trustme.CA()
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(name).configure_cert(serving)
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    monkeypatch.setattr(transport, "tls_context", lambda: trusting)
    return KeepAliveReceiver(serving)


def test_tls_keeps_the_name_for_sni_the_certificate_and_host(named_loopback, monkeypatch):
    with _tls_receiver(monkeypatch, "hooks.test") as server:
        port = server.port
        target = checked_target(f"https://hooks.test:{port}/hooks")
        assert target.address == "127.0.0.1"
        assert [post(f"https://hooks.test:{port}/hooks") for _ in range(2)] == [204, 204]
        assert server.names == ["hooks.test"]  # one handshake: the connection was kept
        assert server.hosts == [f"hooks.test:{port}"] * 2
        assert len(server.connections) == 1


def test_a_certificate_for_another_name_is_refused(named_loopback, monkeypatch):
    with _tls_receiver(monkeypatch, "elsewhere.test") as server:
        with pytest.raises(ssl.SSLCertVerificationError) as refused:
            post(f"https://hooks.test:{server.port}/hooks")
        assert "hooks.test" in refused.value.verify_message


class _Scripted(KeepAliveReceiver):
    """Gives each POST the next of `answers` (None: closes the connection instead; an answer
    ending in `CLOSE`: closes it after the answer); `pause` seconds between the bytes of each."""

    def __init__(self, *answers: bytes | None, pause: float = 0) -> None:
        self.answers, self.pause = list(answers), pause
        super().__init__()

    def answer(self) -> bytes | None:
        answer = self.answers.pop(0)
        if answer is None or not (self.pause or answer.endswith(CLOSE)):
            return answer
        for byte in answer.removesuffix(CLOSE):
            self.connections[-1].sendall(bytes([byte]))
            time.sleep(self.pause)
        return None if answer.endswith(CLOSE) else b""


CLOSE = b"<close>"


@pytest.fixture
def loopback(settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]


NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"


def test_a_chunked_answer_is_read_to_its_end_and_its_connection_kept(loopback):
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nfoo\r\n3\r\nbar\r\n0\r\n\r\n"
    )
    with _Scripted(chunked, NO_CONTENT) as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        assert answer(url) == (200, b"foobar")
        assert answer(url) == (204, b"")
    assert len(receiver.connections) == 1


def test_interim_answers_are_skipped(loopback):
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
    with _Scripted(hints + b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok") as receiver:
        assert answer(f"http://127.0.0.1:{receiver.port}/hooks") == (202, b"ok")


@pytest.mark.parametrize(
    "first",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
        % (4 * ANSWER_BYTES, b"x" * 4 * ANSWER_BYTES),
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
    ],
    ids=["connection close", "HTTP/1.0", "body far past the limit", "bytes past the answer"],
)
def test_a_connection_is_not_reused_unless_its_answer_ended_and_kept_it(loopback, first):
    with _Scripted(first, NO_CONTENT) as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        status, body = answer(url)
        assert status == 200 and body[:2] in (b"ok", b"xx") and len(body) <= ANSWER_BYTES
        assert answer(url) == (204, b"")
    assert len(receiver.connections) == 2


def test_a_body_that_ends_with_the_connection_is_an_answer(loopback):
    with _Scripted(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nthanks" + CLOSE) as receiver:
        assert answer(f"http://127.0.0.1:{receiver.port}/hooks") == (200, b"thanks")


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ((None,), Disconnected),
        ((b"SSH-2.0-OpenSSH_9.6\r\n\r\n",), BadAnswer),
        ((b"HTTP/1.1 2x0 OK\r\n\r\n",), BadAnswer),
        ((b"HTTP/1.1 099 Odd\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",), BadAnswer),
        ((b"HTTP/2.0 204 No Content\r\n\r\n",), BadAnswer),
        (
            (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",),
            BadAnswer,
        ),
        (
            (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * HEAD_BYTES + b"\r\n\r\n",),
            BadAnswer,
        ),
    ],
    ids=[
        "closed",
        "not HTTP",
        "bad status",
        "status under 100",
        "HTTP/2",
        "upgrade",
        "endless headers",
    ],
)
def test_no_answer_or_one_not_in_http_fails_and_drops_the_connection(loopback, script, error):
    with _Scripted(*script, NO_CONTENT) as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        with pytest.raises(error):
            answer(url)
        assert post(url) == 204
    assert len(receiver.connections) == 2


def test_an_answer_trickling_past_the_read_timeout_times_out(loopback, monkeypatch):
    # Each byte within the timeout: only a deadline for the whole answer stops it.
    with _Scripted(NO_CONTENT, pause=0.05) as receiver:
        target = checked_target(f"http://127.0.0.1:{receiver.port}/hooks")
        with pytest.raises(TimeoutError):
            transport.post(target, body=b"{}", headers={}, timeout=(2.0, 0.5))


def test_the_path_is_percent_encoded_and_a_header_cannot_break_the_request(loopback):
    with KeepAliveReceiver() as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks/é n?q=a b&t=%2F"
        assert post(url) == 204
        with pytest.raises(ValueError):
            answer(url, {"webhook-id": "m\r\nX-Injected: 1"})
    request_line = receiver.heads[0].split(b"\r\n")[0]
    assert request_line == b"POST /hooks/%C3%A9%20n?q=a%20b&t=%2F HTTP/1.1"
    assert len(receiver.heads) == 1


def test_a_host_name_goes_in_ascii_or_not_at_all(settings):
    settings.OUTBOUND_ALLOWED_HOSTS = ["bücher.example", "ü" * 64 + ".example"]
    assert checked_target("https://bücher.example:8443/h").netloc == "xn--bcher-kva.example:8443"
    with pytest.raises(UnsafeURLError):
        checked_target(f"https://{'ü' * 64}.example/h")  # a label too long for IDNA


@pytest.mark.parametrize(
    ("script", "said"),
    [
        (NO_CONTENT + b"HTTP/1.1 103 Early Hints\r\n\r\n", (204, b"")),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\noops" + NO_CONTENT, (500, b"oops")),
    ],
    ids=["an interim answer after", "a success after a failure"],
)
def test_what_follows_the_answer_does_not_change_it(loopback, script, said):
    with _Scripted(script, NO_CONTENT) as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        assert answer(url) == said
        assert post(url) == 204
    assert len(receiver.connections) == 2


def test_an_endless_chunk_extension_is_not_read_to_the_timeout(loopback):
    endless = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"a" * 4 * ANSWER_BYTES
    with _Scripted(endless, NO_CONTENT) as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        started = time.monotonic()
        assert answer(url).status == 200
        assert time.monotonic() - started < TIMEOUT[1] / 2
        assert post(url) == 204
    assert len(receiver.connections) == 2


def test_a_host_with_a_control_character_is_refused():
    with pytest.raises(UnsafeURLError):
        checked_target("http://[2001:4860:4860::8888%\x00]/hooks")  # an IPv6 zone


def test_a_body_that_stalls_leaves_the_answer_as_it_came(loopback):
    stalled = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"
    with _Scripted(stalled, NO_CONTENT) as receiver:
        target = checked_target(f"http://127.0.0.1:{receiver.port}/hooks")
        said = transport.post(target, body=b"{}", headers={}, timeout=(2.0, 0.3))
        assert said == (200, b"partial")
        assert post(f"http://127.0.0.1:{receiver.port}/hooks") == 204
    assert len(receiver.connections) == 2


def test_idle_connections_are_capped_in_all_the_longest_idle_closed_first(loopback, settings):
    settings.WEBHOOK_IDLE_CONNECTIONS = 2
    with KeepAliveReceiver() as a, KeepAliveReceiver() as b, KeepAliveReceiver() as c:
        urls = [f"http://127.0.0.1:{r.port}/hooks" for r in (a, b, c)]
        assert [post(url) for url in urls] == [204] * 3  # a's connection, idle longest, closed
        wait_until(lambda: a.connections[0].fileno() == -1, 5, "a's end of it closed")
        assert [post(url) for url in reversed(urls)] == [204] * 3
    assert [len(r.connections) for r in (a, b, c)] == [2, 1, 1]


def test_connections_idle_past_the_timeout_are_closed(loopback, settings):
    settings.WEBHOOK_IDLE_SECONDS = 0.2
    with KeepAliveReceiver() as receiver:
        url = f"http://127.0.0.1:{receiver.port}/hooks"
        assert [post(url), post(url)] == [204, 204]  # kept while in use
        time.sleep(0.3)
        transport.close_expired()  # the lane's, after each round
        wait_until(lambda: receiver.connections[0].fileno() == -1, 5, "the receiver's end closed")
        assert post(url) == 204
    assert len(receiver.connections) == 2
