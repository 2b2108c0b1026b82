"""An extractor's HTTP calls, made on urllib3's connection pools as requests would route them.

requests' `Session` prepares every call (merging the session's headers, hooks, cookies, proxy
and TLS settings, re-reading the environment) and wraps urllib3's answer in its own: that cost
the workers twice urllib3's own CPU for each of the three small calls a job makes
(docs/performance.md). An extractor's calls need none of it. So requests only decides, once per
scheme and host, where a call goes: its reading of the environment (the proxy variables with
NO_PROXY, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE) and its adapter's choice of pool (direct, an
HTTP proxy or a SOCKS one, with its TLS settings). Each call then takes a connection of that
pool, connected by urllib3 (a proxy's tunnel, TLS), and writes its request and reads its answer
itself (`extraction.http1`): urllib3 and `http.client` spent more than twice the CPU of the rest
of a call on that (the headers written one at a time, the answer's parsed through the `email`
package).

Not reading ~/.netrc, as requests would, keeps a .netrc entry for the host from replacing the
credentials our headers carry. Redirects are never followed and nothing is retried: retries are
the engine's (job counters and due_at)."""

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass
from importlib.metadata import version
from typing import Protocol
from urllib.parse import urlsplit

import requests
import urllib3
from urllib3 import HTTPHeaderDict
from urllib3.exceptions import HTTPError, NewConnectionError, ProxyError
from urllib3.response import ContentDecoder, DeflateDecoder, GzipDecoder, MultiDecoder
from urllib3.util.proxy import connection_requires_http_tunnel

from extraction.http1 import (
    BadAnswer,
    Reading,
    host_header,
    read_answer,
    request_head,
    request_target,
)

USER_AGENT = f"fluxx-extraction-jobs/{version('extraction-job-tracking')}"
# The answers' encodings urllib3 decodes (`HTTPResponse.stream(decode_content=True)`).
ACCEPT_ENCODING = "gzip, deflate"
# The schemes and hosts one extractor's calls go to: its base URL, and those of poll locations
# stored under an earlier one.
MAX_ROUTES = 16


class SizedBody(Sized, Iterable[bytes], Protocol):
    """A body sent a chunk at a time whose length is known up front (it goes with a
    Content-Length, never chunked)."""


Body = bytes | SizedBody | None


class TransportTimeout(Exception):
    """The extractor did not connect or answer within its timeouts."""


class TransportError(Exception):
    """The call failed on the way: refused, reset, a TLS or proxy failure, no answer. Its message
    names the kind of failure only."""


class Interrupted(Exception):
    """The answer's status came, then its body failed: cut short, undecodable, or too slow
    ("TimeoutError"). Its message names the kind of failure only."""


class AnswerTooLarge(Exception):
    """The answer's body is longer than the caller's limit; `declared`: the length its headers
    announced, when they did."""

    def __init__(self, status: int, declared: int | None) -> None:
        super().__init__(status, declared)
        self.status, self.declared = status, declared


@dataclass(frozen=True)
class Answer:
    status: int
    headers: HTTPHeaderDict
    body: bytes  # decoded


@dataclass(frozen=True)
class Route:
    """Where calls to one scheme and host go: the pool, whether the request line carries the
    whole URL (through an HTTP proxy, for plain HTTP) or only its path, and whether a connection
    is a tunnel through a proxy (CONNECT, for HTTPS)."""

    pool: urllib3.HTTPConnectionPool
    absolute: bool
    tunnel: bool


class Transport:
    """The pools for one extractor's calls. Thread-safe: a batch calls from several threads."""

    def __init__(self, base_url: str, pool_size: int) -> None:
        self._adapter = requests.adapters.HTTPAdapter(
            pool_connections=MAX_ROUTES, pool_maxsize=pool_size, max_retries=0
        )
        self._settings: dict[tuple[str, str], Mapping] = {}
        self._routes: dict[tuple[str, str], Route] = {}
        self._lock = threading.Lock()
        # The environment is read now, not on the first call. An unreadable base URL or a
        # missing CA bundle: each call fails, as it would have.
        with contextlib.suppress(ValueError, OSError, requests.RequestException):
            self.route(base_url)

    def settings(self, url: str) -> Mapping:
        """requests' reading of the environment for `url`'s scheme and host (`proxies`,
        `verify`), as a session trusting the environment would read it: once for each."""
        key = _origin(url)
        settings = self._settings.get(key)
        if settings is None:
            settings = requests.Session().merge_environment_settings(url, {}, None, None, None)
            self._settings[key] = settings
        return settings

    def route(self, url: str) -> Route:
        """The route for `url`'s scheme and host, settled on its first call."""
        key = _origin(url)
        route = self._routes.get(key)
        if route is None:
            with self._lock:
                if len(self._routes) >= MAX_ROUTES:
                    # Beyond this, the adapter's pool manager would close the oldest pools.
                    self._routes.clear()
                    self._settings.clear()
                route = self._routes.get(key) or self._settle(url)
                self._routes[key] = route
        return route

    def _settle(self, url: str) -> Route:
        settings = self.settings(url)
        prepared = requests.Request("GET", url).prepare()
        adapter, verify, proxies = self._adapter, settings["verify"], settings["proxies"]
        pool = adapter.get_connection_with_tls_context(prepared, verify, proxies=proxies)
        adapter.cert_verify(pool, prepared.url, verify, None)  # a missing CA bundle: OSError
        return Route(
            pool,
            absolute=adapter.request_url(prepared, proxies) != prepared.path_url,
            tunnel=connection_requires_http_tunnel(
                pool.proxy, pool.proxy_config, urlsplit(url).scheme
            ),
        )

    def send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: Body = None,
        timeout: tuple[float, float],
        limit: int,
    ) -> Answer:
        """Send one call and read its answer, its body decoded (gzip, deflate) and at most `limit`
        bytes long (else `AnswerTooLarge`). The request is written and the answer read on the
        pool's connection (`extraction.http1`); urllib3 makes the connection (through the
        route's proxy, with its TLS settings) and keeps it. A connection goes back to the pool
        only once its answer has been read to its end and nothing came after it."""
        connect_timeout, read_timeout = timeout
        try:
            route = self.route(url)
            parts = urlsplit(url)
            fields = {
                "Host": host_header(parts.netloc.rpartition("@")[2]),
                "User-Agent": USER_AGENT,
                "Accept-Encoding": ACCEPT_ENCODING,
                **headers,
            }
            if not route.tunnel:  # (a forwarding proxy's; none without a proxy)
                fields.update(route.pool.proxy_headers)
            if body is not None or method in _METHODS_EXPECTING_BODY:
                fields["Content-Length"] = str(len(body or b""))
            target = url if route.absolute else request_target(parts)
            head = request_head(method, target, fields)
            conn = _connected(route.pool, route.tunnel, connect_timeout)
        except NewConnectionError as error:  # (urllib3 makes it a kind of connect timeout)
            raise TransportError(type(error).__name__) from None
        except (TimeoutError, urllib3.exceptions.TimeoutError):
            raise TransportTimeout() from None
        except ssl.SSLError:
            raise TransportError("SSLError") from None
        except (HTTPError, OSError, ValueError, requests.RequestException) as error:
            raise TransportError(type(error).__name__) from None
        reading, reusable = _Reading(limit), False
        try:
            _write(conn.sock, head, body)
            conn.sock.settimeout(read_timeout)
            read_answer(conn.sock, reading)
            answer = reading.answer()
            reusable = reading.complete and reading.keep_alive and not reading.more
            return answer
        except TimeoutError:
            if reading.status is None:
                raise TransportTimeout() from None
            raise Interrupted("TimeoutError") from None
        except (OSError, BadAnswer):
            # (urllib3's word for an answer cut short, or for none at all)
            kind = "DecodeError" if reading.undecodable else "ProtocolError"
            if reading.status is None:
                raise TransportError(kind) from None
            raise Interrupted(kind) from None
        finally:
            if not reusable:
                conn.close()
            # (None, as `urlopen` puts after a failure: the pool's next call makes a new one.)
            route.pool._put_conn(conn if reusable else None)


# Methods whose request carries a length even without a body (as `http.client` sends them).
_METHODS_EXPECTING_BODY = frozenset({"PATCH", "POST", "PUT"})


def _connected(
    pool: urllib3.HTTPConnectionPool, tunnel: bool, connect_timeout: float
) -> urllib3.connection.HTTPConnection:
    """A connection of the pool: a kept-alive one still open, or a new one, connected as the
    pool's `urlopen` connects it (a proxy's tunnel first where one is needed; a failure to
    reach the proxy is a `ProxyError`). Taken with the pool's own methods, since `urlopen`
    would also write the request and read the answer."""
    conn = pool._get_conn()
    if conn.is_closed:
        conn.timeout = connect_timeout
        try:
            if tunnel:
                pool._prepare_proxy(conn)  # CONNECT, then TLS inside the tunnel
            else:
                conn.connect()
        except (OSError, HTTPError) as error:
            to_proxy = conn.proxy is not None and not conn.has_connected_to_proxy
            conn.close()
            pool._put_conn(None)
            if to_proxy:
                raise ProxyError("Unable to connect to proxy", error) from error
            raise
    conn.sock.settimeout(connect_timeout)
    return conn


def _write(sock: socket.socket, head: bytes, body: Body) -> None:
    """The request, the head and a small body in one send. A peer that stops reading (and
    closes) may already have answered: its answer is read all the same."""
    try:
        if body is None or (isinstance(body, bytes) and len(body) <= 65536):
            sock.sendall(head + (body or b""))
            return
        sock.sendall(head)
        for chunk in [body] if isinstance(body, bytes) else body:
            sock.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass


class _Reading(Reading):
    """An extractor's answer: its headers kept, its body decoded as it comes (so that the
    limit bounds what it decodes to)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit, headers=True)
        self.decoder: ContentDecoder | None = None
        self.undecodable = False
        self.declared: int | None = None
        self.framed = True  # by a length or chunks, not by the connection's end

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        names = {name.lower(): value for name, value in self.headers}
        declared = names.get(b"content-length", b"")
        if self.status >= 200 and declared.isdigit() and int(declared) > self.limit:
            self.declared, self.truncated = int(declared), True  # not read
        encoding = names.get(b"content-encoding", b"").decode("latin-1").strip().lower()
        self.decoder = _decoder(encoding)
        self.framed = b"content-length" in names or b"transfer-encoding" in names

    def on_body(self, chunk: bytes) -> None:
        if self.decoder is not None:
            try:
                chunk = self.decoder.decompress(chunk, max_length=self.limit - len(self.body) + 1)
            except urllib3.response.HTTPResponse.DECODER_ERROR_CLASSES:
                self.undecodable = True
                raise
        super().on_body(chunk)

    def answer(self) -> Answer:
        if self.truncated:
            raise AnswerTooLarge(self.status, self.declared)
        if not self.complete and self.framed:
            raise BadAnswer()  # its body cut short
        if self.decoder is not None:
            try:
                rest = self.decoder.decompress(b"") + self.decoder.flush()
            except urllib3.response.HTTPResponse.DECODER_ERROR_CLASSES:
                self.undecodable = True
                raise BadAnswer() from None
            super().on_body(rest)
            if self.truncated:
                raise AnswerTooLarge(self.status, None)
        headers = HTTPHeaderDict()
        for name, value in self.headers:
            headers.add(name.decode("latin-1"), value.decode("latin-1"))
        return Answer(self.status, headers, bytes(self.body))


def _decoder(encoding: str) -> ContentDecoder | None:
    """urllib3's decoder for a Content-Encoding it decodes, as its answers choose it."""
    if encoding in ("gzip", "x-gzip"):
        return GzipDecoder()
    if encoding == "deflate":
        return DeflateDecoder()
    if "," in encoding and any(e.strip() in _DECODED for e in encoding.split(",")):
        return MultiDecoder(encoding)
    return None


_DECODED = ("gzip", "x-gzip", "deflate")


def _origin(url: str) -> tuple[str, str]:
    """What requests' routing depends on in a URL: its scheme (the proxy variable it names) and
    its host and port (matched against NO_PROXY)."""
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()
