"""POSTs to client-given URLs (webhook receivers), sent to the address the SSRF guard approved
(`urlsafety.check_public_url`) whatever the name resolves to by the time of the call; the Host
header, TLS SNI and the certificate check keep the name.

Written on sockets, with httptools (llhttp, Node.js's HTTP parser) reading the answers: the
delivery lane sends thousands of POSTs a minute, and `http.client` cost each about five times
the CPU of the socket calls themselves, urllib3's pool twice that again (docs/performance.md).
What the lane needs is here: a connect timeout apart from the answer's, connections kept alive
per receiver and dropped once the receiver has closed them or an answer was not read to its
end (and never more of them, or idle for longer, than the settings say: `_Idle`), and no retry,
proxy or redirect.
"""

import functools
import re
import select
import socket
import ssl
import threading
import time
from collections import OrderedDict
from typing import NamedTuple
from urllib.parse import quote, urlsplit, urlunsplit

import certifi
import httptools
from django.conf import settings

from extraction.urlsafety import UnsafeURLError, check_public_url, port_of

# The most of an answer's body read; a longer one is not read to its end (its connection is
# dropped). Far more than any excerpt, far less than a receiver could send.
ANSWER_BYTES = 64 * 1024
# A status line and headers longer than this are not an answer.
HEAD_BYTES = 64 * 1024
# What a path and query may hold as they are (`requests` quotes the same way); the rest, spaces,
# control and non-ASCII characters included, is percent-encoded.
_PATH_SAFE = "!#$%&'()*+,/:;=?@[]~"
# What would end a request's line early: line breaks, and NUL.
_NOT_IN_A_HEADER = re.compile(r"[\r\n\0]")


class ConnectError(OSError):
    """No connection was made; its `__cause__` says why."""


class ConnectTimeout(ConnectError):
    """The receiver did not accept a connection, or finish the TLS handshake, in time."""


class Disconnected(ConnectionResetError):
    """The receiver closed the connection before its answer's headers."""


class BadAnswer(Exception):
    """The receiver's answer is not HTTP/1.x (or asks to switch protocols)."""


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
    if _NOT_IN_A_HEADER.search(parts.netloc):  # an IPv6 zone may hold anything
        raise UnsafeURLError("The URL's host holds a control character.")
    return Target(
        parts.scheme,
        parts.hostname,
        port_of(parts),
        addresses[0] if addresses else None,
        quote(urlunsplit(("", "", parts.path or "/", parts.query, "")), safe=_PATH_SAFE),
        _ascii(parts.netloc),
    )


def _ascii(netloc: str) -> str:
    """A Host header's value: an international name in its IDNA form."""
    if netloc.isascii():
        return netloc
    try:
        return netloc.encode("idna").decode("ascii")
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
    if any(_NOT_IN_A_HEADER.search(f"{name}{value}") for name, value in fields.items()):
        raise ValueError("A header holds a line break.")
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"POST {target.path} HTTP/1.1\r\n{head}\r\n".encode("ascii") + body


class _PastTheAnswer(Exception):
    """Bytes after the answer: the parser stops there, keeping the answer as it was."""


class _Reading:
    """httptools' callbacks for one answer: its status and the start of its body. Interim
    answers (1xx) are skipped; an answer that is not HTTP/1.x is a `BadAnswer`."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status: int | None = None
        self.body = bytearray()
        self.complete = self.truncated = self.more = self.keep_alive = False

    def on_message_begin(self) -> None:
        if self.complete:  # no request asked for another
            self.more = True
            raise _PastTheAnswer()

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 100 or self.parser.get_http_version() not in ("1.0", "1.1"):
            raise BadAnswer()
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()  # the parser forgets it once done

    def on_body(self, chunk: bytes) -> None:
        room = ANSWER_BYTES - len(self.body)
        self.body += chunk[:room]
        self.truncated = self.truncated or len(chunk) > room

    def on_message_complete(self) -> None:
        if self.status is not None and 100 <= self.status < 200:
            self.status = None
        else:
            self.complete = True

    def feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as bad:
            if not self.complete:
                raise BadAnswer() from bad
            self.more = True


def _answer(sock: socket.socket, deadline: float) -> tuple[Answer, bool]:
    """The answer read from `sock` by `deadline`, and whether its connection may be reused (the
    answer read to its end, and kept alive). Once its status is in, the receiver has answered:
    a body that fails or does not end in time leaves the answer as it came."""
    reading = _Reading()
    try:
        _read(sock, deadline, reading)
    except (OSError, BadAnswer):
        if reading.status is None:
            raise
        return Answer(reading.status, bytes(reading.body)), False
    reusable = reading.complete and reading.keep_alive and not reading.more
    return Answer(reading.status, bytes(reading.body)), reusable


def _read(sock: socket.socket, deadline: float, reading: _Reading) -> None:
    received = 0
    while not (reading.complete or reading.truncated):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError()
        sock.settimeout(remaining)
        data = sock.recv(65536)
        if not data:
            if reading.status is None:
                raise Disconnected()
            return  # a body that ends with the connection
        received += len(data)
        if reading.status is None and received > HEAD_BYTES:
            raise BadAnswer()
        reading.feed(data)
        if received > HEAD_BYTES + ANSWER_BYTES:
            return  # chunk extensions or trailers without end: neither head nor body


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
