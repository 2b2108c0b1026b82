"""Each action on a batch in each of its statuses does what `batch_states.ALLOWED` says: a test
per move, through the services the API and the admin call."""

import pytest
from django.utils import timezone

from jobtracking import batch_states, states
from jobtracking.errors import BatchClosedError, BatchFinishedError
from jobtracking.models import JobEvent
from jobtracking.selectors import batch_summary
from jobtracking.services import Actor
from jobtracking.services.batches import (
    batch_add_jobs,
    batch_cancel,
    batch_close,
    batch_requeue,
)
from tests.factories import BatchFactory, ExtractionJobFactory, ExtractorFactory
from tests.jobtracking.services.test_batches import items

# The jobs that put a batch in each status.
SHAPES = {
    batch_states.OPEN: ({}, ["failed"]),
    batch_states.RUNNING: ({"closed": True}, ["processing", "failed"]),
    batch_states.COMPLETED: ({"closed": True}, ["succeeded"]),
    batch_states.COMPLETED_WITH_FAILURES: ({"closed": True}, ["succeeded", "failed"]),
    batch_states.CANCELLED: ({"closed": True, "cancelled_at": timezone.now()}, ["cancelled"]),
}
REFUSALS = {batch_states.ADD_JOBS: BatchClosedError, batch_states.CANCEL: BatchFinishedError}
ACTOR = Actor("api")


def batch_in(status: str):
    row, job_statuses = SHAPES[status]
    batch = BatchFactory(**row)
    for job_status in job_statuses:
        ExtractionJobFactory(batch=batch, **{job_status: True})
    assert batch_summary(batch).status(batch) == status
    return batch


def act(action: str, batch) -> None:
    if action == batch_states.ADD_JOBS:
        batch_add_jobs(batch_id=batch.pk, items=items(ExtractorFactory(), "new"), actor=ACTOR)
    elif action == batch_states.CLOSE:
        batch_close(batch_id=batch.pk)
    elif action == batch_states.CANCEL:
        batch_cancel(batch_id=batch.pk, actor=ACTOR)
    else:
        batch_requeue(batch_id=batch.pk, actor=ACTOR)


@pytest.mark.parametrize("status", batch_states.STATUSES)
@pytest.mark.parametrize("action", sorted(batch_states.ALLOWED))
def test_each_action_in_each_status_is_what_the_table_says(db, action, status):
    batch = batch_in(status)
    events_before = JobEvent.objects.filter(batch=batch).count()
    if batch_states.may(action, status):
        act(action, batch)
        return
    with pytest.raises(REFUSALS[action]):
        act(action, batch)
    # Refused, it changed nothing: not its row, not its jobs, not its events.
    batch.refresh_from_db()
    assert batch_summary(batch).status(batch) == status
    assert JobEvent.objects.filter(batch=batch).count() == events_before


def test_only_the_refusals_the_table_names_exist():
    refused = {
        action
        for action, allowed in batch_states.ALLOWED.items()
        if allowed != set(batch_states.STATUSES)
    }
    assert refused == set(REFUSALS)


@pytest.mark.parametrize("status", sorted(batch_states.FINISHED))
def test_a_finished_batch_is_not_cancelled_and_publishes_nothing(db, status):
    batch = batch_in(status)
    with pytest.raises(BatchFinishedError, match="nothing to cancel"):
        batch_cancel(batch_id=batch.pk, actor=ACTOR)
    batch.refresh_from_db()
    assert batch.cancelled_at is None
    assert not JobEvent.objects.filter(batch=batch, type=states.BATCH_CANCELLED).exists()


def test_a_running_batch_is_cancelled_with_its_active_jobs(db):
    batch = batch_in(batch_states.RUNNING)
    outcome = batch_cancel(batch_id=batch.pk, actor=ACTOR)
    assert len(outcome.moved) == 1
    batch.refresh_from_db()
    assert batch_summary(batch).status(batch) == batch_states.CANCELLED
