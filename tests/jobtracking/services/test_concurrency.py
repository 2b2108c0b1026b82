"""Races between real concurrent transactions on PostgreSQL: exactly one actor wins."""

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobtracking.errors import ActiveJobExistsError, InvalidTransitionError
from jobtracking.models import ExtractionJob, JobEvent, JobStatusChange
from jobtracking.services import (
    Actor,
    NewJob,
    job_cancel,
    job_create,
    job_requeue,
    job_transition,
    retention,
)
from jobtracking.services.retention import jobs_purge
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("seeded_statuses")]


def race(*actions: Callable[[], object]) -> list[object]:
    """Run the actions in threads released together; return each one's result or exception."""
    barrier = threading.Barrier(len(actions))
    outcomes: list[object] = [None] * len(actions)

    def run(index: int, action: Callable[[], object]) -> None:
        try:
            barrier.wait()
            outcomes[index] = action()
        except Exception as error:
            outcomes[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


@pytest.mark.parametrize("round_", range(5))
def test_succeed_and_cancel_race_has_exactly_one_winner(round_):
    job = ExtractionJobFactory(processing=True)
    outcomes = race(
        lambda: job_transition(
            job_id=job.id,
            to_status="succeeded",
            actor=Actor.system(),
            expected_from={"processing"},
        ),
        lambda: job_cancel(job_id=job.id, actor=Actor.system()),
    )
    winners = [o for o in outcomes if isinstance(o, ExtractionJob)]
    losers = [o for o in outcomes if isinstance(o, InvalidTransitionError)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    job.refresh_from_db()
    assert job.status_id == winners[0].status_id
    (change,) = JobStatusChange.objects.filter(job=job)
    assert (change.from_status_id, change.to_status_id) == ("processing", job.status_id)
    (event,) = JobEvent.objects.filter(job=job)
    assert event.type == f"job.{job.status_id}"


def test_two_workers_taking_the_same_lease_have_exactly_one_winner():
    job = ExtractionJobFactory()
    take = lambda: job_transition(  # noqa: E731
        job_id=job.id, to_status="submitting", actor=Actor.system(), expected_from={"pending"}
    )
    outcomes = race(take, take, take)
    assert sum(isinstance(o, ExtractionJob) for o in outcomes) == 1, outcomes
    assert JobStatusChange.objects.filter(job=job).count() == 1


def test_concurrent_creates_for_one_file_leave_exactly_one_active_job():
    extractor = ExtractorFactory()
    actor = Actor("api", UserFactory())

    def create():
        return job_create(
            NewJob(
                extractor=extractor,
                file_id="shared-file",
                source_url="https://files.example.org/shared.pdf",
            ),
            actor=actor,
        )

    outcomes = race(create, create, create)
    assert sum(isinstance(o, ExtractionJob) for o in outcomes) == 1, outcomes
    assert sum(isinstance(o, ActiveJobExistsError) for o in outcomes) == 2, outcomes
    assert ExtractionJob.objects.filter(file_id="shared-file").count() == 1


class Held:
    """Run `action` in a transaction on another connection and keep that transaction open (its
    locks held) until `release()`."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.ready, self.done = threading.Event(), threading.Event()
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self.run, args=(action,))
        self.thread.start()
        assert self.ready.wait(10), "the held transaction did not start"
        if self.error:
            raise self.error

    def run(self, action) -> None:
        try:
            with transaction.atomic():
                action()
                self.ready.set()
                self.done.wait(30)
        except Exception as error:
            self.error = error
            self.ready.set()
        finally:
            connection.close()

    def release(self) -> None:
        self.done.set()
        self.thread.join(10)


def without_waiting(action: Callable[[], object]) -> object:
    """Run `action` in a transaction that fails at once if it must wait for a lock."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '1s'")
        return action()


def insert_checking_keys_now(extractor) -> None:
    """A job insert holding its key-share lock on the extractor row from the INSERT on. Django
    defers foreign-key checks to COMMIT; checking them at once opens the window in which a
    transition that locked the extractor row would have to wait."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    ExtractionJobFactory(extractor=extractor)


def lease(job) -> Callable[[], object]:
    return lambda: job_transition(
        job_id=job.id, to_status="submitting", actor=Actor.system(), expected_from={"pending"}
    )


def test_a_transition_does_not_wait_on_a_job_insert_for_the_same_extractor():
    extractor = ExtractorFactory()
    job = ExtractionJobFactory(extractor=extractor)
    insert = Held(lambda: insert_checking_keys_now(extractor))
    try:
        moved = without_waiting(lease(job))
    finally:
        insert.release()
    assert moved.status_id == "submitting"


def test_a_job_insert_does_not_wait_on_a_transition_of_the_same_extractor():
    extractor = ExtractorFactory()
    held = Held(lease(ExtractionJobFactory(extractor=extractor)))
    try:
        created = without_waiting(lambda: ExtractionJobFactory(extractor=extractor))
    finally:
        held.release()
    assert created.pk is not None


def test_two_workers_moving_different_jobs_of_one_extractor_never_block_each_other():
    extractor = ExtractorFactory()
    first, second = ExtractionJobFactory.create_batch(2, extractor=extractor)
    held = Held(lease(first))
    try:
        moved = without_waiting(lease(second))
    finally:
        held.release()
    assert moved.status_id == "submitting"
    assert ExtractionJob.objects.get(pk=first.pk).status_id == "submitting"


def test_a_requeue_racing_a_purge_never_loses_the_job_or_its_history(monkeypatch, settings):
    """The purge pauses between choosing its jobs and deleting them while a requeue of one of
    them runs on another connection: either the requeue waits and is refused (the job is gone,
    whole), or it wins and the job stays with its whole history. Never a requeued job deleted."""
    settings.JOBS_RETENTION_DAYS = {"failed": 1}
    old = timezone.now() - timedelta(days=2)
    job = ExtractionJobFactory(failed=True, completed_at=old)
    JobStatusChange.objects.create(
        job=job, from_status_id="processing", to_status_id="failed", attempt=1, actor_type="system"
    )
    outcome: list[object] = []

    def requeue() -> None:
        try:
            outcome.append(job_requeue(job_id=job.pk, actor=Actor.system(), reason="again"))
        except Exception as error:
            outcome.append(error)
        finally:
            connection.close()

    delete_rows = retention._delete_rows
    racer = threading.Thread(target=requeue)

    def delete_after_the_race(queryset):
        if not racer.is_alive() and not outcome:
            racer.start()
            racer.join(3)  # a requeue that is not held back commits within this
        return delete_rows(queryset)

    monkeypatch.setattr(retention, "_delete_rows", delete_after_the_race)
    purged = jobs_purge(ids=[job.pk])
    racer.join(10)
    (result,) = outcome
    if isinstance(result, ExtractionJob):  # the requeue won: the job stays, whole
        assert purged == 0
        kept = ExtractionJob.objects.get(pk=job.pk)
        assert (kept.status_id, kept.attempt) == ("pending", 2)
        assert JobStatusChange.objects.filter(job=job).count() == 2
    else:  # the purge won: the requeue was refused, nothing of the job is left
        assert purged == 1 and result.code == "job_not_found"
        assert not JobStatusChange.objects.filter(job_id=job.pk).exists()
