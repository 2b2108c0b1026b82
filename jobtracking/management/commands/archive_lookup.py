from django.core.management.base import BaseCommand, CommandError

from jobtracking.models import ArchivedJob, ExtractionJob
from jobtracking.selectors import archived_job_record, archived_job_search, job_search


class Command(BaseCommand):
    help = (
        "Say when and where purged jobs were archived: by job id, file id or external id. "
        "--record prints each one's archived record (one JSON document a line)."
    )

    def add_arguments(self, parser):
        parser.add_argument("term", help="A job id, a file id or an external job id.")
        parser.add_argument(
            "--record", action="store_true", help="Print the archived records themselves."
        )

    def handle(self, *args, **options):
        term = options["term"].strip()
        entries = list(archived_job_search(ArchivedJob.objects.order_by("archived_at"), term))
        for entry in entries:
            self.stdout.write(
                f"Job {entry.job_id} (file {entry.file_id}, {entry.status}, created "
                f"{entry.created_at:%Y-%m-%d %H:%M} UTC) was archived at "
                f"{entry.archived_at:%Y-%m-%d %H:%M:%S} UTC to storage {entry.storage!r}: "
                f"{entry.path}, line {entry.line} (its gzip member at byte {entry.offset}), "
                f"confirmed by {entry.manifest}."
            )
            if options["record"]:
                self.stdout.write(archived_job_record(entry).decode().rstrip("\n"))
        live = job_search(ExtractionJob.objects.all(), term).count()
        if live:
            self.stdout.write(f"{live} job(s) matching {term!r} are still in the database.")
        if not entries:
            raise CommandError(f"No archived job has the id, file id or external id {term!r}.")
