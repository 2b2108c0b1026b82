"""Supervision of the django-q2 worker cluster.

A worker that is killed while it waits for work dies holding the lock of the cluster's internal
multiprocessing queue; its replacement and every other worker then wait on that lock forever and
the cluster stalls while looking alive (django-q2 issue #23, reproduced by our fault tests). The
supervisor runs `qcluster` as a child process group and restarts it when it exits or when tasks
handed to it stay unacknowledged longer than any task may run (the ORM broker shows this: a
dequeued task keeps its lock until it is acknowledged).
"""

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from django.db import DatabaseError, connection
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

logger = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
MANAGE = Path(__file__).resolve().parent.parent / "manage.py"


def stalled_task_count(stall_after: float) -> int:
    """Tasks the cluster dequeued more than `stall_after` seconds ago and has not acknowledged.
    The ORM broker sets a dequeued task's lock to dequeue time + `retry`."""
    now = timezone.now()
    return OrmQ.objects.filter(
        key=Conf.CLUSTER_NAME,
        lock__gt=now,
        lock__lt=now + timedelta(seconds=Conf.RETRY - stall_after),
    ).count()


def _stop_with_parent() -> None:
    """In the child, on Linux: receive SIGTERM when the supervisor dies, however it dies, so
    that no cluster is left running unsupervised."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class WorkerSupervisor:
    def __init__(self, *, check_every: float = 2.0, stall_after: float | None = None) -> None:
        # A task runs at most `timeout` seconds before the cluster's guard kills it.
        self.stall_after = stall_after or float(Conf.TIMEOUT or 60) + 10
        self.check_every = check_every
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.restarts = 0

    def start_cluster(self) -> None:
        self.child = subprocess.Popen(
            [sys.executable, str(MANAGE), "qcluster"],
            start_new_session=True,
            preexec_fn=_stop_with_parent,
        )
        logger.info("supervisor: started qcluster (pid %s)", self.child.pid)

    def kill_cluster(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signal.SIGKILL)
        self.child.wait()

    def stop(self, *_args) -> None:
        self.stopping = True

    def stalled(self) -> bool:
        try:
            return stalled_task_count(self.stall_after) > 0
        except DatabaseError as error:
            logger.warning("supervisor: cannot check the queue (%s)", error)
            connection.close()
            return False

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.start_cluster()
        while not self.stopping:
            time.sleep(self.check_every)
            if self.stopping:
                break
            if self.child.poll() is not None:
                logger.error("supervisor: qcluster exited (%s); restarting", self.child.returncode)
            elif self.stalled():
                logger.critical(
                    "supervisor: tasks unacknowledged for over %.0fs; restarting stalled qcluster",
                    self.stall_after,
                )
                self.kill_cluster()
            else:
                continue
            self.restarts += 1
            self.start_cluster()
        self.shutdown()

    def shutdown(self) -> None:
        if self.child and self.child.poll() is None:
            # Only the cluster's main process: it stops its own workers in order, and a signal
            # to the whole group breaks that shutdown.
            self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill_cluster()
