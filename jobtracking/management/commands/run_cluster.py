import contextlib
import logging
import os
import socket
import time

from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection
from django_q.cluster import Cluster
from django_q.conf import Conf

from jobtracking.engine.dispatcher import WORKERS, WORKERS_BEAT_SECONDS
from jobtracking.engine.workers import start_lifeline_watch
from jobtracking.models import ServiceHeartbeat
from jobtracking.services.housekeeping import heartbeat_record

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Run one django-q2 cluster as `run_workers` starts it: a first heartbeat at once, and a "
        "stop of its own when its supervisor is gone. Use `run_workers`, not this."
    )

    def handle(self, *args, **options):
        start_lifeline_watch()
        cluster = Cluster()
        cluster.start()
        # Readiness from the cluster's first second, not from its first scheduled heartbeat
        # (after start(): the forked processes must not share this connection).
        try:
            heartbeat_record("cluster")
        except DatabaseError as error:
            logger.warning("cluster: first heartbeat failed (%s)", error)
        # How many workers this cluster has, for the dispatchers' broker depth; the sentinel
        # forks its workers itself, so this process may keep its connection from here on.
        name = f"workers@{socket.gethostname()}:{os.getpid()}"
        last = -WORKERS_BEAT_SECONDS
        while cluster.sentinel.is_alive():
            if time.monotonic() - last >= WORKERS_BEAT_SECONDS:
                last = time.monotonic()
                try:
                    heartbeat_record(WORKERS, name, workers=Conf.WORKERS)
                except DatabaseError as error:
                    logger.warning("cluster: workers heartbeat failed (%s)", error)
                    connection.close()
            cluster.sentinel.join(timeout=1)
        # Gone: its workers no longer count towards the dispatchers' broker depth.
        with contextlib.suppress(DatabaseError):
            ServiceHeartbeat.objects.filter(name=name).delete()
        connection.close()
