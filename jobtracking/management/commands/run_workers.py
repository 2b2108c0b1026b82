import os

from django.core.management.base import BaseCommand

from jobtracking.engine.workers import WorkerSupervisor


class Command(BaseCommand):
    help = (
        "Run the django-q2 worker cluster under a supervisor that restarts it when it exits or "
        "stalls. Use this instead of `qcluster`."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--stall-after",
            type=float,
            default=float(os.environ.get("JOBS_WORKER_STALL_SECONDS", 0)) or None,
            help="Seconds a dequeued task may stay unacknowledged (default: Q timeout + 10).",
        )

    def handle(self, *args, **options):
        supervisor = WorkerSupervisor(stall_after=options["stall_after"])
        self.stdout.write(f"Supervising qcluster (stall after {supervisor.stall_after:.0f}s)")
        self.stdout.flush()
        supervisor.run()
        self.stdout.write(f"Stopped after {supervisor.restarts} restart(s)")
