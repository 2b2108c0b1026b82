"""The service's own fetch of a job's source URL, for an extractor that does not report the
document it extracted (Azure): the bytes are hashed as they arrive and then sent to the
extractor, so what was hashed is what was extracted.

Through the SSRF guard (`urlsafety.check_public_url`): the name is resolved once and the
connection goes to the address it approved, whatever the name resolves to by then (DNS
rebinding). No redirect is followed. At most `max_bytes` are read: a larger declared length is
refused before the body, a longer body as soon as it passes the limit. No read waits longer than
`timeout`, and none starts after it, so a source that trickles ends within twice `timeout`. The
body goes through SHA-256 into a spooled temporary file: memory holds a chunk, the disk the rest.
"""

import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import urlsplit

import requests
import urllib3

from extraction.clients.base import (
    MEDIA_TYPE,
    DocumentFacts,
    bare_media_type,
    is_transient_status,
)
from extraction.errors import ErrorCode, SourceError
from extraction.urlsafety import PinnedAdapter, UnsafeURLError, check_public_url

CHUNK_BYTES = 64 * 1024
# Past this a fetched document moves from memory to a temporary file.
SPOOL_BYTES = 1 << 20
CONNECT_TIMEOUT = 5.0
# What HTTP says to assume of a body whose type is not declared (RFC 9110, 8.3).
UNDECLARED_TYPE = "application/octet-stream"


def status_error_code(status: int) -> ErrorCode:
    """What a source's HTTP error (or redirect) means for its job: a timeout, a rate limit or a
    server error may pass (`source_unavailable`); anything else, 404 and 410 first, will answer
    the same again (`source_unusable`)."""
    if is_transient_status(status):
        return ErrorCode.SOURCE_UNAVAILABLE
    return ErrorCode.SOURCE_UNUSABLE


def checked_source(url: str) -> str | None:
    """The address the guard approves for `url` (None: a host the settings allow by name);
    a refusal is the source's `source_unusable`."""
    try:
        addresses = check_public_url(url)
    except UnsafeURLError as unsafe:
        raise SourceError(
            f"The source URL is refused: {unsafe.message}", code=ErrorCode.SOURCE_UNUSABLE
        ) from None
    return addresses[0] if addresses else None


@dataclass
class FetchedSource:
    """A fetched document: `file` at its start (a context manager closes it) and its facts."""

    file: BinaryIO
    facts: DocumentFacts

    def __enter__(self) -> "FetchedSource":
        return self

    def __exit__(self, *exc_info) -> None:
        self.file.close()


def fetch_source(
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    sessions: Callable[[str | None], requests.Session] | None = None,
) -> FetchedSource:
    """The document at `url`, or a `SourceError` saying why not and whether it may pass.
    `sessions` gives a session connecting to an approved address (`pinned_session`'s kind),
    kept by a caller that fetches often (the sandbox); by default one is made and closed."""
    address = checked_source(url)
    session = (sessions or pinned_session)(address)
    try:
        prepared = session.prepare_request(requests.Request("GET", url))
        # The connection goes to the approved address; the Host header keeps the name.
        prepared.headers["Host"] = urlsplit(prepared.url).netloc
        with session.send(
            prepared,
            stream=True,
            allow_redirects=False,
            timeout=(min(CONNECT_TIMEOUT, timeout), timeout),
        ) as answer:
            _check_answer(answer, max_bytes)
            return _spooled(answer, max_bytes, time.monotonic() + timeout)
    # The body is read from urllib3's response, whose faults are urllib3's own.
    except (requests.Timeout, urllib3.exceptions.TimeoutError):
        raise _unavailable("The document's URL did not answer in time.") from None
    except (requests.RequestException, urllib3.exceptions.HTTPError) as error:
        raise _unavailable(
            f"The document's URL could not be read ({type(error).__name__})."
        ) from None
    finally:
        if sessions is None:
            session.close()


def pinned_session(address: str | None) -> requests.Session:
    """A session whose connections go to `address`, the one the URL guard approved (None: a
    host the settings allow by name)."""
    session = requests.Session()
    session.trust_env = False  # a proxy from the environment would connect elsewhere
    if address:
        adapter = PinnedAdapter(address)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


def _unavailable(message: str) -> SourceError:
    return SourceError(message, code=ErrorCode.SOURCE_UNAVAILABLE)


def _check_answer(answer: requests.Response, max_bytes: int) -> None:
    status = answer.status_code
    if answer.is_redirect:
        raise SourceError(
            f"The document's URL redirects (HTTP {status}); redirects are not followed.",
            code=ErrorCode.SOURCE_UNUSABLE,
            http_status=status,
        )
    if status >= 300:
        raise SourceError(
            f"The document's URL answered HTTP {status}.",
            code=status_error_code(status),
            http_status=status,
        )
    declared = answer.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes, status)


def _too_large(max_bytes: int, status: int) -> SourceError:
    return SourceError(
        f"The document is larger than the {max_bytes}-byte limit.",
        code=ErrorCode.SOURCE_UNUSABLE,
        http_status=status,
    )


def _spooled(answer: requests.Response, max_bytes: int, deadline: float) -> FetchedSource:
    """The answer's body, hashed as it is written to a spooled file."""
    # Handed to the caller, whose `with` closes it; closed here only if the fetch fails.
    file = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    digest, size = hashlib.sha256(), 0
    try:
        # `read1` returns after one read from the socket: the deadline is checked between reads.
        while chunk := answer.raw.read1(CHUNK_BYTES, decode_content=True):
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(max_bytes, answer.status_code)
            if time.monotonic() > deadline:
                raise _unavailable("The document's URL did not send it all in time.")
            digest.update(chunk)
            file.write(chunk)
        file.seek(0)
    except BaseException:
        file.close()
        raise
    media = bare_media_type(answer.headers.get("Content-Type", ""))
    facts = DocumentFacts(
        media if MEDIA_TYPE.fullmatch(media) else UNDECLARED_TYPE, size, digest.hexdigest()
    )
    return FetchedSource(file, facts)
