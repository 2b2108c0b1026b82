"""Batches under real concurrent transactions on PostgreSQL: a job's transition never waits on
its batch's row, and `batch.completed` is published exactly once however the last changes
race (see `jobtracking.services.batch_completion`)."""

import pytest
from django.db import connection

from jobtracking.errors import BatchClosedError
from jobtracking.models import Batch, ExtractionJob, JobEvent
from jobtracking.services import SYSTEM, Actor, NewJob, job_requeue, job_transition
from jobtracking.services.batch_completion import batches_complete
from jobtracking.services.batches import batch_add_jobs, batch_close
from tests.factories import BatchFactory, ExtractionJobFactory, ExtractorFactory
from tests.jobtracking.services.test_concurrency import Held, race, without_waiting

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("seeded_statuses")]


def hold_batch_row(batch: Batch) -> Held:
    """The batch's row locked FOR UPDATE (the strongest row lock) on another connection."""

    def lock() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {Batch._meta.db_table} WHERE id = %s FOR UPDATE", [batch.pk]
            )

    return Held(lock)


def move(job, to_status: str):
    return lambda: job_transition(job_id=job.pk, to_status=to_status, actor=SYSTEM)


@pytest.mark.parametrize("closed", [False, True])
def test_a_job_of_a_batch_moves_while_the_batch_row_is_held(closed):
    batch = BatchFactory(closed=closed)
    job, _other = ExtractionJobFactory.create_batch(2, batch=batch)
    held = hold_batch_row(batch)
    try:
        for status in ("submitting", "submitted", "processing", "succeeded"):
            moved = without_waiting(move(job, status))
            assert moved.status_id == status
    finally:
        held.release()
    assert ExtractionJob.objects.get(pk=job.pk).status_id == "succeeded"


def completions(batch: Batch) -> int:
    return JobEvent.objects.filter(batch=batch, type="batch.completed").count()


@pytest.mark.parametrize("round_", range(5))
def test_the_last_two_jobs_ending_together_publish_one_batch_completed(round_):
    batch = BatchFactory(closed=True)
    first, second = ExtractionJobFactory.create_batch(2, batch=batch, processing=True)
    outcomes = race(move(first, "succeeded"), move(second, "failed"))
    assert all(isinstance(o, ExtractionJob) for o in outcomes), outcomes
    assert completions(batch) == 1
    (event,) = JobEvent.objects.filter(batch=batch, type="batch.completed")
    assert event.payload["status"] == "completed_with_failures"
    assert event.payload["by_status"]["succeeded"] == event.payload["by_status"]["failed"] == 1


@pytest.mark.parametrize("round_", range(5))
def test_closing_while_the_last_job_ends_publishes_one_batch_completed(round_):
    batch = BatchFactory()
    job = ExtractionJobFactory(batch=batch, processing=True)
    outcomes = race(move(job, "succeeded"), lambda: batch_close(batch_id=batch.pk))
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    assert completions(batch) == 1


@pytest.mark.parametrize("round_", range(3))
def test_jobs_added_while_the_batch_closes_are_in_it_or_refused_whole(round_):
    extractor = ExtractorFactory()
    batch = BatchFactory()
    actor = Actor("api", batch.requested_by)
    news = [
        NewJob(extractor=extractor, file_id=f"f-{n}", source_url=f"https://files.example.org/{n}")
        for n in range(20)
    ]
    added, _closed = race(
        lambda: batch_add_jobs(batch_id=batch.pk, items=news, actor=actor),
        lambda: batch_close(batch_id=batch.pk),
    )
    count = ExtractionJob.objects.filter(batch=batch).count()
    if isinstance(added, BatchClosedError):
        assert count == 0
    else:
        assert count == 20
    # Either way, the closed batch completes only once its jobs have ended.
    assert completions(batch) == (1 if count == 0 else 0)


@pytest.mark.parametrize("round_", range(5))
def test_a_requeue_racing_the_completion_check_never_loses_the_next_completion(round_):
    """The batch's last job has ended (its check not yet run) while a requeue of one of its
    jobs runs: whichever wins, once the requeued job ends again the batch is completed and
    its last batch.completed came after that end."""
    batch = BatchFactory(closed=True)
    ExtractionJobFactory(batch=batch, succeeded=True)
    again = ExtractionJobFactory(batch=batch, failed=True)
    outcomes = race(
        lambda: batches_complete([batch.pk]),
        lambda: job_requeue(job_id=again.pk, actor=SYSTEM),
    )
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    for status in ("submitting", "submitted", "succeeded"):
        move(again, status)()
    ended = ExtractionJob.objects.get(pk=again.pk).completed_at
    last = JobEvent.objects.filter(batch=batch, type="batch.completed").latest("id")
    assert last.created_at >= ended
    assert last.payload["by_status"]["succeeded"] == 2
    assert Batch.objects.get(pk=batch.pk).completed_at is not None
