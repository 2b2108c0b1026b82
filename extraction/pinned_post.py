"""POSTs to client-given URLs (webhook receivers), sent to the address the SSRF guard approved
(`urlsafety.check_public_url`) whatever the name resolves to by the time of the call; the Host
header, TLS SNI and the certificate check keep the name.

Written on `http.client`: the delivery lane sends thousands of POSTs a minute, and urllib3's
pool cost each one about twice the CPU (docs/performance.md). What the lane needed from it is
here: a connect timeout apart from the read timeout, connections kept alive per receiver and
dropped once the receiver has closed them, and no retry, proxy or redirect.
"""

import contextlib
import functools
import http.client
import select
import socket
import ssl
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

import certifi
from django.conf import settings

from extraction.urlsafety import check_public_url, port_of


class ConnectError(OSError):
    """No connection was made; its `__cause__` says why."""


class ConnectTimeout(ConnectError):
    """The receiver did not accept a connection, or finish the TLS handshake, in time."""


class Target(NamedTuple):
    """Where a checked URL's POSTs go."""

    scheme: str
    host: str  # the name: the Host header, SNI and the certificate check
    port: int
    address: str | None  # what to connect to; None: the name (a host the settings allow)
    path: str  # with the query
    netloc: str

    @property
    def connects_to(self) -> tuple:
        """What a kept-alive connection serves: the same for every path of a receiver."""
        return self.scheme, self.host, self.port, self.address


def checked_target(url: str) -> Target:
    """Where `url`'s POSTs go, once the guard approved it (else `UnsafeURLError`)."""
    addresses = check_public_url(url)
    parts = urlsplit(url)
    return Target(
        parts.scheme,
        parts.hostname,
        port_of(parts),
        addresses[0] if addresses else None,
        urlunsplit(("", "", parts.path or "/", parts.query, "")),
        parts.netloc,
    )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """Certificates checked against certifi's authorities and the receiver's name."""
    return ssl.create_default_context(cafile=certifi.where())


class _Connection(http.client.HTTPConnection):
    def __init__(self, target: Target) -> None:
        super().__init__(target.address or target.host, target.port)
        self.target = target
        self.connect_timeout: float | None = None

    def connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except TimeoutError as slow:
            raise ConnectTimeout() from slow
        except OSError as failure:
            raise ConnectError() from failure
        try:
            if self.target.scheme == "https":
                sock = tls_context().wrap_socket(sock, server_hostname=self.target.host)
        except TimeoutError as slow:
            sock.close()
            raise ConnectTimeout() from slow
        except BaseException:
            sock.close()
            raise
        sock.settimeout(self.timeout)
        self.sock = sock


# Idle kept-alive connections by (scheme, host, port, address), so that many POSTs to one
# receiver reuse theirs; the receiver used least recently is closed past `MAX_RECEIVERS`.
MAX_RECEIVERS = 64
_idle: OrderedDict[tuple, list[_Connection]] = OrderedDict()
_idle_lock = threading.Lock()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: its end (or bytes no request asked
    for), so it is not reused."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _taken(target: Target) -> _Connection:
    with _idle_lock:
        idle = _idle.get(target.connects_to, [])
        while idle:
            connection = idle.pop()
            if not _closed_by_peer(connection.sock):
                return connection
            connection.close()
    return _Connection(target)


def _kept(target: Target, connection: _Connection) -> None:
    key = target.connects_to
    with _idle_lock:
        idle = _idle.setdefault(key, [])
        _idle.move_to_end(key)
        idle.append(connection)
        closing = idle[settings.WEBHOOK_CONCURRENCY :]
        del idle[settings.WEBHOOK_CONCURRENCY :]
        while len(_idle) > MAX_RECEIVERS:
            closing += _idle.popitem(last=False)[1]
    for spare in closing:
        spare.close()


@contextlib.contextmanager
def posted(
    target: Target, *, body: bytes, headers: dict[str, str], timeout: tuple[float, float]
) -> Iterator[http.client.HTTPResponse]:
    """POST to a checked target. The response's body is the caller's to read; its connection
    is kept for the next POST only if the body was read to its end (a receiver streaming
    without end cannot hold the lane). Failures raise `ConnectError`, `OSError` (timeouts and
    TLS included) or `http.client.HTTPException`."""
    connection = _taken(target)
    connection.connect_timeout, connection.timeout = timeout
    if connection.sock is not None:
        connection.sock.settimeout(connection.timeout)
    try:
        connection.request("POST", target.path, body, {**headers, "Host": target.netloc})
        response = connection.getresponse()
    except BaseException:
        connection.close()
        raise
    try:
        yield response
    finally:
        if response.isclosed() and not response.will_close:
            _kept(target, connection)
        else:
            connection.close()
