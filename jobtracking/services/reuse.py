"""Identical documents are not paid twice: a pending job takes a copy of the result of an
identical request instead of calling its extractor.

The rule (docs/architecture.md, Usage): a job whose file has the SHA-256 of a job of the same
client that succeeded on the same extractor, with the same model (`Extractor.model_id`, as its
usage row recorded it) and equal options, within the extractor's `reuse_window`, goes pending →
succeeded with that result. Only a result an extractor produced is a source (not one itself
reused), so the window always counts from an extraction. Off unless the extractor has a window;
a client opts out per job (`reuse_result=False`), and a succeeded job requeued (with force) is
extracted again (`extract_afresh`). URL jobs take part when their digest is known:
the client's declaration, trusted, since a client only ever gets its own results.

The attempt costs 0 pages and saves what its source was billed (`usage_row`'s `saved_pages`);
its history says where the result came from, and so does the job (`reused_from_*`).

A job whose identical twin (same client, extractor, document and options) is in flight, or
pending and older, waits a round for its result rather than being sent too (`_waiting`): the
same document sent twice at once is paid once. It is not held or failed, and its history shows
nothing until it takes the result; if the twin fails or is cancelled, it goes to the extractor.

Called by the worker's batch start (`engine.jobs_start`), inside its transaction with the jobs
locked, before any lease is taken: a reused job never counts against the in-flight cap, a rate
limit or an open circuit. One query finds the sources of the whole batch, one more its twins
(only for jobs left without a source), and none runs when no job's extractor has a window.
"""

import json
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from operator import or_
from uuid import UUID

from django.db import InterfaceError, OperationalError
from django.db.models import F, OuterRef, Q, Subquery

from extraction.models import Extractor
from jobtracking import states
from jobtracking.models import (
    REUSE_SOURCE,
    ExtractionJob,
    ExtractionResult,
    UsageRecord,
    status_in,
)
from jobtracking.services.results import Result, result_row
from jobtracking.services.transitions import BatchOutcome, Move

logger = logging.getLogger(__name__)


@dataclass
class Reuse:
    """The reuse moves of a batch, and each reused job's new result row (not yet inserted)."""

    moves: list[Move] = field(default_factory=list)
    rows: dict[UUID, ExtractionResult] = field(default_factory=dict)
    # The jobs that wait a round for an identical job's result (`_waiting`): no call yet.
    waiting: list[ExtractionJob] = field(default_factory=list)

    @property
    def taken(self) -> set[UUID]:
        """The jobs that go to no lease step this round."""
        return {*self.rows, *(job.pk for job in self.waiting)}

    def store(self, outcome: BatchOutcome) -> None:
        """Insert the result rows of the jobs the batch's transition moved to succeeded (in
        its transaction). The rows were built, and their files written, one job at a time
        before it (`jobs_reuse`), so this one INSERT has nothing left to fail on."""
        ExtractionResult.objects.bulk_create(
            row
            for pk, row in self.rows.items()
            if pk not in outcome.refused and outcome.moved[pk].status_id == states.SUCCEEDED
        )


def jobs_reuse(candidates: dict[Extractor, list[ExtractionJob]], now: datetime) -> Reuse:
    """The reuse moves for the pending jobs among `candidates` (locked, by extractor) that an
    earlier result serves (see the module docstring). A job whose source cannot be copied
    (its file unreadable) is left out, to be extracted: it never fails its neighbours."""
    wanted = [
        job
        for extractor, jobs in candidates.items()
        if extractor.reuse_window
        for job in jobs
        if job.status_id == states.PENDING
        and job.reuse_result
        and not job.extract_afresh
        and job.file_sha256
    ]
    reuse = Reuse()
    if not wanted:
        return reuse
    sources = _sources(wanted, now)
    unserved = []
    for job in wanted:
        source = next((row for row in sources[_document(job)] if _same_request(row.job, job)), None)
        if source is None:
            unserved.append(job)
            continue
        try:
            reuse.rows[job.pk] = _copy(job, source)
        except (OperationalError, InterfaceError):
            raise  # the database's fault, not the job's
        except Exception:
            logger.exception("job %s: the result of job %s cannot be copied", job.pk, source.job_id)
            continue
        reuse.moves.append(_reuse_move(job, source))
    reuse.waiting = _waiting(unserved, reuse.rows, now)
    return reuse


def _waiting(
    jobs: list[ExtractionJob], reused: Iterable[UUID], now: datetime
) -> list[ExtractionJob]:
    """The jobs among `jobs` (no result to take yet) that wait a round for a twin's: a job of
    the same request (`_request`) in flight (a handed-back one of this batch too: it is sent
    again now), or pending with a smaller id (older), in this batch or not. A job in flight
    waits for none and a job for no younger one, so no two jobs ever wait for each other. A job
    waits only while more than half its time is left: a twin stuck until its own deadline
    cannot make it miss its own."""
    patient = [
        job
        for job in jobs
        if job.deadline_at and job.deadline_at - now > job.extractor.max_duration / 2
    ]
    if not patient:
        return []
    found = (
        ExtractionJob.objects.filter(
            status_in(states.IN_FLIGHT | {states.PENDING}),
            reduce(or_, {_request(job): _request_filter(job) for job in patient}.values()),
        )
        # Spelled out, so the planner sees that `job_active_document_idx` holds them all.
        .exclude(file_sha256="")
        .exclude(pk__in=list(reused))  # pending still, but taking a result now
        .order_by()
        .values_list("pk", "status", "requested_by", "extractor", "file_sha256", "options")
    )
    twins: defaultdict[tuple, list[tuple[UUID, bool]]] = defaultdict(list)  # (id, pending)
    for pk, status, *document, options in found:
        twins[_request_key(*document, options)].append((pk, status == states.PENDING))
    return [
        job
        for job in patient
        if any(not pending or pk < job.pk for pk, pending in twins[_request(job)] if pk != job.pk)
    ]


def _document(job: ExtractionJob) -> tuple:
    return job.requested_by_id, job.extractor_id, job.file_sha256


def _same_request(source: ExtractionJob, job: ExtractionJob) -> bool:
    # Compared as JSON values, as the query compared them (jsonb equality: key order aside).
    return source.options == job.options


def _request(job: ExtractionJob) -> tuple:
    return _request_key(*_document(job), job.options)


def _request_key(client: int | None, extractor: int, file_sha256: str, options) -> tuple:
    """What two jobs share to share a result: client, extractor, document and options (their
    JSON, keys sorted: equal as jsonb compares them)."""
    return client, extractor, file_sha256, json.dumps(options, sort_keys=True)


def _request_filter(job: ExtractionJob) -> Q:
    """The jobs of `job`'s request (`_request`)."""
    return Q(
        requested_by=job.requested_by_id,
        extractor=job.extractor_id,
        file_sha256=job.file_sha256,
        options=job.options,
    )


def _sources(jobs: Iterable[ExtractionJob], now: datetime) -> defaultdict[tuple, list]:
    """For each document (`_document`) of `jobs`, the results that may serve it, newest first:
    each with its job and `billed_pages`, the pages its usage row says it cost. One query; the
    jobs it looks at are found through `job_reuse_source_idx`."""
    requests = {
        _request(job): _request_filter(job) & Q(completed_at__gte=now - job.extractor.reuse_window)
        for job in jobs
    }
    matching = reduce(or_, requests.values())
    # The usage row of the source's attempt: what it was billed, and under which model. A
    # result of another model (the extractor's changed since) is no source.
    billed = UsageRecord.objects.filter(
        job_id=OuterRef("job_id"),
        attempt=OuterRef("attempt"),
        model_id=OuterRef("job__extractor__model_id"),
    ).values("pages")[:1]
    rows = (
        ExtractionResult.objects.filter(
            job__in=ExtractionJob.objects.filter(REUSE_SOURCE & matching),
            attempt=F("job__attempt"),
        )
        .annotate(billed_pages=Subquery(billed))
        .filter(billed_pages__isnull=False)
        .select_related("job")
        .order_by("-job__completed_at")
    )
    found = defaultdict(list)
    for row in rows:
        found[_document(row.job)].append(row)
    return found


def _copy(job: ExtractionJob, source: ExtractionResult) -> ExtractionResult:
    """The result row of `job`'s attempt: a copy of `source`, its file written now if it has
    one. Copied rather than shared: each job's files then live and are purged with it
    (`services.retention` deletes a purged job's files), and the copy costs a result's bytes
    once, which an extraction would have cost too."""
    original = b""
    if source.made_safe and source.original_file:
        with source.original_file.open("rb") as stored:
            original = stored.read()
    result = Result(
        source.load_payload(),
        source.page_count,
        source.model_version,
        source.billed_pages,
        made_safe=list(source.made_safe),
        original=original,
    )
    return result_row(job, result)


def _reuse_move(job: ExtractionJob, source: ExtractionResult) -> Move:
    """pending → succeeded with `source`'s result: no extractor call, no pages billed, its
    source's pages saved."""
    source_job, attempt = source.job_id, source.attempt

    def prepare(job: ExtractionJob) -> None:
        job.reused_from_job, job.reused_from_attempt = source_job, attempt

    return Move(
        job.pk,
        states.SUCCEEDED,
        expected_from={states.PENDING},
        reason=f"Result reused from job {source_job} attempt {attempt}",
        details={
            "reused_from": {"job": str(source_job), "attempt": attempt},
            "pages_saved": source.billed_pages,
        },
        prepare=prepare,
        saved_pages=source.billed_pages,
    )
