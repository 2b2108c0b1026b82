"""The dispatcher hands out all job work. It claims jobs whose due_at has passed and enqueues
one `process_jobs` task per batch of one extractor's jobs, and likewise a task per webhook
delivery whose retry is due. A new job wakes it at once (PostgreSQL `NOTIFY`, see
`jobtracking.wakeup`); otherwise it looks every `JOBS_DISPATCH_IDLE_SECONDS`.

Claiming uses `SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL, so several dispatchers on several
machines never claim the same job, and the query walks the partial index of active jobs' due_at,
so its cost follows the number of due jobs, not the size of the table. On SQLite, where there is
no row locking, run a single dispatcher.
"""

import logging
import os
import signal
import socket
import time
from collections import defaultdict
from datetime import timedelta
from functools import partial
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker

from jobtracking import states
from jobtracking.models import DeliveryState, ExtractionJob, WebhookDelivery
from jobtracking.queue import enqueue_batch, enqueue_delivery
from jobtracking.tasks import beat
from jobtracking.wakeup import Listener

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_SECONDS = 5.0


def claim_due_jobs(*, batch_size: int, lease: timedelta) -> list[UUID]:
    """Claim up to `batch_size` due jobs (oldest due first), push their due_at a lease ahead and
    mark them claimed, in one transaction; once it has committed, enqueue one task per
    `JOBS_TASK_BATCH_SIZE` jobs of one extractor."""
    now = timezone.now()
    with transaction.atomic():
        due = ExtractionJob.objects.filter(status__in=sorted(states.ACTIVE), due_at__lte=now)
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        rows = list(due.order_by("due_at").values_list("pk", "extractor_id")[:batch_size])
        if rows:
            ids = [pk for pk, _ in rows]
            ExtractionJob.objects.filter(pk__in=ids).update(claimed_at=now, due_at=now + lease)
            transaction.on_commit(partial(enqueue_batches, rows))
    return [pk for pk, _ in rows]


def enqueue_batches(rows: list[tuple[UUID, int]]) -> None:
    by_extractor = defaultdict(list)
    for pk, extractor_id in rows:
        by_extractor[extractor_id].append(pk)
    size = settings.JOBS_TASK_BATCH_SIZE
    for ids in by_extractor.values():
        for start in range(0, len(ids), size):
            enqueue_batch(ids[start : start + size])


def claim_due_deliveries(*, batch_size: int, lease: timedelta) -> list[int]:
    """The same for webhook deliveries whose next attempt is due."""
    now = timezone.now()
    with transaction.atomic():
        due = WebhookDelivery.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lte=now)
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        ids = list(due.order_by("next_attempt_at").values_list("pk", flat=True)[:batch_size])
        if ids:
            WebhookDelivery.objects.filter(pk__in=ids).update(next_attempt_at=now + lease)
            transaction.on_commit(lambda: [enqueue_delivery(pk) for pk in ids])
    return ids


def dispatch_once() -> int:
    """One claim round for due jobs and webhook retries: a django-q2 schedule runs it every
    minute as a safety net for a deployment whose dispatcher is down."""
    lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
    batch = settings.JOBS_DISPATCH_BATCH_SIZE
    jobs = claim_due_jobs(batch_size=batch, lease=lease)
    return len(jobs) + len(claim_due_deliveries(batch_size=batch, lease=lease))


class Dispatcher:
    """The `run_dispatcher` loop: claim, enqueue, sleep when idle, survive database outages."""

    def __init__(self, *, batch_size: int | None = None, idle: float | None = None) -> None:
        self.batch_size = batch_size or settings.JOBS_DISPATCH_BATCH_SIZE
        self.idle = settings.JOBS_DISPATCH_IDLE_SECONDS if idle is None else idle
        self.gather = settings.JOBS_DISPATCH_GATHER_SECONDS
        self.broker = get_broker()
        self.lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
        self.name = f"dispatcher@{socket.gethostname()}:{os.getpid()}"
        self.stopping = False
        self.claimed_total = 0
        self.last_beat = 0.0

    def stop(self, *_args) -> None:
        self.stopping = True

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        listener = Listener()
        failures = 0
        while not self.stopping:
            try:
                claimed = self.tick()
                if claimed < self.batch_size and listener.wait(self.idle):
                    # Woken by a new job: let the jobs created alongside it join its batch.
                    time.sleep(self.gather)
                failures = 0
            except DatabaseError as error:
                # PostgreSQL restarted or unreachable: drop the broken connection and retry
                # with capped backoff; nothing was claimed by the failed transaction.
                failures += 1
                wait = min(10.0, 0.5 * 2**failures)
                logger.warning("dispatcher: database error (%s); retrying in %.1fs", error, wait)
                close_old_connections()
                connection.close()
                time.sleep(wait)

    def tick(self) -> int:
        claimed = 0
        # Back-pressure: claim no further ahead of the workers than a few batches. Claims beyond
        # that would only wait in the broker, and expire (and be handed out again) if the wait
        # outlasts their lease; new work would queue behind them.
        if self.broker.queue_size() < settings.JOBS_DISPATCH_MAX_QUEUED_TASKS:
            claimed = len(claim_due_jobs(batch_size=self.batch_size, lease=self.lease))
        claimed += len(claim_due_deliveries(batch_size=self.batch_size, lease=self.lease))
        self.claimed_total += claimed
        if time.monotonic() - self.last_beat >= HEARTBEAT_EVERY_SECONDS:
            beat("dispatcher", self.name, claimed_total=self.claimed_total)
            self.last_beat = time.monotonic()
        return claimed
