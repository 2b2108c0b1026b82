"""What the bulk commands share: job filters, batched keyset iteration, progress, a summary."""

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from extraction.errors import ErrorCode
from extraction.models import Extractor
from jobtracking import states
from jobtracking.models import ExtractionJob

SAMPLE_SIZE = 10


def add_filter_arguments(parser: CommandParser, statuses=states.ALL) -> None:
    parser.add_argument("--ids", nargs="+", default=[], help="Job ids.")
    parser.add_argument("--ids-file", help="A file of job ids, one a line ('-' for stdin).")
    parser.add_argument("--status", action="append", choices=sorted(statuses), default=[])
    parser.add_argument("--extractor", help="Extractor slug.")
    parser.add_argument("--error-code", choices=sorted(ErrorCode.values))
    for name in ("created-after", "created-before", "completed-after", "completed-before"):
        parser.add_argument(f"--{name}", metavar="ISO-DATETIME")
    parser.add_argument("--limit", type=int, help="Act on at most this many jobs.")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--dry-run", action="store_true", help="Count and show a sample only.")


def _moment(value: str, name: str):
    moment = parse_datetime(value) if value else None
    if value and moment is None:
        raise CommandError(f"--{name} is not an ISO date-time: {value!r}")
    return moment


def _read_ids(options: dict) -> list[str]:
    ids = list(options["ids"])
    if options["ids_file"]:
        source = (
            sys.stdin if options["ids_file"] == "-" else Path(options["ids_file"]).open()  # noqa: SIM115
        )
        with source:
            ids += [line.strip() for line in source if line.strip()]
    bad = []
    for value in ids:
        try:
            UUID(value)
        except ValueError:
            bad.append(value)
    if bad:
        shown = ", ".join(repr(value) for value in bad[:5]) + (" …" if len(bad) > 5 else "")
        raise CommandError(f"Not a job id ({len(bad)} of {len(ids)}): {shown}")
    return [str(UUID(value)) for value in ids]


def filtered_jobs(options: dict) -> QuerySet[ExtractionJob]:
    jobs = ExtractionJob.objects.all()
    ids = _read_ids(options)
    if options["ids"] or options["ids_file"]:
        jobs = jobs.filter(pk__in=ids)
    if options["status"]:
        jobs = jobs.filter(status__in=options["status"])
    if options["extractor"]:
        slugs = list(Extractor.objects.order_by("slug").values_list("slug", flat=True))
        if options["extractor"] not in slugs:
            raise CommandError(
                f"No extractor {options['extractor']!r}; the extractors are: "
                + (", ".join(slugs) or "none")
            )
        jobs = jobs.filter(extractor__slug=options["extractor"])
    if options["error_code"]:
        jobs = jobs.filter(error_code=options["error_code"])
    for name, lookup in (
        ("created_after", "created_at__gte"),
        ("created_before", "created_at__lt"),
        ("completed_after", "completed_at__gte"),
        ("completed_before", "completed_at__lt"),
    ):
        if moment := _moment(options[name], name.replace("_", "-")):
            jobs = jobs.filter(**{lookup: moment})
    return jobs


def has_filter(options: dict) -> bool:
    names = (
        "ids",
        "ids_file",
        "status",
        "extractor",
        "error_code",
        "created_after",
        "created_before",
        "completed_after",
        "completed_before",
    )
    return any(options[name] for name in names)


def batches(jobs: QuerySet[ExtractionJob], batch_size: int, limit: int | None) -> Iterator[list]:
    """Ids in primary-key order, a batch at a time, re-reading the filter for each batch: jobs
    that no longer match (changed by an earlier run or another actor) are left out, so an
    interrupted run can simply be started again."""
    last, taken = None, 0
    while limit is None or taken < limit:
        page = jobs.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        size = batch_size if limit is None else min(batch_size, limit - taken)
        ids = list(page.values_list("pk", flat=True)[:size])
        if not ids:
            return
        yield ids
        last, taken = ids[-1], taken + len(ids)


class Progress:
    """A tqdm bar on a terminal, plain lines otherwise."""

    def __init__(self, command: BaseCommand, total: int, verb: str) -> None:
        self.command, self.total, self.verb, self.done = command, total, verb, 0
        self.bar = tqdm(total=total, unit="job", desc=verb) if sys.stderr.isatty() else None

    def advance(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        else:
            self.command.stderr.write(f"{self.verb}: {self.done}/{self.total}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def show_sample(command: BaseCommand, jobs: QuerySet[ExtractionJob], total: int, verb: str):
    """The count, and the first jobs that would be acted on (never more than `total`)."""
    shown = min(total, SAMPLE_SIZE)
    command.stdout.write(
        f"Dry run: {total} job(s) would be {verb}."
        + (f" The first {shown}:" if shown < total else "" if not total else " They are:")
    )
    for job in jobs.order_by("pk").select_related("extractor")[:shown]:
        command.stdout.write(f"  {job.pk}  {job.status_id:<10} {job.extractor.slug}  {job.file_id}")


def run_per_job(
    command: BaseCommand,
    options: dict,
    verb: str,
    act: Callable[[UUID], None],
    moved_on: tuple[type[Exception], ...],
    failed_on: tuple[type[Exception], ...],
) -> None:
    """Apply `act` to every selected job; print a summary; fail if any job failed."""
    if not has_filter(options):
        raise CommandError("Give at least one filter (ids, status, extractor, error code, dates).")
    jobs = filtered_jobs(options)
    total = jobs.count()
    if options["limit"] is not None:
        total = min(total, options["limit"])
    if options["dry_run"]:
        show_sample(command, jobs, total, verb)
        return
    outcome: Counter[str] = Counter()
    progress = Progress(command, total, verb)
    try:
        for ids in batches(jobs, options["batch_size"], options["limit"]):
            for job_id in ids:
                try:
                    act(job_id)
                    outcome["changed"] += 1
                except moved_on:
                    outcome["skipped"] += 1
                except failed_on as error:
                    outcome["failed"] += 1
                    command.stderr.write(f"{job_id}: {error}")
            progress.advance(len(ids))
    finally:
        progress.close()
        command.stdout.write(
            f"{verb.capitalize()}: {outcome['changed']} changed, {outcome['skipped']} skipped "
            f"(moved on meanwhile), {outcome['failed']} failed."
        )
    if outcome["failed"]:
        raise CommandError(f"{outcome['failed']} job(s) could not be {verb}.")
