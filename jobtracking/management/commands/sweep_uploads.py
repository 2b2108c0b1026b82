from django.core.management.base import BaseCommand

from jobtracking.services.retention import UPLOAD_SWEEP_MIN_AGE, UPLOADS_FOLDER, uploads_sweep


class Command(BaseCommand):
    help = (
        f"Delete files under {UPLOADS_FOLDER}/ that no job references and that are older than "
        f"{UPLOAD_SWEEP_MIN_AGE} (younger ones may belong to a creation in flight)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="List the files; delete nothing."
        )

    def handle(self, *args, **options):
        names = uploads_sweep(dry_run=options["dry_run"])
        verb = "Would delete" if options["dry_run"] else "Deleted"
        for name in names:
            self.stdout.write(f"{verb} {name}")
        self.stdout.write(f"{verb} {len(names)} unreferenced upload file(s).")
