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
from datetime import datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobtracking.ids import uuid7
from jobtracking.models import (
    DeliveryState,
    ExtractionJob,
    JobEvent,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.representation import moment
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


def deliveries_fan_out(events: list[JobEvent]) -> None:
    """One pending delivery per (event, matching active subscription), due at once. Call inside
    the transaction that writes the events: they commit together, and the delivery lane
    (`jobtracking.delivery_lane`) sends them."""
    if not events:
        return
    subscriptions = list(WebhookSubscription.objects.filter(active=True))
    if not subscriptions:
        return
    requesters = dict(
        ExtractionJob.objects.filter(pk__in={event.job_id for event in events}).values_list(
            "pk", "requested_by_id"
        )
    )
    now = timezone.now()
    WebhookDelivery.objects.bulk_create(
        _pending_delivery(now, event_id=event.pk, subscription_id=sub.pk)
        for event in events
        for sub in subscriptions
        if wants(sub, event.type, requesters.get(event.job_id))
    )


def _delivery_value_fields() -> tuple:
    """A delivery's columns but its event and subscription, which the fan-out joins in."""
    return insert_fields(WebhookDelivery, exclude=("event", "subscription"))


@functools.cache
def fan_out_statement(events: str, jobs: str) -> str:
    """`deliveries_fan_out` as one `INSERT … SELECT`, for a statement whose CTEs named `events`
    and `jobs` returned the new events' `id`, `type` and `job_id` and their jobs' `id` and
    `requested_by_id`: it returns the deliveries' ids. Its parameter is the deliveries' other
    columns (`fan_out_values`)."""
    meta = WebhookDelivery._meta
    fields = _delivery_value_fields()
    return (
        f"INSERT INTO {table(WebhookDelivery)} ({meta.get_field('event').column}, "
        f"{meta.get_field('subscription').column}, {columns(fields)}) "
        f"SELECT e.id, s.id, t.* FROM {events} e JOIN {jobs} j ON j.id = e.job_id "
        f"JOIN {table(WebhookSubscription)} s ON s.active "
        # `wants`: no event types means every type; a job its owner may see.
        "AND (s.event_types IN ('[]'::jsonb, 'null'::jsonb) "
        "OR jsonb_exists(s.event_types, e.type)) "
        "AND (s.all_jobs OR s.created_by_id IS NOT DISTINCT FROM j.requested_by_id) "
        f"CROSS JOIN ({select_rows(WebhookDelivery, fields)}) t "
        "RETURNING id"
    )


def fan_out_values(now) -> str:
    return json_rows([_pending_delivery(now)], _delivery_value_fields())


def _pending_delivery(now, **relations) -> WebhookDelivery:
    return instance(WebhookDelivery, next_attempt_at=now, created_at=now, **relations)


def _message(event_type: str, timestamp, data: dict) -> bytes:
    """The body every webhook carries: `{"type", "timestamp", "data"}`, the timestamp written
    as the API writes moments."""
    return json.dumps(
        {"type": event_type, "timestamp": moment(timestamp), "data": data},
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
    """Make one attempt now; record its outcome. Returns the delivery's state afterwards."""
    delivery = (
        WebhookDelivery.objects.select_related("event", "subscription")
        .filter(pk=delivery_id, state=DeliveryState.PENDING)
        .first()
    )
    if delivery is None:
        return "gone"
    return record_attempt(delivery, send(delivery))


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


def record_attempt(
    delivery: WebhookDelivery,
    outcome: tuple[int | None, str, str],
    held_until: datetime | None = None,
) -> str:
    """Record one attempt's outcome; returns the delivery's state afterwards. A failure is
    retried on `RETRY_SCHEDULE`; `held_until` (the receiver's circuit is open) means it was not
    this delivery's fault: it is not counted and waits for the circuit. Either way a delivery
    still failing `RETRY_WINDOW` after its first failure is dead."""
    status, excerpt, error = outcome
    now = timezone.now()
    first_failed_at = delivery.first_failed_at or now
    attempts = delivery.attempts + (held_until is None or is_delivered(status))
    changes: dict[str, Any] = {
        "attempts": attempts,
        "last_status_code": status,
        "last_response_excerpt": excerpt,
        "last_error": error or ("" if is_delivered(status) else f"HTTP {status}"),
    }
    if is_delivered(status):
        changes |= {"state": DeliveryState.DELIVERED, "delivered_at": now, "next_attempt_at": None}
    elif attempts > len(RETRY_SCHEDULE) or now >= first_failed_at + RETRY_WINDOW:
        changes |= {"state": DeliveryState.DEAD, "next_attempt_at": None}
    elif held_until is not None:
        changes |= {"first_failed_at": first_failed_at, "next_attempt_at": held_until}
    else:
        wait = RETRY_SCHEDULE[attempts - 1].total_seconds()
        changes["next_attempt_at"] = now + timedelta(seconds=wait * random.uniform(1.0, 1.2))
        changes["first_failed_at"] = first_failed_at
    # Compare-and-set on the attempt count: a duplicate sender's outcome is dropped.
    WebhookDelivery.objects.filter(
        pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts
    ).update(**changes)
    return changes.get("state", DeliveryState.PENDING)


def delivery_retry(*, queryset) -> int:
    """Give dead deliveries a fresh schedule, due now (the admin action and the command)."""
    with transaction.atomic():
        return queryset.filter(state=DeliveryState.DEAD).update(
            state=DeliveryState.PENDING,
            attempts=0,
            first_failed_at=None,
            next_attempt_at=timezone.now(),
            last_error="",
        )
