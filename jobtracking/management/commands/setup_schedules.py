from django.core.management.base import BaseCommand
from django_q.models import Schedule

SCHEDULES = {
    "reap stuck jobs": ("jobtracking.tasks.reap_stuck_jobs", 1),
    "cluster heartbeat": ("jobtracking.tasks.cluster_heartbeat", 1),
}


class Command(BaseCommand):
    help = "Create or update the django-q2 housekeeping schedules (idempotent)."

    def handle(self, *args, **options):
        for name, (func, minutes) in SCHEDULES.items():
            _, created = Schedule.objects.update_or_create(
                name=name,
                defaults={
                    "func": func,
                    "schedule_type": Schedule.MINUTES,
                    "minutes": minutes,
                    "repeats": -1,
                },
            )
            self.stdout.write(f"{'Created' if created else 'Updated'} schedule {name!r}")
