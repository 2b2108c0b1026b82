"""Webhook delivery per the Standard Webhooks convention: signed, at least once, retried with
backoff for about a day, then dead (retriable). The deliveries' rows are written by
`services.deliveries`; this module signs and sends.

Signing secrets are not stored: each subscription's secret is derived from the server's key and
the subscription's `secret_version` (bump it to rotate), and shown to staff once.
"""

import base64
import hashlib
import hmac
import json
import time
from datetime import timedelta

import urllib3
from django.conf import settings
from django.utils import timezone

from extraction.urlsafety import UnsafeURLError, post_checked
from jobtracking.infra.ids import uuid7
from jobtracking.models import (
    JobEvent,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.representation import moment

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


def subscription_secret(subscription: WebhookSubscription) -> str:
    """`whsec_<base64 key>`, as Standard Webhooks libraries expect."""
    key = hmac.new(
        (settings.WEBHOOK_SIGNING_KEY or settings.SECRET_KEY).encode(),
        f"webhook:{subscription.pk}:{subscription.secret_version}".encode(),
        hashlib.sha256,
    ).digest()
    return "whsec_" + base64.b64encode(key).decode()


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def wants(subscription: WebhookSubscription, event_type: str, requester: int | None) -> bool:
    """Whether the subscription receives this event: of a type it asked for, of a job its owner
    may see (`selectors.visible`'s rule, fixed when the subscription was saved: `all_jobs`)."""
    return (not subscription.event_types or event_type in subscription.event_types) and (
        subscription.all_jobs or requester == subscription.created_by_id
    )


def _message(event_type: str, timestamp, data: dict) -> bytes:
    """The body every webhook carries: `{"type", "timestamp", "data"}`, the timestamp written
    as the API writes moments."""
    return json.dumps(
        {"type": event_type, "timestamp": moment(timestamp), "data": data},
        separators=(",", ":"),
    ).encode()


def delivery_body(event: JobEvent) -> bytes:
    return _message(event.type, event.created_at, event.payload)


def _excerpt(response: urllib3.BaseHTTPResponse) -> str:
    try:
        chunk = response.read(EXCERPT_BYTES)
    except urllib3.exceptions.HTTPError:
        chunk = b""
    return chunk[:EXCERPT_BYTES].decode("utf-8", "replace")


def delivery_headers(message_id: str, timestamp: str, signature: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": signature,
    }


def post_signed(
    subscription: WebhookSubscription, message_id: str, body: bytes
) -> tuple[int | None, str, str]:
    """POST a signed body to the subscription: (HTTP status or None, response excerpt, error)."""
    timestamp = int(time.time())
    signature = sign(subscription_secret(subscription), message_id, timestamp, body)
    headers = delivery_headers(message_id, str(timestamp), signature)
    status, excerpt, error = None, "", ""
    try:
        with post_checked(
            subscription.url,
            body=body,
            headers=headers,
            timeout=(settings.WEBHOOK_CONNECT_TIMEOUT, settings.WEBHOOK_READ_TIMEOUT),
        ) as response:
            status, excerpt = response.status, _excerpt(response)
    except UnsafeURLError as unsafe:
        error = unsafe.message
    except (urllib3.exceptions.HTTPError, OSError) as failure:
        error = f"{type(failure).__name__}"
    return status, excerpt, error


def send(delivery: WebhookDelivery) -> tuple[int | None, str, str]:
    """POST the delivery's event: (HTTP status or None, response excerpt, error)."""
    event = delivery.event
    return post_signed(delivery.subscription, str(event.event_id), delivery_body(event))


def is_delivered(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def is_receiver_down(status: int | None) -> bool:
    """An answer that says the receiver may be down as a whole (no answer, 408, 429, 5xx), as
    opposed to one that refuses this delivery."""
    return status is None or status in (408, 429) or status >= 500


def send_test_event(subscription: WebhookSubscription) -> tuple[int | None, str, str]:
    """A signed `webhook.test` message sent at once and recorded nowhere: staff check that the
    receiver answers and verifies signatures before real events flow."""
    data = {"subscription_id": subscription.pk, "message": "A test event from staff."}
    body = _message(TEST_EVENT_TYPE, timezone.now(), data)
    return post_signed(subscription, f"msg_test_{uuid7()}", body)
