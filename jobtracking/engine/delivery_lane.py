"""The webhook delivery lane: deliveries never go through the job broker, so a backlog of them,
or a receiver that is down or never answers, holds no job work.

The lane is a thread of every dispatcher process. Each round claims due deliveries (`SELECT …
FOR UPDATE SKIP LOCKED`, so several dispatchers never send one twice at once), holds those whose
receiver's circuit is open or paused (one goes as the probe, see
`jobtracking.services.circuits`), POSTs the rest at once through a bounded pool, records each
attempt (the deliveries' rows and a `DeliveryAttempt` each, in one statement) and reports each
receiver's outcomes to its circuit. A new delivery is due at once and is sent within
`WEBHOOK_LANE_IDLE_SECONDS`; a claimed delivery whose sender died is due again after the
dispatch lease.
"""

import functools
import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection

from jobtracking.models import ReceiverHealth
from jobtracking.services.circuits import Tally, circuits_report
from jobtracking.services.deliveries import (
    deliveries_claim_due,
    deliveries_record,
    deliveries_release,
)
from jobtracking.webhooks import is_delivered, is_receiver_down, send

logger = logging.getLogger(__name__)


def deliveries_send_due(*, limit: int, lease: timedelta) -> int:
    """One round of the lane; returns how many deliveries it sent."""
    deliveries, health = deliveries_claim_due(limit=limit, lease=lease)
    outcomes = list(_pool().map(send, deliveries))
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


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max_workers=settings.WEBHOOK_CONCURRENCY, thread_name_prefix="webhook"
    )


class DeliveryLane(threading.Thread):
    """The lane's loop, beside a dispatcher's: rounds back to back while deliveries are due,
    a short sleep when none is; database outages ridden out with capped backoff."""

    def __init__(self, stopping: threading.Event) -> None:
        super().__init__(name="delivery-lane", daemon=True)
        self.stopping = stopping

    def run(self) -> None:
        lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
        failures = 0
        while not self.stopping.is_set():
            try:
                sent = deliveries_send_due(limit=settings.WEBHOOK_LANE_BATCH_SIZE, lease=lease)
                failures = 0
                if not sent:
                    self.stopping.wait(settings.WEBHOOK_LANE_IDLE_SECONDS)
            except DatabaseError as error:
                failures += 1
                wait = min(10.0, 0.5 * 2**failures)
                logger.warning("delivery lane: database error (%s); retrying in %.1fs", error, wait)
                connection.close()
                time.sleep(wait)
        connection.close()
