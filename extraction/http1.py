"""HTTP/1.1 on a socket: a request's head written in one piece, its answer read with httptools
(llhttp, Node.js's HTTP parser). For the extractor calls (`extraction.clients.transport`) and
the webhook POSTs (`jobtracking.webhooks.transport`): `http.client` writes a head one header at
a time and parses an answer's headers through the `email` package, several times the CPU of the
socket calls themselves (docs/performance.md).

The parser handles lengths, chunks, interim (1xx) answers and bodies that end with the
connection; what is read of a body is bounded, and so is a head."""

import re
import socket
import time
from urllib.parse import SplitResult, quote, urlunsplit

import httptools

# A status line and headers longer than this are not an answer.
HEAD_BYTES = 64 * 1024
# What a path and query may hold as they are (`requests` quotes the same way); the rest, spaces,
# control and non-ASCII characters included, is percent-encoded.
_PATH_SAFE = "!#$%&'()*+,/:;=?@[]~"
# What would end a request's line early: line breaks, and NUL.
NOT_IN_A_HEADER = re.compile(r"[\r\n\0]")


def request_target(parts: SplitResult) -> str:
    """A URL's path and query as a request line carries them, percent-encoded."""
    return quote(urlunsplit(("", "", parts.path or "/", parts.query, "")), safe=_PATH_SAFE)


def host_header(netloc: str) -> str:
    """A Host header's value: an international name in its IDNA form (else `UnicodeError`)."""
    return netloc if netloc.isascii() else netloc.encode("idna").decode("ascii")


def request_head(method: str, target: str, fields: dict[str, str]) -> bytes:
    """A request's line and headers; a header with a line break is refused (`ValueError`)."""
    if any(NOT_IN_A_HEADER.search(f"{name}{value}") for name, value in fields.items()):
        raise ValueError("A header holds a line break.")
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"{method} {target} HTTP/1.1\r\n{head}\r\n".encode("latin-1")


class Disconnected(ConnectionResetError):
    """The peer closed the connection before its answer's headers."""


class BadAnswer(Exception):
    """The answer is not HTTP/1.x (or asks to switch protocols)."""


class _PastTheAnswer(Exception):
    """Bytes after the answer: the parser stops there, keeping the answer as it was."""


class Reading:
    """httptools' callbacks for one answer: its status, its headers if `headers`, and its body
    up to `limit` bytes (then `truncated`, and no more is read). Interim answers (1xx) are
    skipped; an answer that is not HTTP/1.x is a `BadAnswer`. `more`: bytes came after it, so
    its connection must not serve another request."""

    def __init__(self, limit: int, *, headers: bool = False) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.limit = limit
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] | None = [] if headers else None
        self.body = bytearray()
        self.complete = self.truncated = self.more = self.keep_alive = False

    def on_message_begin(self) -> None:
        if self.complete:  # no request asked for another
            self.more = True
            raise _PastTheAnswer()
        if self.headers is not None:
            self.headers = []  # an interim answer's are not the answer's

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.headers is not None:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 100 or self.parser.get_http_version() not in ("1.0", "1.1"):
            raise BadAnswer()
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()  # the parser forgets it once done

    def on_body(self, chunk: bytes) -> None:
        room = self.limit - len(self.body)
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


def read_answer(sock: socket.socket, reading: Reading, deadline: float | None = None) -> None:
    """Feed `reading` from `sock` until its answer is complete or its body past its limit. Each
    read waits as long as the socket's timeout allows, and no later than `deadline` (a
    `time.monotonic()` time) if one is given. Raises `TimeoutError` (or `socket.timeout`),
    `Disconnected` and `OSError`s, and `BadAnswer`; returns early, the answer not `complete`,
    when the connection ends within its body (the end of a body that runs to the connection's
    end, or one cut short)."""
    received = 0
    while not (reading.complete or reading.truncated):
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError()
            sock.settimeout(remaining)
        data = sock.recv(65536)
        if not data:
            if reading.status is None:
                raise Disconnected()
            return
        received += len(data)
        if reading.status is None and received > HEAD_BYTES:
            raise BadAnswer()
        reading.feed(data)
        if received > HEAD_BYTES + reading.limit:
            return  # chunk extensions or trailers without end: neither head nor body
