from django.core.management.base import BaseCommand

from jobtracking import states
from jobtracking.errors import ApplicationError, ForceRequiredError, InvalidTransitionError
from jobtracking.management.selection import Applicable, add_filter_arguments, run_per_job
from jobtracking.models import Priority
from jobtracking.services import Actor, job_requeue


class Command(BaseCommand):
    help = (
        "Requeue terminal jobs matching the filters as new attempts (succeeded ones need --force)."
    )

    def add_arguments(self, parser):
        add_filter_arguments(parser, statuses=states.TERMINAL)
        parser.add_argument("--reason", default="", help="Recorded on every audit row.")
        parser.add_argument("--force", action="store_true", help="Also requeue succeeded jobs.")
        parser.add_argument(
            "--priority",
            choices=Priority.codes(),
            help="The new attempts' priority (default: each job's own).",
        )

    def handle(self, *args, **options):
        actor = Actor.command()
        priority = Priority.named(options["priority"]) if options["priority"] else None
        run_per_job(
            self,
            options,
            "requeued",
            lambda job_id: job_requeue(
                job_id=job_id,
                actor=actor,
                reason=options["reason"],
                force=options["force"],
                priority=priority,
            ),
            Applicable.of(states.requeue_allowed, force=options["force"]),
            # It became active again, or succeeded, since it was selected.
            moved_on=(ForceRequiredError, InvalidTransitionError),
            failed_on=(ApplicationError,),
        )
