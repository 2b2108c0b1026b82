"""The dispatcher hands out all job work. It claims jobs whose due_at has passed and enqueues
one `process_jobs` task per batch of one extractor's jobs. Beside it, a child process runs the
webhook delivery lane (`jobtracking.engine.delivery_lane`), which never goes through the broker
(and which the dispatcher starts again if it ends unasked). Whatever error a round meets, the
loop logs it and goes on after a short backoff.
A new job wakes it at once (PostgreSQL `NOTIFY`, see `jobtracking.infra.wakeup`); otherwise it
looks every `JOBS_DISPATCH_IDLE_SECONDS`.

Claiming uses `SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL, so several dispatchers on several
machines never claim the same job, and the queries walk a partial index of active jobs by
(priority, requester, due_at), so their cost follows the number of due jobs and of clients, not
the size of the table. On SQLite, where there is
no row locking, run a single dispatcher.
"""

import logging
import os
import signal
import socket
import time
from collections import defaultdict
from datetime import timedelta
from functools import cached_property, partial
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker

from jobtracking import states
from jobtracking.engine.delivery_lane import DeliveryLane, backoff, deliveries_send_due
from jobtracking.infra import tracing
from jobtracking.infra.metrics import LANE_RESTARTS, LOOP_ERRORS
from jobtracking.infra.queue import enqueue_batch
from jobtracking.infra.wakeup import Listener
from jobtracking.models import (
    REQUESTER_KEY,
    ExtractionJob,
    ServiceHeartbeat,
    status_in,
)
from jobtracking.priorities import round_robin, split
from jobtracking.services.engine import jobs_claim
from jobtracking.services.housekeeping import heartbeat_record

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_SECONDS = 5.0
BACKPRESSURE_POLL_SECONDS = 0.05
# A lane round still waiting for its POSTs then is cut short: its deliveries go again after the
# dispatch lease.
LANE_STOP_SECONDS = 5.0
# A lane that ended unasked is started again, at most this often (one that cannot start does
# not make the dispatcher fork in a loop).
LANE_RESTART_SECONDS = 1.0
# Each cluster says how many workers it has (heartbeats of this kind, see `run_cluster`).
WORKERS = "workers"
WORKERS_BEAT_SECONDS = 10.0


def claim_due_jobs(*, batch_size: int, lease: timedelta) -> list[UUID]:
    """Claim up to `batch_size` due jobs, push their due_at a lease ahead and mark them claimed,
    in one transaction; once it has committed, enqueue one task per `JOBS_TASK_BATCH_SIZE` jobs
    of one extractor.

    Which jobs: priority first, with the lower priorities' reserved share (`priorities.split`);
    within a priority, the clients in turn, each one's jobs oldest due first."""
    now = timezone.now()
    with transaction.atomic():
        queues = defaultdict(list)
        for priority, requester in active_queues():
            due = ExtractionJob.objects.annotate(requester=REQUESTER_KEY).filter(
                status_in(states.DISPATCHED),
                priority=priority,
                requester=requester,
                due_at__lte=now,
            )
            if connection.features.has_select_for_update_skip_locked:
                due = due.select_for_update(skip_locked=True, of=("self",))
            if rows := list(due.order_by("due_at").values_list("pk", "extractor_id")[:batch_size]):
                queues[priority].append(rows)
        fair = {priority: round_robin(lists) for priority, lists in queues.items()}
        grants = split(batch_size, {priority: len(rows) for priority, rows in fair.items()})
        rows = [row for priority in sorted(fair) for row in fair[priority][: grants[priority]]]
        if rows:
            ids = [pk for pk, _ in rows]
            jobs_claim(ids, now=now, lease=lease)
            transaction.on_commit(partial(enqueue_batches, rows))
    return [pk for pk, _ in rows]


# The (priority, requester) pairs that have jobs the dispatcher works on (`states.DISPATCHED`), by
# a skip scan of `job_due_fair_idx`: each step finds the next pair with one index probe, so the
# cost follows the number of pairs (a few clients times three priorities), not the number of jobs.
# A pair travels as one number, priority * 2**32 + requester, because a scalar subquery returns
# one column.
ACTIVE_QUEUES_SQL = """
WITH RECURSIVE pairs(k) AS (
    SELECT (SELECT priority * 4294967296 + COALESCE(requested_by_id, 0) FROM {table}
            WHERE status_id IN ({active}) ORDER BY priority, COALESCE(requested_by_id, 0) LIMIT 1)
  UNION ALL
    SELECT (SELECT j.priority * 4294967296 + COALESCE(j.requested_by_id, 0) FROM {table} j
            WHERE j.status_id IN ({active})
              AND (j.priority, COALESCE(j.requested_by_id, 0)) > (k / 4294967296, k %% 4294967296)
            ORDER BY j.priority, COALESCE(j.requested_by_id, 0) LIMIT 1)
    FROM pairs WHERE k IS NOT NULL
)
SELECT k / 4294967296, k %% 4294967296 FROM pairs WHERE k IS NOT NULL
"""


def active_queues() -> list[tuple[int, int]]:
    dispatched = sorted(states.DISPATCHED)
    sql = ACTIVE_QUEUES_SQL.format(
        table=connection.ops.quote_name(ExtractionJob._meta.db_table),
        active=", ".join(["%s"] * len(dispatched)),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, dispatched * 2)
        return [(int(priority), int(requester)) for priority, requester in cursor.fetchall()]


def enqueue_batches(rows: list[tuple[UUID, int]]) -> None:
    by_extractor = defaultdict(list)
    for pk, extractor_id in rows:
        by_extractor[extractor_id].append(pk)
    size = settings.JOBS_TASK_BATCH_SIZE
    for ids in by_extractor.values():
        for start in range(0, len(ids), size):
            enqueue_batch(ids[start : start + size])


def dispatch_once() -> int:
    """One claim round for due jobs and one round of the delivery lane: a django-q2 schedule
    runs it every minute as a safety net for a deployment whose dispatcher is down."""
    lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
    jobs = claim_due_jobs(batch_size=settings.JOBS_DISPATCH_BATCH_SIZE, lease=lease)
    return len(jobs) + deliveries_send_due(limit=settings.WEBHOOK_LANE_BATCH_SIZE, lease=lease)


class Dispatcher:
    """The `run_dispatcher` loop: claim, enqueue, sleep when idle, survive database outages."""

    def __init__(self, *, batch_size: int | None = None, idle: float | None = None) -> None:
        self.batch_size = batch_size or settings.JOBS_DISPATCH_BATCH_SIZE
        self.idle = settings.JOBS_DISPATCH_IDLE_SECONDS if idle is None else idle
        self.gather = settings.JOBS_DISPATCH_GATHER_SECONDS
        self.lease = timedelta(seconds=settings.JOBS_DISPATCH_LEASE_SECONDS)
        self.name = f"dispatcher@{socket.gethostname()}:{os.getpid()}"
        self.stopping = False
        self.lane = DeliveryLane()
        self.lane_started_at = 0.0
        self.claimed_total = 0
        self.last_beat = 0.0
        self.held_back = False
        self.depth = settings.JOBS_DISPATCH_QUEUED_PER_WORKER

    @cached_property
    def broker(self):
        """django-q2's broker, made at first use: making it connects, so a dispatcher started
        during a database outage retries like any round that meets one (not cached until made)."""
        return get_broker()

    def stop(self, *_args) -> None:
        self.stopping = True
        self.lane.stop()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        # Webhook deliveries in their own lane: a backlog of them never holds job claims.
        self.start_lane()
        listener = Listener()
        failures = 0
        while not self.stopping:
            try:
                # Its rounds follow no request and no job: their SQL makes no span.
                with tracing.untraced():
                    self.keep_lane()
                    claimed = self.tick()
                if self.held_back:
                    # Due work waits for room in the broker: look again as soon as a worker
                    # could have taken a task.
                    time.sleep(BACKPRESSURE_POLL_SECONDS)
                elif claimed < self.batch_size and listener.wait(self.idle):
                    # Woken by a new job: let the jobs created alongside it join its batch.
                    time.sleep(self.gather)
                failures = 0
            except DatabaseError as error:
                # PostgreSQL restarted or unreachable: drop the broken connection and retry
                # with capped backoff; nothing was claimed by the failed transaction.
                failures += 1
                wait = backoff(failures)
                logger.warning("dispatcher: database error (%s); retrying in %.1fs", error, wait)
                close_old_connections()
                connection.close()
                time.sleep(wait)
            except Exception:
                # A bug, or what no one foresaw: every client's work waits on this loop, so it
                # goes on after the same backoff (jobs a failed round claimed are handed out
                # again once their lease has run out).
                failures += 1
                wait = backoff(failures)
                logger.exception("dispatcher: a round failed; retrying in %.1fs", wait)
                LOOP_ERRORS.labels("dispatcher").inc()
                connection.close()
                time.sleep(wait)
        self.lane.join(timeout=LANE_STOP_SECONDS)

    def start_lane(self) -> None:
        self.lane = DeliveryLane()
        self.lane.start()
        self.lane_started_at = time.monotonic()

    def keep_lane(self) -> None:
        """Start the delivery lane again if it ended unasked (killed, or an error escaped it):
        every client's webhooks wait on it."""
        if self.lane.is_alive() or time.monotonic() - self.lane_started_at < LANE_RESTART_SECONDS:
            return
        logger.error(
            "dispatcher: the delivery lane ended (exit code %s); starting it again",
            self.lane.process.exitcode,
        )
        LANE_RESTARTS.inc()
        self.start_lane()

    def tick(self) -> int:
        # Back-pressure: claim no further ahead of the workers than a few tasks for each of
        # them. The broker runs its tasks in the order they came, so work claimed ahead would
        # run before a more urgent job claimed after it; and it expires (and is handed out
        # again) if the wait outlasts its lease. Too shallow, and workers wait for work.
        if time.monotonic() - self.last_beat >= HEARTBEAT_EVERY_SECONDS:
            heartbeat_record("dispatcher", self.name, claimed_total=self.claimed_total)
            self.depth = broker_depth()
            self.last_beat = time.monotonic()
        room = self.depth - self.broker.queue_size()
        wanted = min(self.batch_size, max(0, room) * settings.JOBS_TASK_BATCH_SIZE)
        claimed = len(claim_due_jobs(batch_size=wanted, lease=self.lease)) if wanted else 0
        self.held_back = wanted < self.batch_size and (not wanted or claimed == wanted)
        self.claimed_total += claimed
        return claimed


def broker_depth() -> int:
    """Waiting tasks to keep in the broker: `JOBS_DISPATCH_QUEUED_PER_WORKER` for each worker
    of the clusters alive now (as one worker's worth while none has said)."""
    alive = timezone.now() - timedelta(seconds=3 * WORKERS_BEAT_SECONDS)
    beats = ServiceHeartbeat.objects.filter(kind=WORKERS, beat_at__gte=alive)
    workers = sum(
        int(details.get("workers", 0)) for details in beats.values_list("details", flat=True)
    )
    return settings.JOBS_DISPATCH_QUEUED_PER_WORKER * max(1, workers)
