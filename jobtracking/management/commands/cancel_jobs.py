from django.core.management.base import BaseCommand

from jobtracking import states
from jobtracking.errors import ApplicationError, InvalidTransitionError
from jobtracking.management.selection import Applicable, add_filter_arguments, run_per_job
from jobtracking.services import Actor, job_cancel


class Command(BaseCommand):
    help = "Cancel active jobs matching the filters (and ask their extractors to drop them)."

    def add_arguments(self, parser):
        add_filter_arguments(parser, statuses=states.ACTIVE)
        parser.add_argument("--reason", default="", help="Recorded on every audit row.")

    def handle(self, *args, **options):
        actor = Actor.command()
        run_per_job(
            self,
            options,
            "cancelled",
            lambda job_id: job_cancel(job_id=job_id, actor=actor, reason=options["reason"]),
            Applicable.of(
                lambda status, force: states.is_allowed(status, states.CANCELLED, force=force),
                force=False,
            ),
            moved_on=(InvalidTransitionError,),
            failed_on=(ApplicationError,),
        )
