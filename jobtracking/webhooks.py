"""Webhook delivery per the Standard Webhooks convention: signed, at least once, retried with
backoff for about a day, then dead (retriable).

Signing secrets are not stored: each subscription's secret is derived from the server's key and
the subscription's `secret_version` (bump it to rotate), and shown to staff once.
"""

import base64
import functools
import hashlib
import hmac
import json
import random
import time
from datetime import timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobtracking.ids import uuid7
from jobtracking.models import DeliveryState, JobEvent, WebhookDelivery, WebhookSubscription
from jobtracking.queue import enqueue_delivery
from jobtracking.rows import columns, insert_fields, instance, json_rows, select_rows, table
from jobtracking.urlsafety import UnsafeURLError, post_checked

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


def wants(subscription: WebhookSubscription, event_type: str) -> bool:
    return not subscription.event_types or event_type in subscription.event_types


def deliveries_fan_out(events: list[JobEvent]) -> None:
    """One pending delivery per (event, matching active subscription). Call inside the
    transaction that writes the events: they commit together, and each delivery is handed to a
    task once they have. Its first due time is a lease away, so the dispatcher retries only a
    delivery whose task was lost."""
    if not events:
        return
    subscriptions = list(WebhookSubscription.objects.filter(active=True))
    if not subscriptions:
        return
    now = timezone.now()
    deliveries = WebhookDelivery.objects.bulk_create(
        _pending_delivery(now, event_id=event.pk, subscription_id=sub.pk)
        for event in events
        for sub in subscriptions
        if wants(sub, event.type)
    )
    enqueue_on_commit([delivery.pk for delivery in deliveries])


def enqueue_on_commit(delivery_ids: list[int]) -> None:
    """Hand each new delivery to a task once the transaction that wrote it has committed."""
    if delivery_ids:  # (most creates have none: registering a callback is not free)
        transaction.on_commit(lambda: [enqueue_delivery(pk) for pk in delivery_ids])


def _delivery_value_fields() -> tuple:
    """A delivery's columns but its event and subscription, which the fan-out joins in."""
    return insert_fields(WebhookDelivery, exclude=("event", "subscription"))


@functools.cache
def fan_out_statement(events: str) -> str:
    """`deliveries_fan_out` as one `INSERT … SELECT`, for a statement whose CTE named `events`
    returned the new events' `id` and `type`: it returns the deliveries' ids. Its parameter is
    the deliveries' other columns (`fan_out_values`)."""
    meta = WebhookDelivery._meta
    fields = _delivery_value_fields()
    return (
        f"INSERT INTO {table(WebhookDelivery)} ({meta.get_field('event').column}, "
        f"{meta.get_field('subscription').column}, {columns(fields)}) "
        f"SELECT e.id, s.id, t.* FROM {events} e "
        f"JOIN {table(WebhookSubscription)} s ON s.active "
        # `wants`: no event types means every type.
        "AND (s.event_types IN ('[]'::jsonb, 'null'::jsonb) "
        "OR jsonb_exists(s.event_types, e.type)) "
        f"CROSS JOIN ({select_rows(WebhookDelivery, fields)}) t "
        "RETURNING id"
    )


def fan_out_values(now) -> str:
    return json_rows([_pending_delivery(now)], _delivery_value_fields())


def _pending_delivery(now, **relations) -> WebhookDelivery:
    """A new delivery: its first due time is a lease away (see `deliveries_fan_out`)."""
    lease = now + timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
    return instance(WebhookDelivery, next_attempt_at=lease, created_at=now, **relations)


def _message(event_type: str, timestamp, data: dict) -> bytes:
    """The body every webhook carries: `{"type", "timestamp", "data"}`."""
    return json.dumps(
        {"type": event_type, "timestamp": timestamp.isoformat(), "data": data},
        separators=(",", ":"),
    ).encode()


def delivery_body(event: JobEvent) -> bytes:
    return _message(event.type, event.created_at, event.payload)


def _excerpt(response: requests.Response) -> str:
    try:
        chunk = next(response.iter_content(EXCERPT_BYTES), b"")
    except requests.RequestException:
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
            data=body,
            headers=headers,
            timeout=(settings.WEBHOOK_CONNECT_TIMEOUT, settings.WEBHOOK_READ_TIMEOUT),
            stream=True,
        ) as response:
            status, excerpt = response.status_code, _excerpt(response)
    except UnsafeURLError as unsafe:
        error = unsafe.message
    except requests.RequestException as failure:
        error = f"{type(failure).__name__}"
    return status, excerpt, error


def deliver(delivery_id: int) -> str:
    """Make one attempt; record its outcome. Returns the delivery's state afterwards."""
    delivery = (
        WebhookDelivery.objects.select_related("event", "subscription")
        .filter(pk=delivery_id, state=DeliveryState.PENDING)
        .first()
    )
    if delivery is None:
        return "gone"
    event = delivery.event
    status, excerpt, error = post_signed(
        delivery.subscription, str(event.event_id), delivery_body(event)
    )
    return _record_attempt(delivery, status=status, excerpt=excerpt, error=error)


def send_test_event(subscription: WebhookSubscription) -> tuple[int | None, str, str]:
    """A signed `webhook.test` message sent at once and recorded nowhere: staff check that the
    receiver answers and verifies signatures before real events flow."""
    data = {"subscription_id": subscription.pk, "message": "A test event from staff."}
    body = _message(TEST_EVENT_TYPE, timezone.now(), data)
    return post_signed(subscription, f"msg_test_{uuid7()}", body)


def _record_attempt(delivery: WebhookDelivery, *, status: int | None, excerpt: str, error: str):
    now = timezone.now()
    attempts = delivery.attempts + 1
    changes: dict[str, Any] = {
        "attempts": attempts,
        "last_status_code": status,
        "last_response_excerpt": excerpt,
        "last_error": error or ("" if status and 200 <= status < 300 else f"HTTP {status}"),
    }
    if status is not None and 200 <= status < 300:
        changes |= {"state": DeliveryState.DELIVERED, "delivered_at": now, "next_attempt_at": None}
    elif attempts > len(RETRY_SCHEDULE):
        changes |= {"state": DeliveryState.DEAD, "next_attempt_at": None}
    else:
        wait = RETRY_SCHEDULE[attempts - 1].total_seconds()
        changes["next_attempt_at"] = now + timedelta(seconds=wait * random.uniform(1.0, 1.2))
    # Compare-and-set on the attempt count: a duplicate task's outcome is dropped.
    WebhookDelivery.objects.filter(
        pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts
    ).update(**changes)
    return changes.get("state", DeliveryState.PENDING)


def delivery_retry(*, queryset) -> int:
    """Give dead deliveries a fresh schedule, due now (the admin action and the command)."""
    with transaction.atomic():
        return queryset.filter(state=DeliveryState.DEAD).update(
            state=DeliveryState.PENDING, attempts=0, next_attempt_at=timezone.now(), last_error=""
        )
