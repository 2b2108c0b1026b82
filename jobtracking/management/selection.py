"""What the bulk commands share: job filters, batched keyset iteration, progress, a summary."""

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from extraction.errors import ErrorCode
from extraction.models import Extractor
from jobtracking import states
from jobtracking.models import Batch, ExtractionJob

SAMPLE_SIZE = 10
FILTERS = (
    "ids",
    "ids_file",
    "batch",
    "status",
    "extractor",
    "error_code",
    "created_after",
    "created_before",
    "completed_after",
    "completed_before",
)


def add_filter_arguments(parser: CommandParser, statuses=states.ALL) -> None:
    """The job filters, offered only where they can match `statuses`: an active job has no
    completion time and no error code (both come with its end)."""
    ended = bool(set(statuses) & states.TERMINAL)
    parser.add_argument("--ids", nargs="+", default=[], help="Job ids.")
    parser.add_argument("--ids-file", help="A file of job ids, one a line ('-' for stdin).")
    parser.add_argument("--batch", metavar="BATCH-ID", help="Only the jobs of this batch.")
    parser.add_argument(
        "--status",
        action="append",
        choices=sorted(statuses),
        default=[],
        help="Only jobs in this status (repeatable).",
    )
    parser.add_argument("--extractor", help="Extractor slug.")
    if ended:
        parser.add_argument(
            "--error-code",
            choices=sorted(ErrorCode.values),
            help="Only jobs that ended with this error code.",
        )
    zone = f"read in the TIME_ZONE setting, {settings.TIME_ZONE}"
    for event in ("created", "completed") if ended else ("created",):
        parser.add_argument(
            f"--{event}-after",
            metavar="ISO-DATETIME",
            help=f"Only jobs {event} at or after this moment: ISO 8601, e.g. 2026-12-01 or "
            f"2026-12-01T08:00:00+01:00; a date or a time without an offset is {zone}.",
        )
        parser.add_argument(
            f"--{event}-before",
            metavar="ISO-DATETIME",
            help=f"Only jobs {event} before this moment (as --{event}-after).",
        )
    parser.add_argument("--limit", type=int, help="Act on at most this many jobs.")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=500,
        help="Jobs read, and acted on, a batch at a time (default 500).",
    )
    parser.add_argument("--dry-run", action="store_true", help="Count and show a sample only.")


def _moment(value: str | None, name: str):
    """An aware moment; one written without an offset (a date alone too) is read in the
    TIME_ZONE setting, so that the database never gets a naive one."""
    if not value:
        return None
    moment = parse_datetime(value)  # a date alone too (Python's `fromisoformat`)
    if moment is None:
        raise CommandError(f"--{name} is not an ISO 8601 date or date-time: {value!r}")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
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


def _batch_id(value: str) -> UUID:
    """The id of an existing batch, or a CommandError naming what is wrong."""
    try:
        batch_id = UUID(value)
    except ValueError:
        raise CommandError(f"--batch is not a batch id: {value!r}") from None
    if not Batch.objects.filter(pk=batch_id).exists():
        raise CommandError(f"No batch {batch_id}.")
    return batch_id


def filtered_jobs(options: dict) -> QuerySet[ExtractionJob]:
    jobs = ExtractionJob.objects.all()
    ids = _read_ids(options)
    if options["ids"] or options["ids_file"]:
        jobs = jobs.filter(pk__in=ids)
    if options.get("batch"):
        jobs = jobs.filter(batch_id=_batch_id(options["batch"]))
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
    if options.get("error_code"):
        jobs = jobs.filter(error_code=options["error_code"])
    for name, lookup in (
        ("created_after", "created_at__gte"),
        ("created_before", "created_at__lt"),
        ("completed_after", "completed_at__gte"),
        ("completed_before", "completed_at__lt"),
    ):
        if moment := _moment(options.get(name), name.replace("_", "-")):
            jobs = jobs.filter(**{lookup: moment})
    return jobs


def has_filter(options: dict) -> bool:
    return any(options.get(name) for name in FILTERS)


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


@dataclass(frozen=True)
class Applicable:
    """Which of the filtered jobs a command acts on (by status), and why it leaves each other
    status out. The dry run and the real run select with it alike."""

    statuses: frozenset[str]
    reasons: dict[str, str]

    @classmethod
    def of(cls, allowed: Callable[..., bool], *, force: bool) -> "Applicable":
        """From the state machine's rule `allowed(status, force=…)`."""
        reasons = {}
        for status in sorted(states.ALL):
            if allowed(status, force=force):
                continue
            if allowed(status, force=True):
                reasons[status] = f"{status} needs --force"
            elif status in states.ACTIVE:
                reasons[status] = f"{status} is still active"
            else:
                reasons[status] = f"{status} has already ended"
        return cls(frozenset(states.ALL - reasons.keys()), reasons)

    def left_out(self, selected: QuerySet[ExtractionJob]) -> Counter[str]:
        """The selected jobs it does not act on, counted by reason."""
        rows = (
            selected.exclude(status__in=self.statuses)
            .order_by()
            .values_list("status")
            .annotate(n=Count("pk"))
        )
        return Counter({self.reasons[status]: n for status, n in rows})


def _skips(skipped: Counter[str]) -> str:
    """The skips by reason: `2 skipped (1 succeeded needs --force; 1 moved on meanwhile)`."""
    parts = "; ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()) if n)
    return f"{skipped.total()} skipped" + (f" ({parts})" if parts else "")


def run_per_job(
    command: BaseCommand,
    options: dict,
    verb: str,
    act: Callable[[UUID], None],
    applicable: Applicable,
    moved_on: tuple[type[Exception], ...],
    failed_on: tuple[type[Exception], ...],
) -> None:
    """Apply `act` to every selected job that `applicable` allows; name why the others are
    skipped, in the dry run as in the real run; print a summary; fail if any job failed. A job
    that changed between the selection and its turn is skipped as moved on meanwhile."""
    if not has_filter(options):
        raise CommandError(
            "Give at least one filter (ids, batch, status, extractor, error code, dates)."
        )
    selected = filtered_jobs(options)
    jobs = selected.filter(status__in=applicable.statuses)
    skipped = applicable.left_out(selected)
    total = jobs.count()
    if options["limit"] is not None:
        total = min(total, options["limit"])
    if options["dry_run"]:
        show_sample(command, jobs, total, verb)
        if skipped:
            command.stdout.write(f"Would be {_skips(skipped)}.")
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
                    skipped["moved on meanwhile"] += 1
                except failed_on as error:
                    outcome["failed"] += 1
                    command.stderr.write(f"{job_id}: {error}")
            progress.advance(len(ids))
    finally:
        progress.close()
        command.stdout.write(
            f"{verb.capitalize()}: {outcome['changed']} changed, {_skips(skipped)}, "
            f"{outcome['failed']} failed."
        )
    if outcome["failed"]:
        raise CommandError(f"{outcome['failed']} job(s) could not be {verb}.")
