"""What a move changes on a job reaches its row: the job a service returns and the row read back
agree on every column, for every move in the table, every requeue and every move the services
and the engine build."""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from extraction.errors import ErrorCode
from jobtracking import states
from jobtracking.models import ExtractionJob, Priority
from jobtracking.services import (
    SYSTEM,
    Move,
    job_cancel,
    job_hand_back_expired_lease,
    job_requeue,
    job_time_out,
    job_transition,
    jobs_set_priority,
    jobs_transition,
)
from jobtracking.services.engine import (
    Result,
    defer_move,
    fail_move,
    jobs_record,
    jobs_start,
    poll_error_move,
    poll_move,
    submit_hold_move,
    submit_retry_move,
    submitted_move,
    succeeded_move,
)
from tests.factories import ExtractionJobFactory

pytestmark = pytest.mark.django_db

# Every column, taken from the model: a field added later is compared too.
COLUMNS = [field for field in ExtractionJob._meta.concrete_fields if not field.primary_key]
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def busy_job(status: str, **kwargs) -> ExtractionJob:
    """A job in `status` with a value in every field a move may set or reset, so that each
    reset is a change its row must receive."""
    now = timezone.now()
    ended = now if status in states.TERMINAL else None
    values = {
        "status_id": status,
        "attempt": 2,
        "submit_attempts": 2,
        "poll_count": 5,
        "poll_error_count": 1,
        "external_job_id": "ext-1",
        "external_url": "https://extractor.example.org/ops/1",
        "external_status": "running",
        "external_request_id": "req-1",
        "progress": 40,
        "remote_expires_at": now + timedelta(hours=2),
        "due_at": now,
        "claimed_at": now,
        "lease_expires_at": now + timedelta(minutes=1),
        "deadline_at": now + timedelta(hours=1),
        "error_code": ErrorCode.EXTRACTION_FAILED,
        "error_message": "An earlier attempt failed.",
        "submitted_at": ended,
        "started_at": ended,
        "completed_at": ended,
    }
    return ExtractionJobFactory(**{**values, **kwargs})


def columns(job: ExtractionJob) -> dict[str, object]:
    return {field.attname: field.value_from_object(job) for field in COLUMNS}


def assert_saved(moved: ExtractionJob, before: dict[str, object]) -> None:
    """The returned job and its row agree on every column, and the move did change one."""
    after, row = columns(moved), columns(ExtractionJob.objects.get(pk=moved.pk))
    assert {name for name in after if after[name] != before[name]} - {"updated_at"}
    assert {name: (value, row[name]) for name, value in after.items() if value != row[name]} == {}


def act(job: ExtractionJob, action: Callable[[ExtractionJob], ExtractionJob]) -> None:
    before = columns(job)
    assert_saved(action(job), before)


def moved(*moves: Move) -> ExtractionJob:
    outcome = jobs_transition(list(moves), actor=SYSTEM)
    assert outcome.refused == {}
    (job,) = outcome.moved.values()
    return job


def test_jobs_transition_saves_a_field_only_its_prepare_changes():
    def prepare(job: ExtractionJob) -> None:
        job.file_name = "renamed.pdf"
        job.metadata = {"note": "set by a move"}

    job = busy_job(states.PROCESSING)
    act(job, lambda job: moved(Move(job.pk, states.FAILED, prepare=prepare)))
    job.refresh_from_db()
    assert (job.file_name, job.metadata) == ("renamed.pdf", {"note": "set by a move"})


@pytest.mark.parametrize(
    ("from_status", "to_status"),
    sorted((source, target) for source, target in states.TRANSITIONS if source is not None),
)
def test_job_transition_saves_every_field_a_move_of_the_table_changes(from_status, to_status):
    act(
        busy_job(from_status),
        lambda job: job_transition(job_id=job.pk, to_status=to_status, actor=SYSTEM, force=True),
    )


@pytest.mark.parametrize("priority", [None, Priority.INTERACTIVE])
@pytest.mark.parametrize("status", sorted(states.TERMINAL))
def test_job_requeue_saves_every_field_it_resets(status, priority):
    act(
        busy_job(status),
        lambda job: job_requeue(
            job_id=job.pk, actor=SYSTEM, force=status == states.SUCCEEDED, priority=priority
        ),
    )


def started(job: ExtractionJob) -> ExtractionJob:
    batch = jobs_start(job_ids=[job.pk])
    (planned,) = batch.submits + batch.polls
    return planned.job


def prioritised(job: ExtractionJob, priority: Priority) -> ExtractionJob:
    return jobs_set_priority(job_ids=[job.pk], priority=priority, actor=SYSTEM).moved[job.pk]


def result() -> Result:
    return Result(payload={"pages": []}, page_count=1, model_version="v1", billable_pages=1)


# Each: the job's status, fields that make the move possible, and the move.
SERVICE_MOVES: dict[str, tuple[str, dict, Callable[[ExtractionJob], ExtractionJob]]] = {
    "cancel": (states.PROCESSING, {}, lambda job: job_cancel(job_id=job.pk, actor=SYSTEM)),
    "time out": (
        states.PROCESSING,
        {"deadline_at": LONG_AGO},
        lambda job: job_time_out(job_id=job.pk),
    ),
    "hand back": (
        states.SUBMITTING,
        {"lease_expires_at": LONG_AGO},
        lambda job: job_hand_back_expired_lease(job_id=job.pk),
    ),
    "set priority": (states.PENDING, {}, lambda job: prioritised(job, Priority.BULK)),
    "start: lease": (states.PENDING, {}, started),
    "start: poll": (states.PROCESSING, {}, started),
    "start: hand back and lease": (states.SUBMITTING, {"lease_expires_at": LONG_AGO}, started),
    "defer": (states.PENDING, {}, lambda job: moved(defer_move(job, LONG_AGO))),
    "submitted": (
        states.SUBMITTING,
        {"external_job_id": "", "external_url": "", "remote_expires_at": None},
        lambda job: moved(
            submitted_move(
                job.pk,
                lease_token=job.submit_attempts,
                external_job_id="ext-2",
                external_url="https://extractor.example.org/ops/2",
                request_id="req-2",
                first_poll_in=timedelta(seconds=1),
                remote_ttl=timedelta(hours=1),
            )
        ),
    ),
    "submit failed": (
        states.SUBMITTING,
        {},
        lambda job: moved(
            fail_move(
                job.pk,
                expected_from={states.SUBMITTING},
                code=ErrorCode.REJECTED_BY_EXTRACTOR,
                message="No.",
                lease_token=job.submit_attempts,
            )
        ),
    ),
    "submit retry": (
        states.SUBMITTING,
        {},
        lambda job: moved(
            submit_retry_move(
                job.pk,
                lease_token=job.submit_attempts,
                max_attempts=job.submit_attempts + 1,
                error="reset",
                http_status=503,
                delay=timedelta(seconds=5),
            )
        ),
    ),
    "submit retries spent": (
        states.SUBMITTING,
        {},
        lambda job: moved(
            submit_retry_move(
                job.pk,
                lease_token=job.submit_attempts,
                max_attempts=job.submit_attempts,
                error="reset",
                http_status=503,
                delay=timedelta(seconds=5),
            )
        ),
    ),
    "submit held": (
        states.SUBMITTING,
        {},
        lambda job: moved(
            submit_hold_move(
                job.pk,
                lease_token=job.submit_attempts,
                error="reset",
                http_status=503,
                until=LONG_AGO,
            )
        ),
    ),
    "poll": (
        states.PROCESSING,
        {},
        lambda job: moved(
            poll_move(
                job.pk,
                seen_status=states.PROCESSING,
                to_status=None,
                raw_status="still running",
                progress=60,
                next_poll_in=timedelta(seconds=1),
            )
        ),
    ),
    "poll: processing": (
        states.SUBMITTED,
        {},
        lambda job: moved(
            poll_move(
                job.pk,
                seen_status=states.SUBMITTED,
                to_status=states.PROCESSING,
                raw_status="started",
                progress=10,
                next_poll_in=timedelta(seconds=1),
            )
        ),
    ),
    "poll: cancelled": (
        states.PROCESSING,
        {},
        lambda job: moved(
            poll_move(
                job.pk,
                seen_status=states.PROCESSING,
                to_status=states.CANCELLED,
                raw_status="canceled",
                progress=70,
                next_poll_in=None,
            )
        ),
    ),
    "poll error": (
        states.PROCESSING,
        {},
        lambda job: moved(
            poll_error_move(job, error="reset", http_status=None, next_poll_in=timedelta(seconds=1))
        ),
    ),
    "poll errors spent": (
        states.PROCESSING,
        {"extractor__max_poll_errors": 2},
        lambda job: moved(
            poll_error_move(job, error="reset", http_status=None, next_poll_in=timedelta(seconds=1))
        ),
    ),
    "succeeded": (
        states.PROCESSING,
        {},
        lambda job: jobs_record(
            moves=[
                succeeded_move(
                    job.pk, seen_status=states.PROCESSING, raw_status="done", result=result()
                )
            ],
            results={job.pk: result()},
        ).moved[job.pk],
    ),
}


@pytest.mark.parametrize("name", SERVICE_MOVES)
def test_service_moves_save_every_field_they_change(name):
    status, fields, action = SERVICE_MOVES[name]
    act(busy_job(status, **fields), action)


def test_jobs_transition_writes_each_jobs_own_changes_in_one_batch():
    deferred, failed = busy_job(states.PENDING), busy_job(states.PROCESSING)
    before = {job.pk: columns(job) for job in (deferred, failed)}
    outcome = jobs_transition(
        [defer_move(deferred, LONG_AGO), Move(failed.pk, states.FAILED)], actor=SYSTEM
    )
    for job in outcome.moved.values():
        assert_saved(job, before[job.pk])


def test_jobs_transition_writes_only_the_columns_that_changed():
    job = busy_job(states.PENDING)
    with CaptureQueriesContext(connection) as queries:
        moved(defer_move(job, LONG_AGO))
    # The UPDATE alone (the ORM's) or the first CTE of the batch's statement (PostgreSQL's).
    (update,) = [q["sql"] for q in queries if q["sql"].startswith(("UPDATE", "WITH moved AS"))]
    assignments = update.split(" SET ", 1)[1].split(" FROM ", 1)[0]
    assert [part.split(" = ")[0] for part in assignments.split(", ")] == [
        '"due_at"',
        '"updated_at"',
    ]
