"""The webhook delivery lane: deliveries never go through the job broker, so a backlog of them,
or a receiver that is down or never answers, holds no job work.

Each round of the lane claims due deliveries (`SELECT … FOR UPDATE SKIP LOCKED`, so several
dispatchers never send one twice at once), holds those whose receiver's circuit is open or
paused (one goes as the probe, see `jobtracking.services.circuits`), POSTs the rest through up
to `WEBHOOK_CONCURRENCY` senders, records each attempt (the deliveries' rows and a
`DeliveryAttempt` each, in one statement) and reports each receiver's outcomes to its circuit.
A new delivery is due at once and is sent within `WEBHOOK_LANE_IDLE_SECONDS`, the lane's wait
after a round that was not full; a claimed delivery whose sender died is due again after the
dispatch lease.

The lane is a child process of its dispatcher, at a lower CPU priority
(`WEBHOOK_LANE_NICENESS`): on a machine short of CPU, job work goes first and deliveries take
what is left (they catch up when the jobs pause), and the lane's Python never competes with the
dispatcher's claims for one interpreter lock. Linux weighs niceness only among the processes of
one autogroup, which it makes per session: a dispatcher and its workers started in sessions of
their own (`make run`, a terminal each) share the CPU as equals whatever their niceness. So the
lane leads a session of its own and gives its group the same niceness, where the kernel has
autogroups; under a cgroup (systemd, a container) its niceness counts within the dispatcher's.

One delivery's fault is its own: what goes wrong while building or sending it (its body, its
subscription's settings, a bug) is its failed attempt, not counted against its receiver's
circuit (`_attempt`); a round's record that fails is made one by one (`deliveries_record`). Any
other error a round meets is logged and counted, and the next round follows after a short
backoff; a lane that ends all the same is started again by its dispatcher.
"""

import contextlib
import functools
import logging
import multiprocessing
import os
import signal
from collections import defaultdict, deque
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, connections

from jobtracking.infra.metrics import DELIVERY_ERRORS, LOOP_ERRORS
from jobtracking.models import ReceiverHealth, WebhookDelivery, WebhookSubscription
from jobtracking.services.circuits import Tally, circuits_report
from jobtracking.services.deliveries import (
    deliveries_claim_due,
    deliveries_record,
    deliveries_release,
)
from jobtracking.webhooks import transport
from jobtracking.webhooks.sending import (
    Outcome,
    Receiver,
    is_delivered,
    is_receiver_down,
    send,
    unsendable,
)

logger = logging.getLogger(__name__)

# A round adds a sender when none of its POSTs has finished for this long (`_sent`).
SENDER_RAMP_SECONDS = 0.005
# After a round that failed: this, doubled each time in a row, at most `BACKOFF_MAX_SECONDS`.
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 10.0


def deliveries_send_due(*, limit: int, lease: timedelta) -> int:
    """One round of the lane; returns how many deliveries it sent."""
    deliveries, health = deliveries_claim_due(limit=limit, lease=lease)
    # Each receiver's secret and SSRF check once a round, on the pool: a named host's resolves.
    subscriptions = {d.subscription_id: d.subscription for d in deliveries}
    found = _pool().map(_receiver, subscriptions.values())
    receivers = dict(zip(subscriptions, found, strict=True))
    outcomes = _sent(deliveries, receivers)
    tallies = defaultdict(Tally)
    for delivery, outcome in zip(deliveries, outcomes, strict=True):
        if outcome.unsendable:
            continue  # ours, not the receiver's: its circuit hears nothing of it
        if is_receiver_down(outcome.status):
            tallies[delivery.subscription_id].failed(str(delivery.pk), outcome.error)
        elif is_delivered(outcome.status):
            tallies[delivery.subscription_id].successes += 1
    holding = circuits_report(ReceiverHealth, tallies, health, deliveries_release)
    deliveries_record(
        [
            (
                delivery,
                outcome,
                None if outcome.unsendable else holding.get(delivery.subscription_id),
            )
            for delivery, outcome in zip(deliveries, outcomes, strict=True)
        ]
    )
    return len(deliveries)


def _receiver(subscription: WebhookSubscription) -> Receiver | Exception:
    """The subscription as this round's POSTs need it, or why it cannot be (a URL its guard
    cannot even read, say): its deliveries' failed attempts, not the round's."""
    try:
        return Receiver(subscription)
    except Exception as error:
        _delivery_error("subscription %s cannot be sent to", subscription.pk)
        return error


def _attempt(delivery: WebhookDelivery, receiver: Receiver | Exception) -> Outcome:
    """One delivery's POST; whatever fails on our side is its own failed attempt."""
    if isinstance(receiver, Exception):  # logged once, by `_receiver`
        return unsendable(receiver)
    try:
        return send(delivery, receiver)
    except Exception as error:
        _delivery_error("delivery %s cannot be sent", delivery.pk)
        return unsendable(error)


def _delivery_error(message: str, *args) -> None:
    logger.exception(f"delivery lane: {message}", *args)
    DELIVERY_ERRORS.labels("send").inc()


def _sent(
    deliveries: list[WebhookDelivery], receivers: dict[int, Receiver | Exception]
) -> list[Outcome]:
    """Each delivery's outcome, POSTed by up to `WEBHOOK_CONCURRENCY` threads taking them in
    turn (a future each cost the lane about as much CPU as its POST). Another sender is added
    only when no POST has finished in the last `SENDER_RAMP_SECONDS`: a receiver that answers
    at once is served by one sender (each more costs the lane's CPU in thread switches, not its
    time), slow ones get up to all of them within a few tens of milliseconds."""
    waiting, outcomes = deque(enumerate(deliveries)), [None] * len(deliveries)

    def send_waiting() -> None:
        while True:
            try:
                index, delivery = waiting.popleft()
            except IndexError:  # none left
                return
            outcomes[index] = _attempt(delivery, receivers[delivery.subscription_id])

    senders, finished = [_pool().submit(send_waiting)], 0
    while waiting and len(senders) < settings.WEBHOOK_CONCURRENCY:
        futures.wait(senders, timeout=SENDER_RAMP_SECONDS, return_when=futures.FIRST_COMPLETED)
        finished_before, finished = finished, len(outcomes) - outcomes.count(None)
        if waiting and finished == finished_before:
            senders.append(_pool().submit(send_waiting))
    for sender in senders:
        sender.result()
    return outcomes


def backoff(failures: int) -> float:
    """The wait after `failures` failed rounds in a row."""
    return min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** (failures - 1))


def _lower_priority(niceness: int) -> None:
    """This process's niceness, and its autogroup's (see the module's docstring)."""
    os.setsid()
    # Absent without autogroups; refused if another process set one within 0.1 s.
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text(str(niceness))
    os.nice(niceness)


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max_workers=settings.WEBHOOK_CONCURRENCY, thread_name_prefix="webhook"
    )


class DeliveryLane:
    """The lane's process: rounds back to back while deliveries are due, a short sleep when
    none is; a round that fails (a database outage, a bug) ridden out with capped backoff. It
    ends when its dispatcher asks or dies."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self.stopping = context.Event()
        self.process = context.Process(target=self._run, name="delivery-lane", daemon=True)

    def start(self) -> None:
        connections.close_all()  # the child opens its own; a shared socket would be corrupted
        self.process.start()

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: float) -> None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()

    def is_alive(self) -> bool:
        return self.process.is_alive()

    def _run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)  # the dispatcher stops the lane
        _lower_priority(settings.WEBHOOK_LANE_NICENESS)
        self.rounds(dispatcher=os.getppid())

    def rounds(self, *, dispatcher: int) -> None:
        """Rounds until asked to stop or `dispatcher` is gone. A round that fails is logged
        (and counted, unless the database failed) and followed by another after a backoff; the
        deliveries it claimed go again once their lease has run out."""
        lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
        failures = 0
        while not self.stopping.is_set() and os.getppid() == dispatcher:
            try:
                sent = deliveries_send_due(limit=settings.WEBHOOK_LANE_BATCH_SIZE, lease=lease)
                failures = 0
                transport.close_expired()
                if sent < settings.WEBHOOK_LANE_BATCH_SIZE:
                    # Caught up: the next round takes what comes meanwhile, so that a steady
                    # flow goes in few full rounds rather than many of a delivery or two.
                    self.stopping.wait(settings.WEBHOOK_LANE_IDLE_SECONDS)
                continue
            except DatabaseError as error:
                failures += 1
                wait = backoff(failures)
                logger.warning("delivery lane: database error (%s); retrying in %.1fs", error, wait)
            except Exception:
                failures += 1
                wait = backoff(failures)
                logger.exception("delivery lane: a round failed; retrying in %.1fs", wait)
                LOOP_ERRORS.labels("delivery_lane").inc()
            connection.close()  # whatever state the failure left it in
            self.stopping.wait(wait)
        connection.close()
