from django.core.management.base import BaseCommand
from django_q.models import Schedule

# name: (task, every N minutes). Webhook retries and polls are claimed by the dispatcher
# within a second of being due; these are the slower safety nets and housekeeping.
SCHEDULES = {
    "reap stuck jobs": ("jobtracking.engine.tasks.reap_stuck_jobs", 1),
    "cluster heartbeat": ("jobtracking.engine.tasks.cluster_heartbeat", 1),
    "dispatch and webhook retries (safety net)": ("jobtracking.engine.dispatcher.dispatch_once", 1),
    "roll up usage": ("jobtracking.services.usage.usage_roll_up", 1),
    "release held jobs, send budget thresholds": ("jobtracking.services.budgets.budgets_tend", 1),
    "purge jobs past retention": ("jobtracking.engine.tasks.purge_expired_jobs", 60 * 24),
    "sweep unreferenced uploads": ("jobtracking.services.retention.uploads_sweep", 60 * 24),
    "sign an audit checkpoint": ("jobtracking.engine.tasks.audit_checkpoint", 10),
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
