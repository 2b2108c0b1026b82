import itertools

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobtracking import states
from jobtracking.errors import (
    ActiveJobExistsError,
    ExtractorDisabledError,
    ForceRequiredError,
    InvalidTransitionError,
    JobMovedOnError,
    JobNotFoundError,
    JobValidationError,
)
from jobtracking.models import ActorType, ExtractionJob, JobEvent, JobStatusChange
from jobtracking.services import Actor, NewJob, job_cancel, job_create, job_requeue, job_transition
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory

pytestmark = pytest.mark.django_db

TRAITS = {status: {status: True} for status in states.ALL if status != "pending"}
TRAITS["pending"] = {}


def make_job(status: str, **kwargs) -> ExtractionJob:
    return ExtractionJobFactory(**TRAITS[status], **kwargs)


def create(extractor, actor, **kwargs) -> ExtractionJob:
    defaults = {"file_id": "f-1", "source_url": "https://files.example.org/f-1.pdf"}
    return job_create(NewJob(extractor=extractor, **{**defaults, **kwargs}), actor=actor)


# job_create


def test_job_create_writes_pending_job_audit_row_and_event(extractor, api_actor):
    job = create(extractor, api_actor, file_name="budget.pdf", metadata={"grant": 7})

    job.refresh_from_db()
    assert job.status_id == "pending"
    assert job.attempt == 1
    assert job.requested_by == api_actor.user
    # Due at once; the dispatcher, woken by the creating transaction, hands it to a worker.
    assert (job.due_at, job.claimed_at) == (job.created_at, None)
    assert job.deadline_at == job.created_at + extractor.max_duration
    (change,) = JobStatusChange.objects.filter(job=job)
    assert (change.from_status_id, change.to_status_id) == (None, "pending")
    assert (change.actor_type, change.actor) == ("api", api_actor.user)
    (event,) = JobEvent.objects.filter(job=job)
    assert event.type == "job.created"
    assert event.payload["id"] == str(job.id)
    assert event.payload["metadata"] == {"grant": 7}
    assert event.payload["status"] == "pending"


def test_job_create_stores_an_uploaded_file(extractor, api_actor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    job = create(extractor, api_actor, source_url="", upload=ContentFile(b"hello", name="note.txt"))
    assert job.upload.name.startswith("uploads/")
    assert job.upload.read() == b"hello"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"file_id": " "}, "file_id"),
        ({"source_url": ""}, "source_url"),
        ({"upload": ContentFile(b"x", name="x.txt")}, "source_url"),
    ],
)
def test_job_create_refuses_a_job_of_the_wrong_shape_and_creates_nothing(
    extractor, api_actor, kwargs, field
):
    # The rules of the input's format (sizes, types) are the create serializer's alone; the
    # service refuses what would be no job at all, whoever calls it.
    with pytest.raises(JobValidationError) as caught:
        create(extractor, api_actor, **kwargs)
    assert field in caught.value.fields
    assert not ExtractionJob.objects.exists()
    assert not JobStatusChange.objects.exists()


def test_job_create_refuses_a_disabled_extractor(api_actor):
    with pytest.raises(ExtractorDisabledError):
        create(ExtractorFactory(disabled=True), api_actor)
    assert not ExtractionJob.objects.exists()


def test_job_create_refuses_second_active_job_for_the_file_and_names_the_first(
    extractor, api_actor
):
    first = create(extractor, api_actor)
    with pytest.raises(ActiveJobExistsError) as caught:
        create(extractor, api_actor)
    assert caught.value.extra["job_id"] == str(first.id)
    assert ExtractionJob.objects.count() == 1
    assert JobEvent.objects.count() == 1


def test_job_create_allows_a_new_job_once_the_previous_one_is_terminal(extractor, api_actor):
    first = create(extractor, api_actor)
    job_cancel(job_id=first.id, actor=api_actor)
    second = create(extractor, api_actor)
    assert second.id != first.id


def test_job_create_same_file_on_another_extractor_is_independent(extractor, api_actor):
    create(extractor, api_actor)
    create(ExtractorFactory(), api_actor)
    assert ExtractionJob.objects.count() == 2


# job_transition over the whole table


@pytest.mark.parametrize(
    ("from_status", "to_status"), list(itertools.product(sorted(states.ALL), sorted(states.ALL)))
)
def test_job_transition_allows_exactly_the_table(from_status, to_status):
    job = make_job(from_status)
    allowed = states.is_allowed(from_status, to_status, force=True)

    if allowed:
        moved = job_transition(
            job_id=job.id, to_status=to_status, actor=Actor.system(), force=True, reason="test"
        )
        assert moved.status_id == to_status
        job.refresh_from_db()
        assert job.status_id == to_status
        (change,) = JobStatusChange.objects.filter(job=job)
        assert (change.from_status_id, change.to_status_id) == (from_status, to_status)
        assert change.reason == "test"
        expected_event = states.event_type(from_status, to_status)
        assert list(JobEvent.objects.filter(job=job).values_list("type", flat=True)) == (
            [expected_event] if expected_event else []
        )
        if to_status in states.TERMINAL:
            assert job.due_at is None and job.completed_at is not None
    else:
        with pytest.raises(InvalidTransitionError):
            job_transition(job_id=job.id, to_status=to_status, actor=Actor.system(), force=True)
        job.refresh_from_db()
        assert job.status_id == from_status
        assert not JobStatusChange.objects.filter(job=job).exists()
        assert not JobEvent.objects.filter(job=job).exists()


def test_job_transition_refuses_when_job_moved_on_from_expected_status():
    job = make_job("cancelled")
    with pytest.raises(JobMovedOnError):
        job_transition(
            job_id=job.id,
            to_status="succeeded",
            actor=Actor.system(),
            expected_from={"processing"},
        )
    assert not JobStatusChange.objects.filter(job=job).exists()


def test_job_transition_unknown_job_is_not_found():
    with pytest.raises(JobNotFoundError):
        job_transition(
            job_id="0190d2c4-0000-7000-8000-000000000000", to_status="failed", actor=Actor.system()
        )
    with pytest.raises(JobNotFoundError):
        job_transition(job_id="not-a-uuid", to_status="failed", actor=Actor.system())


def test_job_transition_runs_side_effects_only_after_commit(django_capture_on_commit_callbacks):
    job = make_job("processing")
    ran = []
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job_transition(
            job_id=job.id,
            to_status="succeeded",
            actor=Actor.system(),
            on_commit=lambda: ran.append(job.id),
        )
    assert ran == []
    assert len(callbacks) == 1
    callbacks[0]()
    assert ran == [job.id]


def test_job_transition_records_the_command_actor_with_os_user():
    operator = UserFactory(username="operator")
    job = make_job("failed")
    job_requeue(job_id=job.id, actor=Actor.command(operator), reason="extractor fixed")
    change = JobStatusChange.objects.get(job=job)
    assert change.actor_type == ActorType.COMMAND
    assert change.actor == operator
    assert change.reason == "extractor fixed"
    assert change.details["os_user"]


# job_requeue


def test_job_requeue_starts_a_new_attempt_with_fresh_counters():
    job = make_job(
        "failed",
        attempt=2,
        submit_attempts=3,
        poll_count=9,
        poll_error_count=2,
        external_job_id="ext-9",
        external_url="https://x.example.org/ops/9",
        external_status="failed",
        progress=50,
    )
    job_requeue(job_id=job.id, actor=Actor.system(), reason="retry")
    job.refresh_from_db()
    assert job.status_id == "pending"
    assert job.attempt == 3
    assert (job.submit_attempts, job.poll_count, job.poll_error_count, job.progress) == (0, 0, 0, 0)
    assert (job.external_job_id, job.external_url, job.external_status) == ("", "", "")
    assert (job.error_code, job.error_message) == ("", "")
    assert job.completed_at is None and job.due_at is not None
    assert job.deadline_at > job.due_at
    change = JobStatusChange.objects.get(job=job)
    assert (change.from_status_id, change.attempt) == ("failed", 3)
    assert JobEvent.objects.get(job=job).type == "job.requeued"


def test_job_requeue_of_succeeded_needs_force():
    job = make_job("succeeded")
    with pytest.raises(ForceRequiredError):
        job_requeue(job_id=job.id, actor=Actor.system())
    job.refresh_from_db()
    assert job.status_id == "succeeded"
    job_requeue(job_id=job.id, actor=Actor.system(), force=True)
    job.refresh_from_db()
    assert (job.status_id, job.attempt) == ("pending", 2)


# submitting → pending is in the table as a lease's hand-back: still no requeue.
@pytest.mark.parametrize("status", sorted(states.ACTIVE))
def test_job_requeue_of_an_active_job_is_refused(status):
    job = make_job(status)
    with pytest.raises(InvalidTransitionError):
        job_requeue(job_id=job.id, actor=Actor.system())
    job.refresh_from_db()
    assert (job.status_id, job.attempt) == (status, 1)
    assert not JobStatusChange.objects.filter(job=job).exists()


def test_job_requeue_is_refused_while_another_job_for_the_file_is_active(extractor):
    old = make_job("failed", extractor=extractor, file_id="same")
    active = make_job("pending", extractor=extractor, file_id="same")
    with pytest.raises(ActiveJobExistsError) as caught:
        job_requeue(job_id=old.id, actor=Actor.system())
    assert caught.value.extra["job_id"] == str(active.id)
    old.refresh_from_db()
    assert (old.status_id, old.attempt) == ("failed", 1)
    assert not JobStatusChange.objects.filter(job=old).exists()


def test_job_requeue_refuses_a_disabled_extractor():
    job = make_job("failed", extractor=ExtractorFactory(disabled=True))
    with pytest.raises(ExtractorDisabledError):
        job_requeue(job_id=job.id, actor=Actor.system())
    job.refresh_from_db()
    assert job.status_id == "failed"


# job_cancel


@pytest.mark.parametrize("status", sorted(states.ACTIVE))
def test_job_cancel_moves_an_active_job_to_cancelled(status):
    job = make_job(status)
    job_cancel(job_id=job.id, actor=Actor.system(), reason="not needed")
    job.refresh_from_db()
    assert job.status_id == "cancelled"
    assert job.due_at is None and job.lease_expires_at is None
    assert JobEvent.objects.get(job=job).type == "job.cancelled"


@pytest.mark.parametrize("status", sorted(states.TERMINAL))
def test_job_cancel_of_a_terminal_job_is_refused(status):
    job = make_job(status)
    with pytest.raises(InvalidTransitionError):
        job_cancel(job_id=job.id, actor=Actor.system())


# the audit trail is append-only


def test_services_never_update_or_delete_history_rows(extractor, api_actor):
    history_tables = (JobStatusChange._meta.db_table, JobEvent._meta.db_table)
    with CaptureQueriesContext(connection) as queries:
        job = create(extractor, api_actor)
        job_transition(job_id=job.id, to_status="submitting", actor=Actor.system())
        job_transition(job_id=job.id, to_status="submitted", actor=Actor.system())
        job_cancel(job_id=job.id, actor=api_actor)
        job_requeue(job_id=job.id, actor=api_actor)
        job_transition(job_id=job.id, to_status="failed", actor=Actor.system())
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(("UPDATE", "DELETE"))
        and any(f'"{table}"' in q["sql"] for table in history_tables)
    ]
    assert writes == []
    assert JobStatusChange.objects.filter(job=job).count() == 6


def test_status_change_rows_refuse_update_and_delete(extractor, api_actor):
    job = create(extractor, api_actor)
    change = JobStatusChange.objects.get(job=job)
    change.reason = "rewritten"
    with pytest.raises(Exception, match="append-only"):
        change.save()
    with pytest.raises(Exception, match="append-only"):
        change.delete()
    assert JobStatusChange.objects.get(pk=change.pk).reason == ""
