import logging

from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection
from django_q.cluster import Cluster

from jobtracking.tasks import beat
from jobtracking.workers import start_lifeline_watch

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
            beat("cluster")
        except DatabaseError as error:
            logger.warning("cluster: first heartbeat failed (%s)", error)
        connection.close()
        while cluster.sentinel.is_alive():
            cluster.sentinel.join(timeout=1)
