"""Webhook deliveries' rows: one per (event, matching subscription), written with the events;
each attempt's outcome; dead ones given a fresh schedule. `jobtracking.webhooks.sending` signs and
sends; the delivery lane (`jobtracking.engine.delivery_lane`) claims and sends due ones."""

import contextlib
import copy
import functools
import logging
import random
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import InterfaceError, OperationalError, connection, models, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from jobtracking.infra import tracing
from jobtracking.infra.metrics import DELIVERY_ERRORS
from jobtracking.infra.rows import (
    columns,
    insert_fields,
    instance,
    json_rows,
    quote,
    select_rows,
    table,
)
from jobtracking.models import (
    Batch,
    DeliveryAttempt,
    DeliveryState,
    ExtractionJob,
    JobEvent,
    ReceiverHealth,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.selectors import VIEW_ALL
from jobtracking.services.circuits import circuit_gate
from jobtracking.webhooks.sending import (
    RETRY_SCHEDULE,
    RETRY_WINDOW,
    Outcome,
    is_delivered,
    send,
    wants,
)

logger = logging.getLogger(__name__)

# The database failing as a whole is no delivery's fault: the caller rides it out (the lane
# backs off), and the round's deliveries go again once their claim has run out.
DATABASE_DOWN = (OperationalError, InterfaceError)


@functools.cache
def reaches_all_sql(subscription: str) -> str:
    """SQL: whether the subscription (its table's alias `subscription`) receives the events of
    every client's jobs: it says `all_jobs`, and its creator holds the view-all permission
    now, as Django's `ModelBackend` reads it (an active user, superuser or given it directly
    or through a group), not only when it was saved: a revoked permission stops it at the next
    event. A subscription without a creator is an operator's (`seed_demo`, the shell): as it
    was saved. The fan-out's both paths use it, once a subscription."""
    user = get_user_model()
    app_label, codename = VIEW_ALL.split(".")
    permission = (
        f"SELECT p.id FROM {table(Permission)} p JOIN {table(ContentType)} c "
        f"ON c.id = p.content_type_id WHERE c.app_label = '{app_label}' "
        f"AND p.codename = '{codename}'"
    )
    granted, member = user.user_permissions.through, user.groups.through
    by_group = Group.permissions.through

    def column(model, name: str) -> str:
        return quote(model._meta.get_field(name).column)

    owner = f"{subscription}.{column(WebhookSubscription, 'created_by')}"
    return (
        f"({subscription}.{column(WebhookSubscription, 'all_jobs')} AND ({owner} IS NULL "
        f"OR EXISTS (SELECT 1 FROM {table(user)} u WHERE u.{quote(user._meta.pk.column)} = "
        f"{owner} AND u.{column(user, 'is_active')} AND (u.{column(user, 'is_superuser')} "
        f"OR EXISTS (SELECT 1 FROM {table(granted)} g WHERE g.{column(granted, 'user')} = "
        f"{owner} AND g.{column(granted, 'permission')} IN ({permission})) "
        f"OR EXISTS (SELECT 1 FROM {table(member)} m JOIN {table(by_group)} gp "
        f"ON gp.{column(by_group, 'group')} = m.{column(member, 'group')} "
        f"WHERE m.{column(member, 'user')} = {owner} "
        f"AND gp.{column(by_group, 'permission')} IN ({permission}))))))"
    )


def deliveries_fan_out(events: list[JobEvent], now: datetime | None = None) -> None:
    """One pending delivery per (event, matching active subscription), created and due `now`
    (by default, the present). Call inside the transaction that writes the events: they commit
    together, and the delivery lane (`jobtracking.engine.delivery_lane`) sends them."""
    if not events:
        return
    reaches_all = RawSQL(
        reaches_all_sql(table(WebhookSubscription)), [], output_field=models.BooleanField()
    )
    subscriptions = list(
        WebhookSubscription.objects.filter(active=True).annotate(reaches_all=reaches_all)
    )
    if not subscriptions:
        return
    # Whose each event is: its own `requested_by` (a usage event), its job's requester or its
    # batch's.
    requesters = dict(
        ExtractionJob.objects.filter(
            pk__in={event.job_id for event in events if event.job_id}
        ).values_list("pk", "requested_by_id")
    )
    if batch_ids := {event.batch_id for event in events if event.batch_id}:
        requesters |= dict(
            Batch.objects.filter(pk__in=batch_ids).values_list("pk", "requested_by_id")
        )
    now = now or timezone.now()
    WebhookDelivery.objects.bulk_create(
        _pending_delivery(now, event_id=event.pk, subscription_id=sub.pk)
        for event in events
        for sub in subscriptions
        if wants(
            sub,
            event.type,
            event.requested_by_id or requesters.get(event.job_id or event.batch_id),
            sub.reaches_all,
        )
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
        # The active subscriptions, each one's reach once (not once per event and
        # subscription, as the planner would if the subquery were merged into the join).
        f"WITH s AS MATERIALIZED (SELECT s.id, s.event_types, s.all_event_types, "
        f"s.created_by_id, {reaches_all_sql('s')} AS reaches_all "
        f"FROM {table(WebhookSubscription)} s WHERE s.active) "
        f"SELECT e.id, s.id, t.* FROM {events} e JOIN {jobs} j ON j.id = e.job_id "
        # `wants`: every type when chosen explicitly, else the listed ones; a job its owner
        # may see.
        "JOIN s ON (s.all_event_types OR jsonb_exists(s.event_types, e.type)) "
        "AND (s.reaches_all OR s.created_by_id IS NOT DISTINCT FROM j.requested_by_id) "
        f"CROSS JOIN ({select_rows(WebhookDelivery, fields)}) t "
        "RETURNING id"
    )


def fan_out_values(now) -> str:
    return json_rows([_pending_delivery(now)], _delivery_value_fields())


def _pending_delivery(now, **relations) -> WebhookDelivery:
    return instance(WebhookDelivery, next_attempt_at=now, created_at=now, **relations)


def with_job_trace(deliveries: QuerySet[WebhookDelivery]) -> QuerySet[WebhookDelivery]:
    """With tracing on, each delivery with its job's `traceparent` (`job_traceparent`), so that
    its POST joins the job's trace; off, the query is as it was."""
    if not tracing.enabled():
        return deliveries
    return deliveries.annotate(job_traceparent=F("event__job__traceparent"))


def deliver(delivery_id: int) -> str:
    """Make one attempt now; record its outcome. Returns the delivery's state afterwards."""
    delivery = (
        with_job_trace(WebhookDelivery.objects.select_related("event", "subscription"))
        .filter(pk=delivery_id, state=DeliveryState.PENDING)
        .first()
    )
    if delivery is None:
        return "gone"
    return record_attempt(delivery, send(delivery))


def _error(outcome: Outcome) -> str:
    return outcome.error or ("" if is_delivered(outcome.status) else f"HTTP {outcome.status}")


def _attempt_changes(
    delivery: WebhookDelivery, outcome: Outcome, held_until, now
) -> dict[str, Any]:
    """What one attempt's outcome changes (`record_attempt`)."""
    status = outcome.status
    first_failed_at = delivery.first_failed_at or now
    attempts = delivery.attempts + (held_until is None or is_delivered(status))
    changes: dict[str, Any] = {
        "claimed_until": None,
        "attempts": attempts,
        "last_status_code": status,
        "last_response_excerpt": outcome.excerpt,
        "last_error": _error(outcome),
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
    return changes


def _attempt_row(delivery: WebhookDelivery, outcome: Outcome, now) -> DeliveryAttempt:
    return instance(
        DeliveryAttempt,
        delivery_id=delivery.pk,
        attempted_at=outcome.attempted_at or now,
        status_code=outcome.status,
        error=_error(outcome),
        response_excerpt=outcome.excerpt,
        duration_ms=outcome.duration_ms,
    )


def record_attempt(
    delivery: WebhookDelivery,
    outcome: Outcome | tuple,
    held_until: datetime | None = None,
) -> str:
    """Record one attempt's outcome: the delivery's row and, in the same transaction, a
    `DeliveryAttempt`. Returns the delivery's state afterwards. A failure is retried on
    `RETRY_SCHEDULE`; `held_until` (the receiver's circuit is open) means it was not this
    delivery's fault: it is not counted and waits for the circuit. Either way a delivery still
    failing `RETRY_WINDOW` after its first failure is dead."""
    outcome, now = Outcome(*outcome), timezone.now()
    changes = _attempt_changes(delivery, outcome, held_until, now)
    with transaction.atomic():
        # Compare-and-set on the attempt count: a duplicate sender's outcome changes nothing
        # (its POST is still logged: the receiver got it).
        WebhookDelivery.objects.filter(
            pk=delivery.pk, state=DeliveryState.PENDING, attempts=delivery.attempts
        ).update(**changes)
        _attempt_row(delivery, outcome, now).save(force_insert=True)
    return changes.get("state", DeliveryState.PENDING)


RECORDED_FIELDS = (
    "claimed_until",
    "attempts",
    "last_status_code",
    "last_response_excerpt",
    "last_error",
    "state",
    "delivered_at",
    "next_attempt_at",
    "first_failed_at",
)


def deliveries_record(attempts: list[tuple[WebhookDelivery, tuple, datetime | None]]) -> None:
    """Record a lane round's outcomes (delivery, outcome, held_until), each as `record_attempt`
    records one, with the same compare-and-set: on PostgreSQL in one statement (the attempts'
    rows inserted by a CTE of the deliveries' UPDATE), which costs the lane's process a
    fraction of an ORM update each.

    One delivery's fault never fails its neighbours' record: if the round's statement fails,
    each is recorded alone, and one whose own record fails too is ended (`_record_alone`)."""
    if connection.vendor != "postgresql":
        for delivery, outcome, held_until in attempts:
            _record_alone(delivery, outcome, held_until)
        return
    # A savepoint only inside a caller's transaction (the statement alone is atomic), so that
    # a failed statement leaves it usable for the one-by-one records.
    atomic = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    try:
        with atomic:
            _record_round(attempts)
    except DATABASE_DOWN:
        raise
    except Exception:
        logger.exception(
            "webhook deliveries: a round's record failed; recording its %d one by one",
            len(attempts),
        )
        DELIVERY_ERRORS.labels("record").inc()
        for delivery, outcome, held_until in attempts:
            _record_alone(delivery, outcome, held_until)


def _record_alone(delivery: WebhookDelivery, outcome: tuple, held_until: datetime | None) -> None:
    """`record_attempt`, or if even that fails (what the outcome says cannot be stored), the
    delivery ended: dead, with an error saying why, so that it cannot fail another round."""
    try:
        record_attempt(delivery, outcome, held_until)
    except DATABASE_DOWN:
        raise
    except Exception:
        logger.exception(
            "webhook delivery %s: its attempt %r cannot be recorded; ending it",
            delivery.pk,
            tuple(outcome),
        )
        DELIVERY_ERRORS.labels("ended").inc()
        WebhookDelivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING).update(
            state=DeliveryState.DEAD,
            claimed_until=None,
            next_attempt_at=None,
            last_error="Unrecordable: this attempt's outcome could not be stored, so the "
            "delivery was ended (redeliver it to send it again)",
        )


def _record_round(attempts: list[tuple[WebhookDelivery, tuple, datetime | None]]) -> None:
    now, recorded, logged = timezone.now(), [], []
    for delivery, outcome, held_until in attempts:
        outcome = Outcome(*outcome)
        after = copy.copy(delivery)
        for name, value in _attempt_changes(delivery, outcome, held_until, now).items():
            setattr(after, name, value)
        recorded.append(after)
        logged.append(_attempt_row(delivery, outcome, now))
    ids = [delivery.pk for delivery, _outcome, _held in attempts]
    with connection.cursor() as cursor:
        cursor.execute(
            _recorded_statement(),
            [
                json_rows(logged, insert_fields(DeliveryAttempt)),
                ids,
                json_rows(recorded, _recorded_fields()),
                ids,
                [delivery.attempts for delivery, _outcome, _held in attempts],
                ids,
                DeliveryState.PENDING,
            ],
        )


def _recorded_fields() -> tuple:
    meta = WebhookDelivery._meta
    return (meta.pk, *(meta.get_field(name) for name in RECORDED_FIELDS))


@functools.cache
def _recorded_statement() -> str:
    fields = _recorded_fields()
    logged = insert_fields(DeliveryAttempt)
    delivery = quote(DeliveryAttempt._meta.get_field("delivery").column)
    deliveries = table(WebhookDelivery)
    sets = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in fields[1:])
    # The deliveries' rows are found by their ids (`id = ANY`), and the outcomes are joined to
    # the attempt counts they were sent at before the UPDATE (a materialized CTE, which the
    # planner counts right): otherwise, it scanned every pending delivery (a backlog's) or the
    # whole table, and compared every outcome with every row.
    return (
        # Every POST is logged, a duplicate sender's too; a delivery deleted meanwhile is not.
        f"WITH logged AS (INSERT INTO {table(DeliveryAttempt)} ({columns(logged)}) "
        f"SELECT a.* FROM ({select_rows(DeliveryAttempt, logged)}) a "
        f"WHERE a.{delivery} IN (SELECT id FROM {deliveries} WHERE id = ANY(%s::bigint[]))), "
        f"v AS MATERIALIZED (SELECT t.*, p.attempts AS sent_at "
        f"FROM ({select_rows(WebhookDelivery, fields)}) t "
        "JOIN unnest(%s::bigint[], %s::bigint[]) p(id, attempts) ON p.id = t.id) "
        f"UPDATE {deliveries} d SET {sets} FROM v "
        "WHERE d.id = ANY(%s::bigint[]) AND d.id = v.id AND d.state = %s "
        "AND d.attempts = v.sent_at"
    )


def _rescheduled(now) -> dict[str, Any]:
    """A delivery made pending again, due now, with a fresh retry schedule (its attempts
    counted from zero; its attempt log keeps the earlier ones)."""
    return {
        "state": DeliveryState.PENDING,
        "attempts": 0,
        "first_failed_at": None,
        "delivered_at": None,
        "next_attempt_at": now,
        "claimed_until": None,
        "last_error": "",
    }


def delivery_retry(*, queryset) -> int:
    """Give dead deliveries a fresh schedule, due now (the admin action and the command)."""
    with transaction.atomic():
        return queryset.filter(state=DeliveryState.DEAD).update(**_rescheduled(timezone.now()))


def delivery_redeliver(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again, whatever its state (an API client's redeliver): dead, delivered
    or pending, it is pending and due now with a fresh schedule. At least once: a pending one
    being sent at this moment may reach the receiver twice."""
    changes = _rescheduled(timezone.now())
    WebhookDelivery.objects.filter(pk=delivery.pk).update(**changes)
    for name, value in changes.items():
        setattr(delivery, name, value)
    return delivery


def deliveries_claim_due(
    *, limit: int, lease: timedelta
) -> tuple[list[WebhookDelivery], dict[int, ReceiverHealth]]:
    """Claim up to `limit` due deliveries: those to send now are claimed for a lease (so that
    nobody else sends them meanwhile); those of a receiver whose circuit holds them wait until
    it may be called again. Returns those to send, and the receivers' circuits as found."""
    now = timezone.now()
    with transaction.atomic():
        due = WebhookDelivery.objects.filter(
            Q(claimed_until__isnull=True) | Q(claimed_until__lte=now),
            state=DeliveryState.PENDING,
            next_attempt_at__lte=now,
        )
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        # The ids first, then their rows with their events: a join in the same statement
        # would read every due delivery's event before the limit (a backlog's, once a
        # receiver is back), where this reads `limit` of them.
        ids = list(due.order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
        claimed = list(
            with_job_trace(WebhookDelivery.objects.select_related("event"))
            .filter(pk__in=ids)
            .order_by("next_attempt_at")
        )
        subscriptions = WebhookSubscription.objects.in_bulk({d.subscription_id for d in claimed})
        by_receiver = defaultdict(list)
        for delivery in claimed:
            delivery.subscription = subscriptions[delivery.subscription_id]
            by_receiver[delivery.subscription_id].append(delivery)
        health = ReceiverHealth.objects.in_bulk(list(by_receiver))
        to_send = []
        for receiver, deliveries in by_receiver.items():
            gate = circuit_gate(health.get(receiver), now)
            if gate.hold_until is None:
                to_send += deliveries
                continue
            to_send += deliveries[:1] if gate.probe else []
            held = deliveries[1:] if gate.probe else deliveries
            WebhookDelivery.objects.filter(pk__in=[d.pk for d in held]).update(
                next_attempt_at=gate.hold_until
            )
        WebhookDelivery.objects.filter(pk__in=[d.pk for d in to_send]).update(
            claimed_until=now + lease
        )
    return to_send, health


def deliveries_release(receiver: int):
    """For a receiver's circuit: what releases the deliveries it held until `held_until`."""

    def release(held_until: datetime) -> None:
        WebhookDelivery.objects.filter(
            subscription_id=receiver, state=DeliveryState.PENDING, next_attempt_at=held_until
        ).update(next_attempt_at=timezone.now())

    return release
