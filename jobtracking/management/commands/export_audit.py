from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date

from jobtracking.infra.signing import SigningKeyError, public_key_bytes
from jobtracking.services.audit_export import audit_export


def day(value: str):
    parsed = parse_date(value)
    if parsed is None:
        raise ValueError(value)
    return parsed


class Command(BaseCommand):
    help = (
        "Write an auditor's bundle into a directory: the audit history of the jobs created from "
        "--from to --to (UTC days, both included) as gzip JSON Lines by day, every checkpoint, "
        "the public key and a manifest. docs/verify_bundle.py verifies it offline."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--from",
            dest="first_day",
            type=day,
            required=True,
            metavar="DAY",
            help="The first day (YYYY-MM-DD, UTC) whose jobs go in.",
        )
        parser.add_argument(
            "--to",
            dest="last_day",
            type=day,
            required=True,
            metavar="DAY",
            help="The last day (YYYY-MM-DD, UTC) whose jobs go in.",
        )
        parser.add_argument("directory", type=Path, help="Where to write the bundle.")

    def handle(self, *args, first_day, last_day, directory, **options):
        if last_day < first_day:
            raise CommandError("--to is before --from.")
        if directory.exists() and any(directory.iterdir()):
            raise CommandError(
                f"{directory} is not empty: a bundle goes into a directory of its own."
            )
        try:
            public_key = public_key_bytes()
        except SigningKeyError as error:
            raise CommandError(str(error)) from None
        manifest = audit_export(
            first_day=first_day, last_day=last_day, directory=directory, public_key=public_key
        )
        checkpoints = manifest["files"]["checkpoints.jsonl"]["checkpoints"]
        self.stdout.write(
            f"Wrote {manifest['jobs']} job(s), {manifest['changes']} change(s) and "
            f"{checkpoints} checkpoint(s) to {directory}."
        )
