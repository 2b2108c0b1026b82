from django.conf import settings
from django.core.management.base import BaseCommand

from jobtracking import states
from jobtracking.management.selection import (
    Progress,
    add_filter_arguments,
    batches,
    filtered_jobs,
    show_sample,
)
from jobtracking.services.archive import ArchiveRun
from jobtracking.services.retention import jobs_purge, purgeable_jobs


class Command(BaseCommand):
    help = (
        "Archive, then delete, terminal jobs past their status's retention window "
        "(JOBS_RETENTION_DAYS), with their history, results, events and files, in batches. "
        "Filters narrow the selection; jobs inside the retention window are always kept."
    )

    def add_arguments(self, parser):
        # Only terminal jobs are ever purged: active statuses are not offered.
        add_filter_arguments(parser, statuses=states.TERMINAL)

    def handle(self, *args, **options):
        jobs = filtered_jobs(options).filter(pk__in=purgeable_jobs().values("pk"))
        total = jobs.count()
        if options["limit"] is not None:
            total = min(total, options["limit"])
        windows = ", ".join(f"{s} {d} d" for s, d in settings.JOBS_RETENTION_DAYS.items())
        self.stdout.write(f"Retention: {windows}.")
        if options["dry_run"]:
            show_sample(self, jobs, total, "purged")
            return
        purged, run = 0, ArchiveRun()
        progress = Progress(self, total, "purged")
        try:
            with run:  # its writers' threads and connections kept for the run, then closed
                for ids in batches(jobs, options["batch_size"], options["limit"]):
                    purged += jobs_purge(ids=ids, run=run)
                    progress.advance(len(ids))
        finally:
            progress.close()
            if settings.JOBS_ARCHIVE_BEFORE_PURGE:
                self.stdout.write(f"Archived as run {run.id} in {run.parts} part(s).")
            self.stdout.write(f"Purged {purged} job(s).")
