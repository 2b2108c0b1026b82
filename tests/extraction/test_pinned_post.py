"""POSTs over kept-alive connections to the address the SSRF guard approved
(`extraction.pinned_post`), against real local servers: plain HTTP, and TLS with a test
authority's certificates."""

import socket
import ssl

import pytest
import trustme

from extraction import pinned_post
from extraction.pinned_post import checked_target, posted
from tests.receivers import KeepAliveReceiver

TIMEOUT = (2.0, 2.0)


@pytest.fixture
def receiver():
    with KeepAliveReceiver() as server:
        yield server


def post(url: str) -> int:
    with posted(checked_target(url), body=b"{}", headers={}, timeout=TIMEOUT) as response:
        response.read()
        return response.status


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
    monkeypatch.setattr(pinned_post, "tls_context", lambda: trusting)
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
