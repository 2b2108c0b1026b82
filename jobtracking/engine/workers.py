"""Supervision of the django-q2 worker cluster.

A worker that is killed while it waits for work dies holding the lock of the cluster's internal
multiprocessing queue; its replacement and every other worker then wait on that lock forever and
the cluster stalls while looking alive (django-q2 issue #23, reproduced by our fault tests). The
same lock makes the cluster's own graceful stop hang. So:

- The supervisor runs the cluster (`manage.py run_cluster`) as its own process group and restarts
  it when it exits or when a task it dequeued stays unacknowledged longer than any task may run.
  The ORM broker sets a dequeued row's lock to dequeue time + `retry`; only rows locked after the
  current cluster started count, so the rows a killed cluster left locked (they stay locked until
  `retry` passes) never make the supervisor restart a healthy successor. Their jobs are not
  waiting on them: each job's claim lease expires and the dispatcher hands it out again.
- Every stop is bounded: the cluster gets SIGTERM, and its whole process group SIGKILL when the
  graceful stop has not finished within the grace period.
- The cluster holds the read end of a pipe whose only write end the supervisor holds (the
  lifeline). However the supervisor dies, SIGKILL included, the pipe reaches end-of-file and the
  cluster stops itself under the same bounded rule, so no cluster outlives its supervisor.
- The supervisor's own loop goes on whatever a check meets (a failed start included: the next
  check finds no cluster and starts one), logging and counting the error.
"""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

from jobtracking.infra.metrics import LOOP_ERRORS

logger = logging.getLogger(__name__)

MANAGE = Path(__file__).resolve().parents[2] / "manage.py"
LIFELINE_ENV = "JOBS_SUPERVISOR_LIFELINE_FD"


def stalled_task_count(stall_after: float, *, since: datetime) -> int:
    """Tasks dequeued after `since` more than `stall_after` seconds ago and not acknowledged."""
    now = timezone.now()
    retry = timedelta(seconds=Conf.RETRY)
    return OrmQ.objects.filter(
        key=Conf.CLUSTER_NAME,
        lock__gt=max(now, since + retry),
        lock__lt=now + retry - timedelta(seconds=stall_after),
    ).count()


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def watch_lifeline(fd: int, grace: float) -> None:
    """In the cluster's main process: block until the supervisor is gone, then stop the cluster,
    by SIGKILL of its process group if the graceful stop takes longer than `grace` seconds."""
    with contextlib.suppress(OSError):
        while os.read(fd, 64):
            pass
    logger.warning("cluster: the supervisor is gone; stopping")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    logger.error("cluster: graceful stop unfinished after %.0fs; killing the cluster", grace)
    kill_group(os.getpgrp())


def start_lifeline_watch() -> None:
    fd = os.environ.pop(LIFELINE_ENV, None)
    if fd is not None:
        grace = settings.JOBS_WORKER_STOP_GRACE_SECONDS
        threading.Thread(
            target=watch_lifeline, args=(int(fd), grace), name="lifeline", daemon=True
        ).start()


class WorkerSupervisor:
    def __init__(self, *, check_every: float = 2.0, stall_after: float | None = None) -> None:
        # A task runs at most `timeout` seconds before the cluster's guard kills it.
        self.stall_after = stall_after or float(Conf.TIMEOUT or 60) + 10
        self.check_every = check_every
        self.grace = settings.JOBS_WORKER_STOP_GRACE_SECONDS
        self.child: subprocess.Popen | None = None
        self.started_at = timezone.now()
        self.stopping = False
        self.restarts = 0
        # Only this process holds the write end (os.pipe() descriptors are not inherited).
        self.lifeline_read, self.lifeline_write = os.pipe()

    def start_cluster(self) -> None:
        # Before the cluster exists, so that every row it dequeues is locked past this + retry.
        self.started_at = timezone.now()
        self.child = subprocess.Popen(
            [sys.executable, str(MANAGE), "run_cluster"],
            start_new_session=True,
            pass_fds=(self.lifeline_read,),
            env={**os.environ, LIFELINE_ENV: str(self.lifeline_read)},
        )
        logger.info("supervisor: started the cluster (pid %s)", self.child.pid)

    def kill_cluster(self) -> None:
        kill_group(self.child.pid)
        self.child.wait()

    def stop(self, *_args) -> None:
        self.stopping = True

    def stalled(self) -> bool:
        try:
            return stalled_task_count(self.stall_after, since=self.started_at) > 0
        except DatabaseError as error:
            logger.warning("supervisor: cannot check the queue (%s)", error)
            connection.close()
            return False

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        while not self.stopping:
            try:
                self.check()
            except Exception:
                logger.exception("supervisor: the check failed; checking again")
                LOOP_ERRORS.labels("worker_supervisor").inc()
            time.sleep(self.check_every)  # also the backoff after an error
        self.shutdown()

    def check(self) -> None:
        """Start the cluster if there is none (the first check, or a start that failed);
        restart it if it exited or stalled."""
        if self.child is None:
            self.start_cluster()
            return
        if self.child.poll() is not None:
            logger.error("supervisor: cluster exited (%s); restarting", self.child.returncode)
        elif self.stalled():
            logger.critical(
                "supervisor: tasks unacknowledged for over %.0fs; restarting stalled cluster",
                self.stall_after,
            )
        else:
            return
        # Also when the main process exited: its workers may still be running.
        self.kill_cluster()
        self.child = None  # gone: never signalled again, its group's id may be reused
        self.restarts += 1
        self.start_cluster()

    def shutdown(self) -> None:
        """SIGTERM to the cluster's main process (it stops its own workers in order; a signal to
        the whole group breaks that), then SIGKILL to the group after the grace period."""
        if self.child is None:
            return
        if self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.child.wait(timeout=self.grace)
        self.kill_cluster()
