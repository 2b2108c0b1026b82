"""POSTs to client-given URLs (webhook receivers), sent to the address the SSRF guard approved
(`urlsafety.check_public_url`) whatever the name resolves to by the time of the call; the Host
header, TLS SNI and the certificate check keep the name.

Written on sockets, with httptools reading the answers (`extraction.http1`): the
delivery lane sends thousands of POSTs a minute, and `http.client` cost each about five times
the CPU of the socket calls themselves, urllib3's pool twice that again (docs/performance.md).
What the lane needs is here: a connect timeout apart from the answer's, connections kept alive
per receiver and dropped once the receiver has closed them or an answer was not read to its
end (and never more of them, or idle for longer, than the settings say: `_Idle`), and no retry,
proxy or redirect.
"""

import functools
import select
import socket
import ssl
import threading
import time
from collections import OrderedDict
from typing import NamedTuple
from urllib.parse import urlsplit

import certifi
from django.conf import settings

from extraction.http1 import (
    NOT_IN_A_HEADER,
    BadAnswer,
    Reading,
    host_header,
    read_answer,
    request_head,
    request_target,
)
from extraction.urlsafety import UnsafeURLError, check_public_url, port_of

# The most of an answer's body read; a longer one is not read to its end (its connection is
# dropped). Far more than any excerpt, far less than a receiver could send.
ANSWER_BYTES = 64 * 1024


class ConnectError(OSError):
    """No connection was made; its `__cause__` says why."""


class ConnectTimeout(ConnectError):
    """The receiver did not accept a connection, or finish the TLS handshake, in time."""


class Answer(NamedTuple):
    status: int
    body: bytes  # at most `ANSWER_BYTES` of it


class Target(NamedTuple):
    """Where a checked URL's POSTs go."""

    scheme: str
    host: str  # the name: SNI and the certificate check
    port: int
    address: str | None  # what to connect to; None: the name (a host the settings allow)
    path: str  # with the query, percent-encoded
    netloc: str  # the Host header, in ASCII (IDNA)

    @property
    def connects_to(self) -> tuple:
        """What a kept-alive connection serves: the same for every path of a receiver."""
        return self.scheme, self.host, self.port, self.address


def checked_target(url: str) -> Target:
    """Where `url`'s POSTs go, once the guard approved it (else `UnsafeURLError`)."""
    addresses = check_public_url(url)
    parts = urlsplit(url)
    if NOT_IN_A_HEADER.search(parts.netloc):  # an IPv6 zone may hold anything
        raise UnsafeURLError("The URL's host holds a control character.")
    return Target(
        parts.scheme,
        parts.hostname,
        port_of(parts),
        addresses[0] if addresses else None,
        request_target(parts),
        _ascii(parts.netloc),
    )


def _ascii(netloc: str) -> str:
    """A Host header's value (`http1.host_header`); one that cannot be written is unsafe."""
    try:
        return host_header(netloc)
    except UnicodeError:
        raise UnsafeURLError("The host name cannot be written in ASCII.") from None


@functools.cache
def tls_context() -> ssl.SSLContext:
    """Certificates checked against certifi's authorities and the receiver's name."""
    return ssl.create_default_context(cafile=certifi.where())


class _Connection:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.sock: socket.socket | None = None

    def open(self, timeout: float) -> None:
        target = self.target
        try:
            sock = socket.create_connection((target.address or target.host, target.port), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except TimeoutError as slow:
            raise ConnectTimeout() from slow
        except OSError as failure:
            raise ConnectError() from failure
        try:
            if target.scheme == "https":
                sock = tls_context().wrap_socket(sock, server_hostname=target.host)
        except TimeoutError as slow:
            sock.close()
            raise ConnectTimeout() from slow
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class _Idle:
    """Kept-alive connections waiting for their next POST, by receiver (`Target.connects_to`),
    so that many POSTs to one receiver reuse theirs. Bounded, since each holds a socket (and
    the receiver's resources): at most `WEBHOOK_CONCURRENCY` a receiver (no round uses more),
    `WEBHOOK_IDLE_CONNECTIONS` in all (the longest idle closed first), none idle longer than
    `WEBHOOK_IDLE_SECONDS` (`close_expired`, which the lane calls after each round, and every
    take or keep)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_receiver: dict[tuple, list[_Connection]] = {}
        # Every idle connection, the longest idle first, with when it became idle.
        self.since: OrderedDict[_Connection, float] = OrderedDict()

    def take(self, target: Target) -> _Connection:
        key = target.connects_to
        with self.lock:
            closing = self._expired()
            idle, found = self.by_receiver.get(key, []), None
            while idle and found is None:
                connection = idle.pop()
                del self.since[connection]
                if _closed_by_peer(connection.sock):
                    closing.append(connection)
                else:
                    found = connection
            if not idle:
                self.by_receiver.pop(key, None)
        _close(closing)
        return found or _Connection(target)

    def keep(self, target: Target, connection: _Connection) -> None:
        with self.lock:
            closing = self._expired()
            idle = self.by_receiver.setdefault(target.connects_to, [])
            idle.append(connection)
            self.since[connection] = time.monotonic()
            if len(idle) > settings.WEBHOOK_CONCURRENCY:
                closing.append(self._drop(idle[0]))
            while len(self.since) > settings.WEBHOOK_IDLE_CONNECTIONS:
                closing.append(self._drop(next(iter(self.since))))
        _close(closing)

    def close_expired(self) -> None:
        with self.lock:
            closing = self._expired()
        _close(closing)

    def _expired(self) -> list[_Connection]:
        too_old = time.monotonic() - settings.WEBHOOK_IDLE_SECONDS
        expired = []
        while self.since and next(iter(self.since.values())) <= too_old:
            expired.append(self._drop(next(iter(self.since))))
        return expired

    def _drop(self, connection: _Connection) -> _Connection:
        del self.since[connection]
        idle = self.by_receiver[connection.target.connects_to]
        idle.remove(connection)
        if not idle:
            del self.by_receiver[connection.target.connects_to]
        return connection


def _close(connections: list[_Connection]) -> None:
    # Outside the lock: a TLS connection's close may write its alert.
    for connection in connections:
        connection.close()


_idle = _Idle()


def close_expired() -> None:
    """Close the connections idle longer than `WEBHOOK_IDLE_SECONDS`."""
    _idle.close_expired()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: its end (or bytes no request asked
    for), so it is not reused."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _request(target: Target, body: bytes, headers: dict[str, str]) -> bytes:
    fields = {
        "Host": target.netloc,
        "Accept-Encoding": "identity",  # an excerpt is read as text
        **headers,
        "Content-Length": str(len(body)),
    }
    return request_head("POST", target.path, fields) + body


def _answer(sock: socket.socket, deadline: float) -> tuple[Answer, bool]:
    """The answer read from `sock` by `deadline`, and whether its connection may be reused (the
    answer read to its end, and kept alive). Once its status is in, the receiver has answered:
    a body that fails or does not end in time leaves the answer as it came."""
    reading = Reading(ANSWER_BYTES)
    try:
        read_answer(sock, reading, deadline)
    except (OSError, BadAnswer):
        if reading.status is None:
            raise
        return Answer(reading.status, bytes(reading.body)), False
    reusable = reading.complete and reading.keep_alive and not reading.more
    return Answer(reading.status, bytes(reading.body)), reusable


def post(
    target: Target,
    *,
    body: bytes,
    headers: dict[str, str],
    timeout: tuple[float, float],
    deadline: float | None = None,
) -> Answer:
    """POST to a checked target: the answer, read within the second timeout (the first is the
    connection's), and all of it by `deadline` (a `time.monotonic()` time) if one is given.
    Failures raise `ConnectError`, `OSError` (timeouts, TLS and `Disconnected` included) or
    `BadAnswer`."""
    connect_timeout, read_timeout = timeout
    if deadline is not None:
        connect_timeout = min(connect_timeout, deadline - time.monotonic())
    connection = _idle.take(target)
    try:
        if connection.sock is None:
            connection.open(max(connect_timeout, 0.001))
        read_deadline = time.monotonic() + read_timeout
        deadline = read_deadline if deadline is None else min(deadline, read_deadline)
        connection.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        connection.sock.sendall(_request(target, body, headers))
        answer, reusable = _answer(connection.sock, deadline)
    except BaseException:
        connection.close()
        raise
    if reusable:
        _idle.keep(target, connection)
    else:
        connection.close()
    return answer
