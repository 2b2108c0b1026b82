from django.core.management.base import BaseCommand

from jobtracking.engine.tasks import reap_stuck_jobs


class Command(BaseCommand):
    help = (
        "Time out jobs past their deadline, hand back expired submission leases, and make every "
        "active job without a due_at due; publish the completion of closed batches whose "
        "jobs have all ended (a process that died may have left it unpublished)."
    )

    def handle(self, *args, **options):
        outcome = reap_stuck_jobs()
        self.stdout.write(
            f"Timed out {outcome['timed_out']} overdue job(s); handed back "
            f"{outcome['handed_back']} expired submission lease(s); made {outcome['repaired']} "
            f"job(s) without a due time due now; completed {outcome['batches_completed']} "
            "batch(es)."
        )
