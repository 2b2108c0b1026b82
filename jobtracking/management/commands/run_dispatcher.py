from django.core.management.base import BaseCommand

from jobtracking.engine.dispatcher import Dispatcher


class Command(BaseCommand):
    help = "Claim due jobs (submissions, polls, expired leases) and hand them to the workers."

    def add_arguments(self, parser):
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="Jobs claimed at a time (default: JOBS_DISPATCH_BATCH_SIZE).",
        )
        parser.add_argument("--idle", type=float, default=None, help="Seconds to sleep when idle.")

    def handle(self, *args, **options):
        dispatcher = Dispatcher(batch_size=options["batch_size"], idle=options["idle"])
        self.stdout.write(f"{dispatcher.name} started (batch {dispatcher.batch_size})")
        self.stdout.flush()
        dispatcher.run()
        self.stdout.write(f"{dispatcher.name} stopped after claiming {dispatcher.claimed_total}")
