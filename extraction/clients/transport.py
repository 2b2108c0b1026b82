"""An extractor's HTTP calls, made on urllib3's connection pools as requests would route them.

requests' `Session` prepares every call (merging the session's headers, hooks, cookies, proxy
and TLS settings, re-reading the environment) and wraps urllib3's answer in its own: that cost
the workers twice urllib3's own CPU for each of the three small calls a job makes
(docs/performance.md). An extractor's calls need none of it. So requests only decides, once per
scheme and host, where a call goes: its reading of the environment (the proxy variables with
NO_PROXY, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE) and its adapter's choice of pool (direct, an
HTTP proxy or a SOCKS one, with its TLS settings). Each call then goes straight to that pool.

Not reading ~/.netrc, as requests would, keeps a .netrc entry for the host from replacing the
credentials our headers carry. Redirects are never followed and urllib3 never retries: retries
are the engine's (job counters and due_at)."""

import contextlib
import threading
from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass
from importlib.metadata import version
from typing import Protocol
from urllib.parse import urlsplit

import requests
import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, TimeoutError

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
    """The call failed on the way: refused, reset, a TLS or proxy failure. Its message names the
    kind of failure only."""


@dataclass(frozen=True)
class Route:
    """Where calls to one scheme and host go: the pool, and whether the request line carries the
    whole URL (through an HTTP proxy, for plain HTTP) or only its path."""

    pool: urllib3.HTTPConnectionPool
    absolute: bool


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
        return Route(pool, absolute=adapter.request_url(prepared, proxies) != prepared.path_url)

    def send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: Body = None,
        timeout: tuple[float, float],
    ) -> urllib3.BaseHTTPResponse:
        """Send one call; the answer's body is left to read (`preload_content=False`) and its
        connection goes back to the pool once it is read or closed."""
        try:
            route = self.route(url)
            parts = urlsplit(url)
            target = url if route.absolute else (parts.path or "/") + _query(parts.query)
            all_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING, **headers}
            if body is not None and not isinstance(body, bytes):
                all_headers["Content-Length"] = str(len(body))
            return route.pool.urlopen(
                method,
                target,
                body=body,
                headers=all_headers,
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
                retries=False,
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            )
        except NewConnectionError as error:  # (urllib3 makes it a kind of connect timeout)
            raise TransportError(type(error).__name__) from None
        except TimeoutError:
            raise TransportTimeout() from None
        except (HTTPError, OSError, ValueError, requests.RequestException) as error:
            raise TransportError(type(error).__name__) from None


def _origin(url: str) -> tuple[str, str]:
    """What requests' routing depends on in a URL: its scheme (the proxy variable it names) and
    its host and port (matched against NO_PROXY)."""
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _query(query: str) -> str:
    return f"?{query}" if query else ""


def body_chunks(raw: urllib3.BaseHTTPResponse) -> Iterable[bytes]:
    """The answer's body, decoded (gzip, deflate), a chunk at a time; the caller bounds it.
    Raises `TransportTimeout` or `TransportError` if it stops coming."""
    try:
        yield from raw.stream(65536, decode_content=True)
    except TimeoutError:
        raise TransportTimeout() from None
    except (HTTPError, OSError) as error:
        raise TransportError(type(error).__name__) from None
