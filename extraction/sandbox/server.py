"""The bundled sandbox extractor: a threaded HTTP server speaking the http_async protocol.

It really extracts (see `extract.py`) and injects faults on demand: latency, transient 5xx,
429 with Retry-After (at random, or above a rate limit), permanent failures, lost jobs, slow
responses. It honours Idempotency-Key and keeps counters (submissions per key, poll times, polls
that came before the Retry-After it gave, pages analysed, the `traceparent` of the last requests)
at `GET /_sandbox/stats`, so tests can prove what a client did. For the demo it is also a webhook
receiver (`POST`/`GET /_sandbox/webhooks`) and serves its sample documents (`GET
/samples/<name>`) for jobs made from a URL. State lives in memory, bounded: finished jobs are
forgotten after `job_retention` seconds and results kept up to `max_result_bytes`.

Every `/_sandbox/...` route but the webhook receiver's POST needs the `X-Sandbox-Token` header
(see `control_token`): a client of the service can make the sandbox fetch a URL, and the service
post a webhook, but neither can add a header.

An outage makes it answer 503 (a JSON error, no Retry-After) to every `/v1/...` request while
`/_sandbox/...` and `/healthz` keep working: for the first N seconds after start
(`--outage-seconds`), or from now on for `{"seconds": N}` posted to `POST /_sandbox/outage`
(0 ends it). The stats then show `down` and `outage_calls` (total and by kind: submit, poll,
result, cancel); `POST /_sandbox/reset` clears them and ends the outage.

Pages analysed, what usage tests compare the service's totals with: each extraction it creates
adds at once the pages it read of its document (the `page_count` of a success's result, the
`usage.pages` a failure reports; 0 for a document it could not read) to `pages_analysed` and,
when submitted with an Idempotency-Key (the service sends one per job attempt), to
`pages_by_key`; a replayed key adds nothing. A cancelled or lost extraction's pages count too,
though it reports none.
"""

import hashlib
import hmac
import json
import logging
import mimetypes
import os
import random
import re
import threading
import time
import uuid
from collections import Counter, OrderedDict, defaultdict, deque
from dataclasses import asdict, dataclass, field, replace
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from django.utils.crypto import salted_hmac

from extraction.clients.base import bare_media_type
from extraction.errors import SourceError
from extraction.sandbox.extract import (
    CorruptDocumentError,
    DocumentTooLargeError,
    UnsupportedDocumentError,
    extract,
)
from extraction.sources import fetch_source, pinned_session

logger = logging.getLogger(__name__)

JOB_PATH = re.compile(r"^/v1/extractions/([\w-]+)(/result)?$")
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_WEBHOOK_BYTES = 1024 * 1024
MAX_FETCHERS = 32  # kept-alive sessions, one per address documents come from
EARLY_POLL_TOLERANCE = 0.05  # seconds of clock and scheduling slack
# Benchmarks open many connections at once, and each SYN an overflowing backlog drops costs the
# client a 1 s retransmit (Linux caps it at net.core.somaxconn).
LISTEN_BACKLOG = 1024
CONTROL_TOKEN_HEADER = "X-Sandbox-Token"
SAMPLES = Path(__file__).resolve().parent / "samples"
SAMPLES_PATH = "/samples/"


def control_token() -> str:
    """The token the control and inspection routes ask for: SANDBOX_CONTROL_TOKEN (`make run` sets
    a random one), else one derived from the secret key, which the test helpers and benchmarks
    share with the sandbox they start."""
    token = os.environ.get("SANDBOX_CONTROL_TOKEN")
    return token or salted_hmac("extraction.sandbox", "control-token").hexdigest()


def control_headers() -> dict[str, str]:
    return {CONTROL_TOKEN_HEADER: control_token()}


def extracted(content: bytes, file_name: str, content_type: str) -> dict:
    """The result the sandbox serves: what `extract` found, and the job protocol's `document`
    (what was extracted, which a URL job records)."""
    result = extract(content, file_name, content_type)
    result["document"] = {
        "content_type": bare_media_type(content_type),
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    return result


@dataclass
class SandboxConfig:
    """Fault injection and behaviour. Rates are probabilities between 0 and 1."""

    latency_min: float = 0.0
    latency_max: float = 0.0
    transient_rate: float = 0.0
    throttle_rate: float = 0.0
    throttle_retry_after: float = 1.0
    permanent_failure_rate: float = 0.0
    lost_rate: float = 0.0
    slow_rate: float = 0.0
    slow_seconds: float = 5.0
    poll_retry_after: float = 0.0
    # Rate limits (requests a second, 0 for none), as Azure enforces them: submissions, and polls
    # with result fetches, beyond a token bucket of one second's worth get 429 and Retry-After.
    submit_rate_limit: float = 0.0
    poll_rate_limit: float = 0.0
    api_key: str = field(default="", repr=False)
    seed: int | None = None
    # Memory: a job is forgotten `job_retention` seconds after it ends (a poll then answers 404,
    # as for a lost job); results are kept up to `max_result_bytes`, the least recently used
    # dropped first (their jobs are then forgotten too).
    job_retention: float = 600.0
    max_result_bytes: int = 256 << 20


@dataclass
class TokenBucket:
    """`rate` tokens a second, holding at most one second's worth."""

    rate: float
    tokens: float = 0.0
    updated: float = 0.0

    def take(self, now: float) -> float:
        """0 if a token was taken, else the seconds until one is there."""
        if not self.updated:
            self.tokens, self.updated = self.rate, now
        self.tokens = min(self.rate, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


@dataclass
class SandboxJob:
    id: str
    created: float
    duration: float
    result_key: tuple[bytes, str, str] | None  # in SandboxState.results
    error: dict[str, str] | None
    lost: bool = False
    canceled: bool = False
    idempotency_key: str = ""
    # The pages it read before failing (an injected failure comes after a whole extraction):
    # reported as billed (`usage.pages`) when it fails.
    pages_read: int = 0

    def status(self, now: float) -> tuple[str, int]:
        elapsed = now - self.created
        if self.canceled:
            return "canceled", 0
        if elapsed >= self.duration:
            return ("failed", 100) if self.error else ("succeeded", 100)
        if elapsed < 0.2 * self.duration:
            return "queued", 0
        return "running", min(99, int(100 * elapsed / self.duration))


class SandboxState:
    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.random = random.Random(config.seed)
        self.fetchers: OrderedDict[str | None, requests.Session] = OrderedDict()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.jobs: OrderedDict[str, SandboxJob] = OrderedDict()  # oldest first
            # Encoded results by (content digest, file name, content type), least recently used
            # first: benchmarks send the same few files thousands of times, and parsing a PDF
            # costs more than all the rest of a submission.
            self.results: OrderedDict[tuple[bytes, str, str], tuple[bytes, int]] = OrderedDict()
            self.result_bytes = 0
            self.job_by_key: dict[str, str] = {}
            self.posts_by_key: Counter[str] = Counter()
            self.created_by_key: Counter[str] = Counter()
            self.pages_by_key: Counter[str] = Counter()
            self.pages_analysed = 0
            self.polls: defaultdict[str, list[float]] = defaultdict(list)
            self.not_before: dict[str, float] = {}
            self.early_polls: list[dict[str, float | str]] = []
            self.requests: Counter[str] = Counter()
            # The W3C trace context of the last protocol requests that carried one ("POST
            # /v1/extractions 00-…"): tests prove each call went out in its step's trace.
            self.traceparents: deque[str] = deque(maxlen=200)
            self.faults: Counter[str] = Counter()
            self.webhooks: deque[dict[str, Any]] = deque(maxlen=200)
            self.buckets: dict[str, TokenBucket] = {}
            self.down_until = 0.0  # time.monotonic() at which the outage ends
            self.outage_calls: Counter[str] = Counter()

    def outage(self, seconds: float) -> float:
        """Answer every protocol request 503 for `seconds` from now (0 ends an outage at once);
        the seconds it lasts."""
        seconds = max(0.0, seconds)
        with self.lock:
            self.down_until = time.monotonic() + seconds if seconds else 0.0
        return seconds

    def down(self) -> bool:
        return time.monotonic() < self.down_until

    def fetcher(self, address: str | None) -> requests.Session:
        """A kept-alive session to `address`, the one the URL guard approved (None: a host the
        settings allow by name)."""
        with self.lock:
            session = self.fetchers.get(address)
            if session is None:
                session = self.fetchers[address] = pinned_session(address)
                if len(self.fetchers) > MAX_FETCHERS:
                    self.fetchers.popitem(last=False)[1].close()
            self.fetchers.move_to_end(address)
            return session

    def keep_result(self, key: tuple[bytes, str, str], data: bytes, pages: int) -> None:
        """Keep an encoded result and its page count, dropping the least recently used past
        `max_result_bytes`."""
        with self.lock:
            self.result_bytes += len(data) - len(self.results.pop(key, (b"", 0))[0])
            self.results[key] = (data, pages)
            while self.result_bytes > self.config.max_result_bytes:
                self.result_bytes -= len(self.results.popitem(last=False)[1][0])

    def cached_result(self, key: tuple[bytes, str, str]) -> tuple[bytes, int] | None:
        """An encoded result and its page count (kept beside it: not parsed on every hit)."""
        with self.lock:
            kept = self.results.get(key)
            if kept is not None:
                self.results.move_to_end(key)
            return kept

    def job(self, job_id: str) -> SandboxJob | None:
        """The job, unless lost, forgotten, or its result dropped."""
        with self.lock:
            self.forget_ended(time.time())
            job = self.jobs.get(job_id)
            if job is None or job.lost or (job.result_key and job.result_key not in self.results):
                return None
            return job

    def add_job(self, job: SandboxJob, pages: int) -> None:
        """Keep a new job, which analysed `pages` (the caller holds the lock)."""
        self.forget_ended(job.created)
        self.jobs[job.id] = job
        self.pages_analysed += pages
        if job.idempotency_key:
            self.job_by_key[job.idempotency_key] = job.id
            self.created_by_key[job.idempotency_key] += 1
            self.pages_by_key[job.idempotency_key] += pages

    def forget_ended(self, now: float) -> None:
        """Forget the jobs that ended over `job_retention` seconds ago, oldest first, with their
        poll records (the caller holds the lock). The counters per key stay."""
        while self.jobs:
            job = next(iter(self.jobs.values()))
            if now < job.created + job.duration + self.config.job_retention:
                return
            del self.jobs[job.id]
            self.polls.pop(job.id, None)
            self.not_before.pop(job.id, None)
            if self.job_by_key.get(job.idempotency_key) == job.id:
                del self.job_by_key[job.idempotency_key]

    def rate_limited(self, kind: str) -> float:
        """0 if a `kind` request ("submit" or "poll") is within its limit, else the seconds to
        wait (counted as a `rate_limited` fault)."""
        rate = getattr(self.config, f"{kind}_rate_limit")
        if not rate:
            return 0.0
        with self.lock:
            bucket = self.buckets.get(kind)
            if bucket is None or bucket.rate != rate:
                bucket = self.buckets[kind] = TokenBucket(rate)
            wait = bucket.take(time.monotonic())
            if wait:
                self.faults["rate_limited"] += 1
            return wait

    def chance(self, rate: float) -> bool:
        with self.lock:
            return rate > 0 and self.random.random() < rate

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "config": {k: v for k, v in asdict(self.config).items() if k != "api_key"},
                "jobs": len(self.jobs),
                "results": len(self.results),
                "result_bytes": self.result_bytes,
                "posts_by_key": dict(self.posts_by_key),
                "created_by_key": dict(self.created_by_key),
                "duplicate_keys": sorted(k for k, n in self.created_by_key.items() if n > 1),
                "pages_by_key": dict(self.pages_by_key),
                "pages_analysed": self.pages_analysed,
                "polls": {job_id: list(times) for job_id, times in self.polls.items()},
                "early_polls": list(self.early_polls),
                "requests": dict(self.requests),
                "traceparents": list(self.traceparents),
                "faults": dict(self.faults),
                "down": self.down(),
                "outage_calls": self.outage_calls.total(),
                "outage_calls_by_kind": dict(self.outage_calls),
            }


class SandboxHandler(BaseHTTPRequestHandler):
    server: "SandboxServer"
    protocol_version = "HTTP/1.1"
    server_version = "SandboxExtractor/1.0"
    # Send each answer as one segment, at once: unbuffered headers and body in separate small
    # writes meet the client's delayed ACK and cost ~40 ms per request on keep-alive connections.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    @property
    def state(self) -> SandboxState:
        return self.server.state

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    # Responses

    answer_delay = 0.0

    def send_response(self, code: int, message: str | None = None) -> None:
        if self.answer_delay:
            time.sleep(self.answer_delay)
            self.answer_delay = 0.0
        super().send_response(code, message)

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.send_encoded(status, json.dumps(body).encode(), headers)

    def send_encoded(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status: int, code: str, message: str, **headers: str) -> None:
        self.send_json(status, {"error": {"code": code, "message": message}}, headers)

    def send_sample(self, name: str) -> None:
        """A bundled sample document, so that a job can be made from a `source_url` with no
        other server (the README's quick start); `GET /samples/` lists them. Only those files:
        the name is looked up, never joined to a path."""
        samples = {path.name: path for path in SAMPLES.iterdir() if path.is_file()}
        if not name:
            return self.send_json(200, sorted(samples))
        if name not in samples:
            return self.send_error_json(404, "not_found", f"No sample {name!r}.")
        data = samples[name].read_bytes()
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self.send_response(200)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_html(self, status: int, text: str) -> None:
        data = f"<html><body><h1>{status}</h1><p>{text}</p></body></html>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # Routing

    def do_GET(self) -> None:
        if self.path == "/healthz":
            return self.send_json(200, {"ok": True})
        if self.path.startswith(SAMPLES_PATH):
            return self.send_sample(urlsplit(self.path).path.removeprefix(SAMPLES_PATH))
        if self.path.startswith("/_sandbox/"):
            return self.control("GET")
        self.route("GET")

    def do_POST(self) -> None:
        if self.path == "/_sandbox/webhooks":
            # Open: the service's deliveries carry no token. Write-only and bounded.
            return self.receive_webhook()
        if self.path.startswith("/_sandbox/"):
            return self.control("POST")
        self.route("POST")

    def control(self, method: str) -> None:
        """The control and inspection routes, for whoever holds the control token."""
        given = self.headers.get(CONTROL_TOKEN_HEADER, "").encode()
        if not hmac.compare_digest(given, self.server.control_token.encode()):
            self.close_connection = True  # the body, if any, is left unread
            message = f"The /_sandbox/ routes need the {CONTROL_TOKEN_HEADER} header."
            return self.send_error_json(401, "unauthorized", message)
        if (method, self.path) == ("GET", "/_sandbox/stats"):
            return self.send_json(200, self.state.stats())
        if (method, self.path) == ("GET", "/_sandbox/webhooks"):
            with self.state.lock:
                webhooks = list(self.state.webhooks)
            return self.send_json(200, webhooks)
        if (method, self.path) == ("POST", "/_sandbox/reset"):
            self.state.reset()
            return self.send_json(200, {"ok": True})
        if (method, self.path) == ("POST", "/_sandbox/config"):
            return self.configure()
        if (method, self.path) == ("POST", "/_sandbox/outage"):
            return self.start_outage()
        self.close_connection = True
        self.send_error_json(404, "not_found", f"No route for {method} {self.path}.")

    def do_DELETE(self) -> None:
        self.route("DELETE")

    def route(self, method: str) -> None:
        body = self.read_body()
        if body is None:
            return
        traceparent = self.headers.get("traceparent")
        with self.state.lock:
            self.state.requests[method] += 1
            if traceparent:
                self.state.traceparents.append(f"{method} {self.path} {traceparent}")
        match = JOB_PATH.match(self.path)
        kind = self.kind(method, match)
        if self.path.startswith("/v1/") and self.state.down():
            # Down before anything else, as behind a load balancer with no healthy backend.
            with self.state.lock:
                self.state.outage_calls[kind or "other"] += 1
            return self.send_error_json(503, "unavailable", "The extractor is down (outage).")
        if not self.authorized():
            return self.send_error_json(401, "unauthorized", "Missing or wrong bearer token.")
        if self.over_rate_limit(method, match):
            return
        if self.injected_fault():
            return
        if kind == "submit":
            return self.create(body)
        if kind == "result":
            return self.result(match.group(1))
        if kind == "poll":
            return self.poll(match.group(1))
        if kind == "cancel":
            return self.cancel(match.group(1))
        self.send_error_json(404, "not_found", f"No route for {method} {self.path}.")

    def kind(self, method: str, match: re.Match | None) -> str | None:
        """Which protocol request this is: submit, poll, result or cancel (None: no route)."""
        if method == "POST" and self.path == "/v1/extractions":
            return "submit"
        if match and method == "GET":
            return "result" if match.group(2) else "poll"
        if match and method == "DELETE" and not match.group(2):
            return "cancel"
        return None

    def configure(self) -> None:
        """Change fault settings at run time (tests reuse one sandbox process)."""
        try:
            changes = json.loads(self.read_body() or b"{}")
            config = replace(self.state.config, **changes)
        except (TypeError, ValueError) as error:
            return self.send_error_json(400, "bad_config", str(error))
        self.state.config = config
        self.send_json(200, {"ok": True})

    def start_outage(self) -> None:
        """Go down for `{"seconds": N}` from now; 0 ends an outage."""
        try:
            seconds = json.loads(self.read_body() or b"{}").get("seconds")
        except (AttributeError, ValueError):
            seconds = None
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            return self.send_error_json(400, "bad_outage", 'Give {"seconds": N}, N >= 0.')
        self.send_json(200, {"down_for": self.state.outage(seconds)})

    def receive_webhook(self) -> None:
        """A demo webhook receiver: keeps the last deliveries it got (their Standard Webhooks
        headers, the W3C trace context they joined, and the body)."""
        body = self.read_body(MAX_WEBHOOK_BYTES)
        if body is None:
            return
        entry = {
            "headers": {
                k: v
                for k, v in self.headers.items()
                if k.lower().startswith("webhook-") or k.lower() == "traceparent"
            },
            "body": body.decode("utf-8", "replace"),
        }
        with self.state.lock:
            self.state.webhooks.append(entry)
        self.send_json(200, {"received": True})

    def read_body(self, limit: int = MAX_UPLOAD_BYTES) -> bytes | None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > limit:
            self.close_connection = True
            self.send_error_json(413, "too_large", "The body is too large.")
            return None
        return self.rfile.read(length) if length else b""

    def authorized(self) -> bool:
        key = self.state.config.api_key
        return not key or self.headers.get("Authorization", "") == f"Bearer {key}"

    def over_rate_limit(self, method: str, match: re.Match | None) -> bool:
        kind = "submit" if method == "POST" else "poll" if method == "GET" and match else None
        wait = self.state.rate_limited(kind) if kind else 0.0
        if wait:
            self.send_error_json(
                429,
                "too_many_requests",
                f"Rate limit of {getattr(self.state.config, f'{kind}_rate_limit'):g}/s exceeded.",
                **{"Retry-After": f"{max(wait, 0.01):.2f}"},
            )
        return bool(wait)

    def injected_fault(self) -> bool:
        """Slow, throttled or failing answers, chosen at random per request."""
        config = self.state.config
        if self.state.chance(config.slow_rate):
            # The work is done at once and only the answer is late, as when a reply is lost in
            # transit: a client that gives up has still caused a submission.
            self.count_fault("slow")
            self.answer_delay = config.slow_seconds
        if self.state.chance(config.throttle_rate):
            self.count_fault("throttled")
            self.send_error_json(
                429,
                "too_many_requests",
                "Rate limit exceeded.",
                **{"Retry-After": f"{config.throttle_retry_after:g}"},
            )
            return True
        if self.state.chance(config.transient_rate):
            self.count_fault("transient")
            # Alternate the two shapes real outages take: a proxy's HTML page and a JSON error.
            if self.state.chance(0.5):
                self.send_html(502, "Bad gateway")
            else:
                self.send_error_json(503, "unavailable", "Temporarily unavailable.")
            return True
        return False

    def count_fault(self, name: str) -> None:
        with self.state.lock:
            self.state.faults[name] += 1

    # Protocol

    def create(self, body: bytes) -> None:
        key = self.headers.get("Idempotency-Key", "")
        with self.state.lock:
            if key:
                self.state.posts_by_key[key] += 1
                existing = self.state.job_by_key.get(key)
                if existing:
                    return self.send_json(200, {"id": existing, "status": "queued"})
        try:
            content, file_name, content_type, options = self.document(body)
        except SourceError as error:
            # The job protocol's answer for a document the extractor could not fetch: 422, with
            # the source's error code (`source_unavailable` may pass, `source_unusable` not).
            return self.send_error_json(422, error.code, f"Cannot fetch the document: {error}")
        except ValueError as error:
            return self.send_error_json(400, "bad_request", str(error))
        # The upload is not kept, only its result (once for every upload of the same file).
        result_key = (hashlib.sha256(content).digest(), file_name, content_type)
        error = None
        pages = 0  # read from the document: none when it could not be read
        if (kept := self.state.cached_result(result_key)) is None:
            try:
                result = extracted(content, file_name, content_type)
            except UnsupportedDocumentError as unsupported:
                return self.send_error_json(415, "unsupported_media_type", str(unsupported))
            except DocumentTooLargeError as too_large:
                error = {"code": "document_too_large", "message": str(too_large)}
            except CorruptDocumentError as corrupt:
                error = {"code": "corrupt_document", "message": str(corrupt)}
            else:
                pages = result["page_count"]
                self.state.keep_result(result_key, json.dumps(result).encode(), pages)
        else:
            pages = kept[1]
        config = self.state.config
        pages_read = 0
        if error is None and self.state.chance(config.permanent_failure_rate):
            self.count_fault("permanent_failure")
            error = {"code": "extraction_failed", "message": "Injected failure."}
            pages_read = pages
        with self.state.lock:
            if key and key in self.state.job_by_key:  # a concurrent twin won the race
                return self.send_json(200, {"id": self.state.job_by_key[key], "status": "queued"})
            job = SandboxJob(
                id=str(uuid.uuid4()),
                created=time.time(),
                duration=self.state.random.uniform(config.latency_min, config.latency_max),
                result_key=None if error else result_key,
                error=error,
                lost=config.lost_rate > 0 and self.state.random.random() < config.lost_rate,
                idempotency_key=key,
                pages_read=pages_read,
            )
            self.state.add_job(job, pages)
        self.send_json(202, {"id": job.id, "status": "queued", "options": options})

    def document(self, body: bytes) -> tuple[bytes, str, str, dict[str, Any]]:
        content_type = self.headers.get("Content-Type", "")
        if content_type.startswith("multipart/form-data"):
            message = BytesParser(policy=HTTP).parsebytes(
                f"Content-Type: {content_type}\r\n\r\n".encode() + body
            )
            parts = {
                part.get_param("name", header="content-disposition"): part
                for part in message.iter_parts()
            }
            if "file" not in parts:
                raise ValueError("The multipart body has no 'file' part.")
            upload = parts["file"]
            options = json.loads(parts["options"].get_content()) if "options" in parts else {}
            return (
                upload.get_payload(decode=True) or b"",
                upload.get_filename() or "",
                upload.get_content_type(),
                options,
            )
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            raise ValueError("The body is not JSON.") from None
        url = data.get("url") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("Give a multipart 'file' or a JSON 'url'.")
        content, fetched_type = self.fetch(url)
        name = url.rsplit("/", 1)[-1].split("?", 1)[0]
        return content, name, fetched_type, data.get("options") or {}

    def fetch(self, url: str) -> tuple[bytes, str]:
        """The document at `url` and its type, fetched as the service fetches sources
        (`extraction.sources`, under the sandbox's settings), on kept-alive sessions."""
        with fetch_source(
            url, max_bytes=MAX_UPLOAD_BYTES, timeout=30, sessions=self.state.fetcher
        ) as fetched:
            return fetched.file.read(), fetched.facts.content_type

    def find(self, job_id: str) -> SandboxJob | None:
        job = self.state.job(job_id)
        if job is None:
            self.send_error_json(404, "not_found", f"No extraction {job_id}.")
            return None
        return job

    def poll(self, job_id: str) -> None:
        now = time.time()
        with self.state.lock:
            if job_id in self.state.jobs:  # no record kept for ids made up or forgotten
                self.state.polls[job_id].append(now)
                not_before = self.state.not_before.get(job_id)
                if not_before is not None and now < not_before - EARLY_POLL_TOLERANCE:
                    early = {"job": job_id, "at": now, "not_before": not_before}
                    self.state.early_polls.append(early)
        job = self.find(job_id)
        if job is None:
            return
        status, progress = job.status(now)
        body: dict[str, Any] = {"id": job.id, "status": status, "progress": progress}
        headers = {}
        if status == "failed":
            body["error"] = job.error
        if status in ("failed", "canceled"):
            body["usage"] = {"pages": job.pages_read}
        if status in ("queued", "running") and self.state.config.poll_retry_after:
            wait = self.state.config.poll_retry_after
            headers["Retry-After"] = f"{wait:g}"
            with self.state.lock:
                self.state.not_before[job_id] = now + wait
        self.send_json(200, body, headers)

    def result(self, job_id: str) -> None:
        job = self.find(job_id)
        if job is None:
            return
        status, _ = job.status(time.time())
        if status != "succeeded":
            return self.send_error_json(409, "not_ready", f"The extraction is {status}.")
        kept = self.state.cached_result(job.result_key)
        if kept is None:  # dropped since
            return self.send_error_json(404, "not_found", f"No extraction {job_id}.")
        self.send_encoded(200, kept[0])

    def cancel(self, job_id: str) -> None:
        job = self.find(job_id)
        if job is None:
            return
        with self.state.lock:
            job.canceled = True
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], config: SandboxConfig) -> None:
        super().__init__(address, SandboxHandler)
        self.state = SandboxState(config)
        self.control_token = control_token()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"
