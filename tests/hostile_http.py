"""A server that answers with whatever bytes a test gives it: malformed HTTP, answers cut short
or running past their length, connections kept, closed, reset or held without a word. For the
property tests that feed an extractor's or a receiver's worst answers to the engine and the
delivery lane (pytest-httpserver answers only well-formed HTTP)."""

import socket
import socketserver
import struct
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

THEN = ("keep", "close", "reset", "hang", "drop-next")


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # as sent: percent-encoded, with its query
    headers: dict[str, str]  # names in lower case
    body: bytes = field(repr=False)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0].split("#", 1)[0]


@dataclass(frozen=True)
class Canned:
    """One answer: `raw` written as it is, then the connection kept alive ("keep"), closed
    ("close"), reset ("reset": RST, no FIN), held open without another byte until the server's
    `hang_seconds` have passed ("hang"), or closed when the next request on it comes, without
    an answer ("drop-next": what a server's idle timeout does to a client that is a moment
    late)."""

    raw: bytes
    then: str = "keep"

    def __repr__(self) -> str:  # shrunk examples read better without 300 KB bodies
        raw = (
            self.raw if len(self.raw) <= 300 else self.raw[:300] + b"...(%d bytes)" % len(self.raw)
        )
        return f"Canned({raw!r}, then={self.then!r})"


def http_answer(
    status: int | bytes,
    body: bytes = b"",
    headers: Iterable[tuple[bytes, bytes]] = (),
    *,
    version: bytes = b"HTTP/1.1",
    reason: bytes = b"Whatever",
    framing: str = "length",
) -> bytes:
    """An HTTP answer's bytes. `framing` says how its body is delimited: "length" (a true
    Content-Length), "none" (no length: the body runs to the connection's end), "short" and
    "long" (a length one byte less or more than the body), "double" (two different lengths),
    "chunked" (valid chunks), "bad-chunks" (announced chunked, sent as is)."""
    status = status if isinstance(status, bytes) else str(status).encode()
    head = [version + b" " + status + b" " + reason]
    head += [name + b": " + value for name, value in headers]
    if framing == "length":
        head.append(b"Content-Length: %d" % len(body))
    elif framing == "short":
        head.append(b"Content-Length: %d" % max(len(body) - 1, 0))
    elif framing == "long":
        head.append(b"Content-Length: %d" % (len(body) + 1))
    elif framing == "double":
        head += [b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 7)]
    elif framing in ("chunked", "bad-chunks"):
        head.append(b"Transfer-Encoding: chunked")
        if framing == "chunked":
            body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class CannedServer(socketserver.ThreadingTCPServer):
    """Serves HTTP/1.1 requests on loopback, kept alive, each answered by `route(request)`.
    `requests` keeps every request it read, in order."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, route: Callable[[Request], Canned], *, hang_seconds: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.route, self.hang_seconds = route, hang_seconds
        self.requests: list[Request] = []
        self.errors: list[str] = []  # tracebacks of `route`
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        # A short poll: `shutdown` waits for it, once per test or example.
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __exit__(self, *exc_info) -> None:
        self.stopping.set()
        self.shutdown()
        super().__exit__(*exc_info)

    def handle_error(self, request, client_address) -> None:
        pass  # a client that went away mid-answer is what these tests are about


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: CannedServer = self.server
        while request := self._request():
            with server.lock:
                server.requests.append(request)
            try:
                canned = server.route(request)
            except Exception:  # the test's own fault: kept for it to see
                server.errors.append(traceback.format_exc())
                return
            try:
                self.wfile.write(canned.raw)
                self.wfile.flush()
            except OSError:
                return
            if canned.then == "keep":
                continue
            if canned.then == "reset":  # closed at once, so that no FIN goes first
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
            elif canned.then == "hang":
                server.stopping.wait(server.hang_seconds)
            elif canned.then == "drop-next" and (dropped := self._request()):
                with server.lock:
                    server.requests.append(dropped)
            return

    def _request(self) -> Request | None:
        try:
            line = self.rfile.readline(65536)
            if not line.strip():
                return None
            headers = {}
            while (header := self.rfile.readline(65536)) not in (b"\r\n", b"\n", b""):
                name, _, value = header.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            length = headers.get("content-length", "0")
            body = self.rfile.read(int(length)) if length.isdigit() else b""
        except OSError:
            return None
        method, _, rest = line.decode("latin-1").partition(" ")
        return Request(method, rest.rsplit(" ", 1)[0], headers, body)
