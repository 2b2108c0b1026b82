"""Batches through their services: creation with jobs, adding, closing, completion (published
once), cancel and requeue through the job state machine, the aggregate and its status."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobtracking import states
from jobtracking.batch_states import STATUSES as BATCH_STATUSES
from jobtracking.errors import (
    BatchClosedError,
    BatchReferenceExistsError,
    IdempotencyKeyReusedError,
)
from jobtracking.models import Batch, ExtractionJob, JobEvent, JobStatusChange, WebhookDelivery
from jobtracking.selectors import batch_status_filter, batch_summary
from jobtracking.services import SYSTEM, Actor, NewJob, job_transition
from jobtracking.services.batch_completion import batches_complete, batches_complete_due
from jobtracking.services.batches import (
    NewBatch,
    batch_add_jobs,
    batch_cancel,
    batch_close,
    batch_create,
    batch_requeue,
)
from tests.factories import (
    BatchFactory,
    ExtractionJobFactory,
    UserFactory,
    WebhookSubscriptionFactory,
)

pytestmark = pytest.mark.django_db


def items(extractor, *file_ids: str) -> list[NewJob]:
    return [
        NewJob(
            extractor=extractor,
            file_id=file_id,
            source_url=f"https://files.example.org/{file_id}.pdf",
        )
        for file_id in file_ids
    ]


def events(batch: Batch, kind: str) -> list[JobEvent]:
    return list(JobEvent.objects.filter(batch=batch, type=kind))


def finish(job_id, status: str = "succeeded") -> None:
    """Move a job of a batch to `status` the way the engine does, through the state machine."""

    def failed(job):
        job.error_code, job.error_message = "extraction_failed", "Corrupt."

    job_transition(job_id=job_id, to_status="submitting", actor=SYSTEM)
    job_transition(job_id=job_id, to_status="submitted", actor=SYSTEM)
    job_transition(
        job_id=job_id,
        to_status=status,
        actor=SYSTEM,
        prepare=failed if status == "failed" else None,
    )


@pytest.fixture
def made(extractor, api_actor):
    """An open batch of three jobs."""
    return batch_create(
        NewBatch(client_reference="grant-4711", metadata={"grant": 4711}),
        items(extractor, "a", "b", "c"),
        actor=api_actor,
    )


def test_batch_create_creates_its_jobs_in_it_and_publishes_batch_created(made, client_user):
    batch = made.batch
    assert made.created and [o.job.batch_id for o in made.outcomes] == [batch.pk] * 3
    assert ExtractionJob.objects.filter(batch=batch, requested_by=client_user).count() == 3
    (created,) = events(batch, "batch.created")
    assert created.job_id is None
    assert created.payload["id"] == str(batch.pk) and created.payload["total"] == 3
    assert created.payload["status"] == "open" and created.payload["by_status"]["pending"] == 3


def test_batch_create_gives_each_refused_item_its_outcome(extractor, api_actor):
    ExtractionJobFactory(extractor=extractor, file_id="busy")
    made = batch_create(NewBatch(), items(extractor, "busy", "free"), actor=api_actor)
    refused, created = made.outcomes
    assert refused.error.code == "active_job_exists" and created.job.batch_id == made.batch.pk


def test_batch_create_refuses_a_client_reference_the_client_used(made, extractor, api_actor):
    with pytest.raises(BatchReferenceExistsError) as refused:
        batch_create(NewBatch(client_reference="grant-4711"), [], actor=api_actor)
    assert refused.value.extra["batch_id"] == str(made.batch.pk)
    other = Actor("api", UserFactory())
    assert batch_create(NewBatch(client_reference="grant-4711"), [], actor=other).created
    assert Batch.objects.filter(client_reference="grant-4711").count() == 2


def test_batch_create_replays_an_idempotency_key_and_refuses_its_reuse(extractor, api_actor):
    new = NewBatch(idempotency_key="k-1", request_fingerprint="f-1")
    first = batch_create(new, items(extractor, "a"), actor=api_actor)
    replay = batch_create(new, items(extractor, "a"), actor=api_actor)
    assert not replay.created and replay.batch.pk == first.batch.pk
    assert Batch.objects.count() == 1 and ExtractionJob.objects.count() == 1
    reused = NewBatch(idempotency_key="k-1", request_fingerprint="f-2")
    with pytest.raises(IdempotencyKeyReusedError):
        batch_create(reused, [], actor=api_actor)


def test_batch_add_jobs_puts_them_in_an_open_batch(made, extractor, api_actor):
    outcomes = batch_add_jobs(batch_id=made.batch.pk, items=items(extractor, "d"), actor=api_actor)
    assert outcomes[0].job.batch_id == made.batch.pk
    assert batch_summary(made.batch).total == 4


def test_a_closed_batch_refuses_new_jobs_and_creates_none(made, extractor, api_actor):
    batch_close(batch_id=made.batch.pk)
    with pytest.raises(BatchClosedError):
        batch_add_jobs(batch_id=made.batch.pk, items=items(extractor, "d"), actor=api_actor)
    assert not ExtractionJob.objects.filter(file_id="d").exists()


def test_the_last_job_of_a_closed_batch_publishes_batch_completed_once(
    made, django_capture_on_commit_callbacks
):
    batch = made.batch
    first, second, third = (o.job.pk for o in made.outcomes)
    with django_capture_on_commit_callbacks(execute=True):
        batch_close(batch_id=batch.pk)
        finish(first)
        finish(second, "failed")
    assert not events(batch, "batch.completed")
    with django_capture_on_commit_callbacks(execute=True):
        finish(third)
    (completed,) = events(batch, "batch.completed")
    payload = completed.payload
    assert payload["status"] == "completed_with_failures" and payload["progress"] == 100.0
    assert payload["by_status"]["succeeded"] == 2 and payload["by_status"]["failed"] == 1
    assert payload["failures"] == {"count": 1, "by_error_code": {"extraction_failed": 1}}
    batch.refresh_from_db()
    assert batch.completed_at is not None
    # Checking again (the safety net, a duplicate callback) publishes nothing more.
    assert batches_complete([batch.pk]) == [] and batches_complete_due() == 0
    assert len(events(batch, "batch.completed")) == 1


def test_an_open_batch_completes_when_it_is_closed_after_its_jobs_ended(
    made, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for outcome in made.outcomes:
            finish(outcome.job.pk)
    assert not events(made.batch, "batch.completed")
    with django_capture_on_commit_callbacks(execute=True):
        batch_close(batch_id=made.batch.pk)
        batch_close(batch_id=made.batch.pk)
    (completed,) = events(made.batch, "batch.completed")
    assert completed.payload["status"] == "completed"


def test_a_batch_created_closed_and_empty_completes_at_once(
    api_actor, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        made = batch_create(NewBatch(close=True), [], actor=api_actor)
    (completed,) = events(made.batch, "batch.completed")
    assert completed.payload["total"] == 0


def test_the_safety_net_completes_a_batch_whose_check_was_lost(made):
    """Without on-commit callbacks (a process killed after its commit), nobody checked."""
    batch_close(batch_id=made.batch.pk)
    for outcome in made.outcomes:
        finish(outcome.job.pk)
    assert not events(made.batch, "batch.completed")
    assert batches_complete_due() == 1
    assert len(events(made.batch, "batch.completed")) == 1


def test_batch_cancel_cancels_its_active_jobs_each_audited(
    made, client_user, django_capture_on_commit_callbacks
):
    done = made.outcomes[0].job.pk
    with django_capture_on_commit_callbacks(execute=True):
        finish(done)
        outcome = batch_cancel(batch_id=made.batch.pk, actor=Actor("api", client_user), reason="r")
    assert len(outcome.moved) == 2 and not outcome.refused
    jobs = ExtractionJob.objects.filter(batch=made.batch)
    assert set(jobs.exclude(pk=done).values_list("status", flat=True)) == {"cancelled"}
    assert jobs.get(pk=done).status_id == "succeeded"
    changes = JobStatusChange.objects.filter(job__batch=made.batch, to_status="cancelled")
    assert {(c.reason, c.actor_id) for c in changes} == {("r", client_user.pk)}
    assert changes.count() == 2
    (cancelled,) = events(made.batch, "batch.cancelled")
    assert cancelled.payload["status"] == "cancelled"
    assert cancelled.payload["by_status"]["cancelled"] == 2
    assert not events(made.batch, "batch.completed")
    batch_cancel(batch_id=made.batch.pk, actor=SYSTEM)
    assert len(events(made.batch, "batch.cancelled")) == 1


def test_batch_requeue_requeues_its_failures_and_it_completes_again(
    made, django_capture_on_commit_callbacks
):
    succeeded, failed, timed_out = (o.job.pk for o in made.outcomes)
    with django_capture_on_commit_callbacks(execute=True):
        batch_close(batch_id=made.batch.pk)
        finish(succeeded)
        finish(failed, "failed")
        finish(timed_out, "cancelled")
    assert len(events(made.batch, "batch.completed")) == 1
    with django_capture_on_commit_callbacks(execute=True):
        outcome = batch_requeue(batch_id=made.batch.pk, actor=SYSTEM, reason="again")
    assert set(outcome.moved) == {failed, timed_out}
    jobs = ExtractionJob.objects.filter(batch=made.batch)
    assert jobs.get(pk=succeeded).attempt == 1
    assert {job.attempt for job in jobs.exclude(pk=succeeded)} == {2}
    made.batch.refresh_from_db()
    assert made.batch.completed_at is None
    assert batch_summary(made.batch).status(made.batch) == "running"
    with django_capture_on_commit_callbacks(execute=True):
        finish(failed)
        finish(timed_out)
    second = events(made.batch, "batch.completed")[-1]
    assert len(events(made.batch, "batch.completed")) == 2
    assert second.payload["status"] == "completed"


def test_batch_requeue_needs_force_for_succeeded_jobs(made):
    for outcome in made.outcomes:
        finish(outcome.job.pk)
    assert not batch_requeue(batch_id=made.batch.pk, actor=SYSTEM).moved
    forced = batch_requeue(batch_id=made.batch.pk, actor=SYSTEM, force=True, priority=0)
    assert len(forced.moved) == 3
    assert set(ExtractionJob.objects.values_list("priority", flat=True)) == {0}


def test_batch_requeue_refuses_a_job_whose_file_another_job_holds(made, extractor):
    first, *others = (o.job.pk for o in made.outcomes)
    for pk in (first, *others):
        finish(pk, "failed")
    holder = ExtractionJobFactory(extractor=extractor, file_id="a")
    outcome = batch_requeue(batch_id=made.batch.pk, actor=SYSTEM)
    assert set(outcome.moved) == set(others)
    assert outcome.refused[first].code == "active_job_exists"
    assert ExtractionJob.objects.get(pk=holder.pk).status_id == "pending"


def test_batch_summary_counts_by_status_and_error_code_with_its_moments():
    batch = BatchFactory(closed=True)
    start = timezone.now() - timedelta(hours=1)
    ExtractionJobFactory(batch=batch, created_at=start)
    ExtractionJobFactory(batch=batch, failed=True, created_at=start + timedelta(minutes=1))
    ExtractionJobFactory(batch=batch, timed_out=True)
    ExtractionJobFactory(batch=batch, cancelled=True)
    ExtractionJobFactory(batch=batch, succeeded=True)
    ExtractionJobFactory()  # in no batch
    summary = batch_summary(batch, with_failed_jobs=True)
    assert summary.total == 5 and summary.active == 1 and summary.failed == 3
    assert summary.progress == 80.0
    assert summary.failures_by_code == {
        "extraction_failed": 1,
        "deadline_exceeded": 1,
        "cancelled": 1,
    }
    assert summary.first_created_at == start
    assert len(summary.failed_jobs) == 3
    assert summary.status(batch) == "running"


@pytest.mark.parametrize("status", BATCH_STATUSES)
def test_the_batch_status_filter_agrees_with_the_summary(status):
    shapes = {
        "open": (BatchFactory(), ["succeeded"]),
        "running": (BatchFactory(closed=True), ["processing", "succeeded"]),
        "completed": (BatchFactory(closed=True), ["succeeded"]),
        "completed_with_failures": (BatchFactory(closed=True), ["succeeded", "failed"]),
        "cancelled": (BatchFactory(closed=True, cancelled_at=timezone.now()), ["cancelled"]),
    }
    for batch, job_statuses in shapes.values():
        for job_status in job_statuses:
            ExtractionJobFactory(
                batch=batch, **{job_status: True} if job_status != "pending" else {}
            )
    for batch, _ in shapes.values():
        assert batch_summary(batch).status(batch) in BATCH_STATUSES
    found = Batch.objects.filter(batch_status_filter(status))
    assert [b.pk for b in found] == [shapes[status][0].pk]
    assert batch_summary(shapes[status][0]).status(shapes[status][0]) == status


def test_batch_events_reach_only_the_subscriptions_that_may_see_the_batch(api_actor, client_user):
    own = WebhookSubscriptionFactory(created_by=client_user)
    other = WebhookSubscriptionFactory(created_by=UserFactory())
    everyone = WebhookSubscriptionFactory(created_by=UserFactory(is_superuser=True), all_jobs=True)
    jobs_only = WebhookSubscriptionFactory(created_by=client_user, event_types=["job.created"])
    made = batch_create(NewBatch(), [], actor=api_actor)
    (event,) = events(made.batch, states.BATCH_CREATED)
    receivers = set(
        WebhookDelivery.objects.filter(event=event).values_list("subscription", flat=True)
    )
    assert receivers == {own.pk, everyone.pk}
    assert other.pk not in receivers and jobs_only.pk not in receivers
