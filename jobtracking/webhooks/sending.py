"""Webhook delivery per the Standard Webhooks convention: signed, at least once, retried with
backoff for about a day, then dead (retriable). The deliveries' rows are written by
`services.deliveries`; this module signs and sends.

Signing secrets are not stored: each subscription's secret is derived from the server's key and
the subscription's `secret_version` (bump it to rotate), and shown to staff once.
"""

import base64
import contextlib
import errno
import hashlib
import hmac
import logging
import socket
import ssl
import time
from datetime import datetime, timedelta
from importlib.metadata import version
from typing import NamedTuple
from urllib.parse import urlsplit

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from extraction.urlsafety import UnsafeURLError
from jobtracking.infra import tracing
from jobtracking.infra.ids import uuid7
from jobtracking.infra.storable import safe_json, safe_text
from jobtracking.models import (
    JobEvent,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.representation import moment
from jobtracking.webhooks import transport
from jobtracking.webhooks.transport import BadAnswer, ConnectError, ConnectTimeout, checked_target

logger = logging.getLogger(__name__)

# Waits before each retry; after the last one the delivery is dead (about 31 hours in all).
RETRY_SCHEDULE = (
    timedelta(seconds=5),
    timedelta(seconds=30),
    timedelta(minutes=2),
    timedelta(minutes=10),
    timedelta(hours=1),
    timedelta(hours=6),
    timedelta(hours=24),
)
# However its attempts went, a delivery still failing this long after its first failure is dead.
RETRY_WINDOW = sum(RETRY_SCHEDULE, timedelta())
EXCERPT_BYTES = 1024
TEST_EVENT_TYPE = "webhook.test"
# Receivers see who calls them (and may allow-list it), not an HTTP library's default.
USER_AGENT = f"fluxx-extraction-jobs/{version('extraction-job-tracking')}"
# What a test event's caller reads when it failed, whatever the cause: telling a refused
# connection from a timeout or a port that does not speak HTTP would make the test a port
# scanner (the logs keep the cause).
TEST_FAILED = "The receiver did not answer with HTTP 2xx"
# Advisory lock namespace ("hook") of a subscription's test; the second key is its id.
TEST_LOCK = 0x686F6F6B


class SubscriptionTestRunningError(Exception):
    """A test event to this subscription is on its way: one at a time (`send_test_event`)."""


class Outcome(NamedTuple):
    """How one POST went: the receiver's HTTP status (None: no answer), the start of its
    answer, what failed (empty when delivered), when it began and how long it took."""

    status: int | None
    excerpt: str
    error: str
    attempted_at: datetime | None = None  # None: now, when it is recorded
    duration_ms: int = 0
    # The delivery's own fault (its subscription's settings, its body, a bug), not its
    # receiver's: counted as its attempt, never as its receiver being down.
    unsendable: bool = False


def subscription_secret(subscription: WebhookSubscription, version: int | None = None) -> str:
    """`whsec_<base64 key>`, as Standard Webhooks libraries expect: of the subscription's
    current `secret_version`, or of `version`."""
    version = subscription.secret_version if version is None else version
    key = hmac.new(
        (settings.WEBHOOK_SIGNING_KEY or settings.SECRET_KEY).encode(),
        f"webhook:{subscription.pk}:{version}".encode(),
        hashlib.sha256,
    ).digest()
    return "whsec_" + base64.b64encode(key).decode()


def subscription_secrets(subscription: WebhookSubscription, now=None) -> list[str]:
    """The secrets a delivery is signed with: the current one, and for
    `WEBHOOK_SECRET_GRACE_HOURS` after a rotation the previous one too, so that a receiver
    verifies with either while it switches (Standard Webhooks: any one signature that verifies
    is enough)."""
    secrets = [subscription_secret(subscription)]
    rotated_at, now = subscription.secret_rotated_at, now or timezone.now()
    grace = timedelta(hours=settings.WEBHOOK_SECRET_GRACE_HOURS)
    if rotated_at is not None and subscription.secret_version > 1 and now < rotated_at + grace:
        secrets.append(subscription_secret(subscription, subscription.secret_version - 1))
    return secrets


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def wants(
    subscription: WebhookSubscription, event_type: str, requester: int | None, reaches_all: bool
) -> bool:
    """Whether the subscription receives this event: of a type it asked for (listed, or every
    type when it chose all of them: an empty list is no type), of a job its owner may see
    (`selectors.visible`'s rule: their own, or every one if `reaches_all`, which
    `services.deliveries.reaches_all_sql` says). `services.deliveries.fan_out_statement`
    says the same in SQL."""
    return (subscription.all_event_types or event_type in subscription.event_types) and (
        reaches_all or requester == subscription.created_by_id
    )


def _message(event_type: str, timestamp, data: dict) -> bytes:
    """The body every webhook carries: `{"type", "timestamp", "data"}`, the timestamp written
    as the API writes moments; compact UTF-8 (orjson: a tenth of the standard library's time
    for a job's payload, sent thousands of times a minute). Data orjson cannot write (an
    integer past 64 bits that a job's metadata held before the API refused them) is sent made
    safe (`storable.safe_json`: such a number as its decimal text), rather than never."""
    message = {"type": event_type, "timestamp": moment(timestamp), "data": data}
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError:
        message["data"], changes = safe_json(data)
        logger.warning("webhook %s: data made safe to send: %s", event_type, "; ".join(changes))
        return orjson.dumps(message)


def delivery_body(event: JobEvent) -> bytes:
    return _message(event.type, event.created_at, event.payload)


def delivery_headers(
    message_id: str, timestamp: str, signature: str, traceparent: str = ""
) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": signature,
    }
    if traceparent:  # the receiver's own trace joins the job's
        headers["traceparent"] = traceparent
    return headers


class Receiver:
    """A subscription as its POSTs need it: the secret derived and the URL checked by the SSRF
    guard once for a lane round's deliveries to it (so the guard's approval is at most a round
    old, and a named host is resolved once a round rather than once a POST)."""

    def __init__(self, subscription: WebhookSubscription) -> None:
        self.url = subscription.url
        self.secrets = subscription_secrets(subscription)
        self.target, self.unsafe = None, ""
        try:
            self.target = checked_target(self.url)
        except UnsafeURLError as unsafe:
            self.unsafe = f"UnsafeURL: {unsafe.message}"

    def post(
        self, message_id: str, body: bytes, deadline: float | None = None, traceparent: str = ""
    ) -> Outcome:
        """POST a signed body (all of it by `deadline`, a `time.monotonic()` time, if given);
        never raises for the receiver's faults. What the receiver said is made storable
        (`storable.safe_text`): its answer is recorded with its neighbours' in one statement."""
        timestamp = int(time.time())
        signature = " ".join(sign(secret, message_id, timestamp, body) for secret in self.secrets)
        headers = delivery_headers(message_id, str(timestamp), signature, traceparent)
        status, excerpt, error = None, "", self.unsafe
        attempted_at, started = timezone.now(), time.monotonic()
        try:
            if self.target is not None:
                status, answered = transport.post(
                    self.target,
                    body=body,
                    headers=headers,
                    timeout=(settings.WEBHOOK_CONNECT_TIMEOUT, settings.WEBHOOK_READ_TIMEOUT),
                    deadline=deadline,
                )
                excerpt = answered[:EXCERPT_BYTES].decode("utf-8", "replace")
        except (BadAnswer, OSError) as failure:
            error = describe_failure(failure, self.url)
        if status is not None and not is_delivered(status):
            error = f"HTTP {status} from {receiver_address(self.url)}"
        duration_ms = round((time.monotonic() - started) * 1000)
        return Outcome(status, safe_text(excerpt), safe_text(error), attempted_at, duration_ms)


def post_signed(subscription: WebhookSubscription, message_id: str, body: bytes) -> Outcome:
    return Receiver(subscription).post(message_id, body)


def send(delivery: WebhookDelivery, receiver: Receiver | None = None) -> Outcome:
    """POST the delivery's event (to `receiver`, its subscription as a round found it), as a
    span of its job's trace (`job_traceparent`, when the claim read it: tracing is on) whose
    traceparent the POST carries."""
    event = delivery.event
    receiver = receiver or Receiver(delivery.subscription)
    attributes = {"webhook.event_type": event.type, "webhook.delivery_id": delivery.pk}
    if event.job_id:
        attributes["job.id"] = str(event.job_id)
    with tracing.span(
        "webhook.send",
        parent=getattr(delivery, "job_traceparent", None) or "",
        attributes=attributes,
        kind=tracing.CLIENT,
    ) as span:
        outcome = receiver.post(
            str(event.event_id), delivery_body(event), traceparent=tracing.current_traceparent()
        )
        if outcome.status is not None:
            span.set_attribute("http.response.status_code", outcome.status)
        tracing.record_outcome(span, "delivered" if is_delivered(outcome.status) else "failed")
    return outcome


def unsendable(error: Exception) -> Outcome:
    """A delivery's attempt that failed on our side (`Outcome.unsendable`), named by the
    exception's type alone: its message may hold the URL's secrets."""
    return Outcome(
        None,
        "",
        f"Unsendable: {type(error).__name__} while sending this delivery (not the receiver's "
        "answer; retried on its schedule)",
        unsendable=True,
    )


def receiver_address(url: str) -> str:
    """`host:port` of a receiver's URL: what an error names, never its path or query (which
    may carry a token)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def describe_failure(failure: Exception, url: str) -> str:
    """A POST's failure as `Cause: what happened, naming the receiver`, e.g.
    "ConnectTimeout: hooks.example:443 did not accept a connection in 5 s". Written from the
    exception's type and its OS or TLS reason only, never its message, which may name the
    pinned address."""
    where = receiver_address(url)
    cause = failure.__cause__
    if isinstance(failure, ConnectTimeout):
        seconds = settings.WEBHOOK_CONNECT_TIMEOUT
        return f"ConnectTimeout: {where} did not accept a connection in {seconds:g} s"
    if isinstance(failure, ConnectError):
        if isinstance(cause, socket.gaierror):
            return f"NameResolution: {where.rsplit(':', 1)[0]} cannot be resolved"
        if isinstance(cause, ConnectionRefusedError):
            return f"ConnectionRefused: {where} refused the connection"
        return f"ConnectionFailed: {where}: {_os_reason(cause)}"
    if isinstance(failure, TimeoutError):
        return f"ReadTimeout: {where} did not answer in {settings.WEBHOOK_READ_TIMEOUT:g} s"
    if isinstance(failure, ssl.SSLError):
        return f"TLSError: {where}: {_tls_reason(failure)}"
    if isinstance(failure, ConnectionError):  # Disconnected too
        return f"ConnectionClosed: {where} closed the connection ({type(failure).__name__})"
    if isinstance(failure, BadAnswer):
        return f"BadAnswer: {where} did not answer in HTTP/1.1"
    return f"{type(failure).__name__}: {where}: {_os_reason(failure)}"


def _os_reason(error: BaseException | None) -> str:
    if isinstance(error, OSError) and error.errno in errno.errorcode:
        return error.strerror or errno.errorcode[error.errno]
    return type(error).__name__ if error else "no reason given"


def _tls_reason(error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"certificate not trusted ({error.verify_message})"
    return error.reason or type(error).__name__


def is_delivered(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def is_receiver_down(status: int | None) -> bool:
    """An answer that says the receiver may be down as a whole (no answer, 408, 429, 5xx), as
    opposed to one that refuses this delivery."""
    return status is None or status in (408, 429) or status >= 500


def send_test_event(subscription: WebhookSubscription) -> Outcome:
    """A signed `webhook.test` message sent at once and recorded nowhere: staff and clients
    check that the receiver answers and verifies signatures before real events flow.

    It holds the caller's web worker, so it is bounded: `WEBHOOK_TEST_TIMEOUT` for the whole
    POST, and one test at a time per subscription across every web process (else
    `SubscriptionTestRunningError`). A failure reads `TEST_FAILED` (with the status if the receiver
    answered in HTTP) whatever its cause; the log keeps the cause."""
    data = {"subscription_id": subscription.pk, "message": "A test event; no job is involved."}
    body = _message(TEST_EVENT_TYPE, timezone.now(), data)
    deadline = time.monotonic() + settings.WEBHOOK_TEST_TIMEOUT
    with _only_test_of(subscription):
        outcome = Receiver(subscription).post(f"msg_test_{uuid7()}", body, deadline)
    if not outcome.error:
        return outcome
    logger.info("webhook test to subscription %s: %s", subscription.pk, outcome.error)
    answered = f" (HTTP {outcome.status})" if outcome.status is not None else ""
    return outcome._replace(error=TEST_FAILED + answered)


@contextlib.contextmanager
def _only_test_of(subscription: WebhookSubscription):
    """Hold the subscription's test lock, or raise `SubscriptionTestRunningError`. A transaction's
    advisory lock (PostgreSQL): it holds no row and writes nothing, and it ends with its
    transaction whatever happens, also behind a transaction-pooling PgBouncer. (SQLite, the
    one-machine demo, has none: its tests are bounded in time only.)"""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_try_advisory_xact_lock(%s, %s)", [TEST_LOCK, subscription.pk]
                )
                if not cursor.fetchone()[0]:
                    raise SubscriptionTestRunningError(
                        f"A test event to webhook endpoint {subscription.pk} is on its way."
                    )
        yield
