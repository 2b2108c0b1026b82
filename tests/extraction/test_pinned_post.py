"""POSTs over kept-alive connections to the address the SSRF guard approved
(`extraction.pinned_post`), against real local servers: plain HTTP, and TLS with a test
authority's certificates."""

import socket
import socketserver
import ssl
import threading

import pytest
import trustme

from extraction import pinned_post
from extraction.pinned_post import checked_target, posted

TIMEOUT = (2.0, 2.0)


class _Receiver(socketserver.ThreadingTCPServer):
    """Answers every POST 204 on kept-alive connections; keeps each connection it accepted and
    each request's Host header, and with a TLS context, the name each client asked for (SNI)."""

    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.tls, self.connections, self.hosts, self.names = tls, [], [], []
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _context: self.names.append(name)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def get_request(self):
        sock, address = super().get_request()
        return (self.tls.wrap_socket(sock, server_side=True) if self.tls else sock), address

    def drop_connections(self) -> None:
        """What a receiver's idle timeout does to the connections it holds."""
        for sock in self.connections:
            sock.shutdown(socket.SHUT_RDWR)


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.server.connections.append(self.connection)
        while self.rfile.readline():
            length = 0
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                if name.lower() == b"host":
                    self.server.hosts.append(value.strip().decode())
            self.rfile.read(length)
            self.wfile.write(b"HTTP/1.1 204 No Content\r\n\r\n")


@pytest.fixture
def receiver():
    with _Receiver() as server:
        yield server
        server.shutdown()


def post(url: str) -> int:
    with posted(checked_target(url), body=b"{}", headers={}, timeout=TIMEOUT) as response:
        response.read()
        return response.status


def test_posts_to_a_receiver_share_a_kept_alive_connection(settings, receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hooks?token=t"
    assert [post(url) for _ in range(3)] == [204] * 3
    assert len(receiver.connections) == 1


def test_a_connection_the_receiver_closed_is_replaced_not_failed(settings, receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hooks"
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


def _tls_receiver(monkeypatch, name: str) -> _Receiver:
    """A TLS receiver whose certificate is for `name`, from an authority the sender trusts."""
    authority = trustme.CA()
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(name).configure_cert(serving)
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    monkeypatch.setattr(pinned_post, "tls_context", lambda: trusting)
    return _Receiver(serving)


def test_tls_keeps_the_name_for_sni_the_certificate_and_host(named_loopback, monkeypatch):
    with _tls_receiver(monkeypatch, "hooks.test") as server:
        port = server.server_address[1]
        target = checked_target(f"https://hooks.test:{port}/hooks")
        assert target.address == "127.0.0.1"
        assert [post(f"https://hooks.test:{port}/hooks") for _ in range(2)] == [204, 204]
        assert server.names == ["hooks.test"]  # one handshake: the connection was kept
        assert server.hosts == [f"hooks.test:{port}"] * 2
        assert len(server.connections) == 1
        server.shutdown()


def test_a_certificate_for_another_name_is_refused(named_loopback, monkeypatch):
    with _tls_receiver(monkeypatch, "elsewhere.test") as server:
        with pytest.raises(ssl.SSLCertVerificationError) as refused:
            post(f"https://hooks.test:{server.server_address[1]}/hooks")
        assert "hooks.test" in refused.value.verify_message
        server.shutdown()
