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

from jobtracking.models import ReceiverHealth, WebhookDelivery
from jobtracking.services.circuits import Tally, circuits_report
from jobtracking.services.deliveries import (
    deliveries_claim_due,
    deliveries_record,
    deliveries_release,
)
from jobtracking.webhooks import Outcome, Receiver, is_delivered, is_receiver_down, send

logger = logging.getLogger(__name__)

# A round adds a sender when none of its POSTs has finished for this long (`_sent`).
SENDER_RAMP_SECONDS = 0.005


def deliveries_send_due(*, limit: int, lease: timedelta) -> int:
    """One round of the lane; returns how many deliveries it sent."""
    deliveries, health = deliveries_claim_due(limit=limit, lease=lease)
    # Each receiver's secret and SSRF check once a round, on the pool: a named host's resolves.
    subscriptions = {d.subscription_id: d.subscription for d in deliveries}
    found = _pool().map(Receiver, subscriptions.values())
    receivers = dict(zip(subscriptions, found, strict=True))
    outcomes = _sent(deliveries, receivers)
    tallies = defaultdict(Tally)
    for delivery, outcome in zip(deliveries, outcomes, strict=True):
        if is_receiver_down(outcome.status):
            tallies[delivery.subscription_id].failed(str(delivery.pk), outcome.error)
        elif is_delivered(outcome.status):
            tallies[delivery.subscription_id].successes += 1
    holding = circuits_report(ReceiverHealth, tallies, health, deliveries_release)
    deliveries_record(
        [
            (delivery, outcome, holding.get(delivery.subscription_id))
            for delivery, outcome in zip(deliveries, outcomes, strict=True)
        ]
    )
    return len(deliveries)


def _sent(deliveries: list[WebhookDelivery], receivers: dict[int, Receiver]) -> list[Outcome]:
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
            outcomes[index] = send(delivery, receivers[delivery.subscription_id])

    senders, finished = [_pool().submit(send_waiting)], 0
    while waiting and len(senders) < settings.WEBHOOK_CONCURRENCY:
        futures.wait(senders, timeout=SENDER_RAMP_SECONDS, return_when=futures.FIRST_COMPLETED)
        finished_before, finished = finished, len(outcomes) - outcomes.count(None)
        if waiting and finished == finished_before:
            senders.append(_pool().submit(send_waiting))
    for sender in senders:
        sender.result()
    return outcomes


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
    none is; database outages ridden out with capped backoff. It ends when its dispatcher asks
    or dies."""

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

    def _run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)  # the dispatcher stops the lane
        _lower_priority(settings.WEBHOOK_LANE_NICENESS)
        dispatcher = os.getppid()
        lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
        failures = 0
        while not self.stopping.is_set() and os.getppid() == dispatcher:
            try:
                sent = deliveries_send_due(limit=settings.WEBHOOK_LANE_BATCH_SIZE, lease=lease)
                failures = 0
                if sent < settings.WEBHOOK_LANE_BATCH_SIZE:
                    # Caught up: the next round takes what comes meanwhile, so that a steady
                    # flow goes in few full rounds rather than many of a delivery or two.
                    self.stopping.wait(settings.WEBHOOK_LANE_IDLE_SECONDS)
            except DatabaseError as error:
                failures += 1
                wait = min(10.0, 0.5 * 2**failures)
                logger.warning("delivery lane: database error (%s); retrying in %.1fs", error, wait)
                connection.close()
                self.stopping.wait(wait)
        connection.close()
