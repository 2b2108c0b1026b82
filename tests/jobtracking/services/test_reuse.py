"""Identical documents are not paid twice (`services.reuse`), against the real sandbox: a job
whose document, client, extractor, model and options match an extracted success within the
extractor's window takes its result with no extractor call."""

import hashlib
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobtracking import states
from jobtracking.engine.tasks import process_jobs
from jobtracking.models import (
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    UsageCountedBy,
    UsageRecord,
)
from jobtracking.representation import job_representation
from jobtracking.services import Actor, NewJob, job_cancel, job_create, job_requeue
from jobtracking.services.engine import jobs_start
from jobtracking.services.usage import usage_roll_up
from jobtracking.usage_selectors import usage_summary
from tests.factories import UserFactory
from tests.jobtracking.engine.test_tasks import SAMPLES, run_to_end, step

pytestmark = pytest.mark.django_db

NAME = "financial-statement.pdf"  # three pages


@pytest.fixture
def extractor(sandbox_extractor):
    sandbox_extractor.reuse_window = timedelta(hours=1)
    sandbox_extractor.save()
    return sandbox_extractor


@pytest.fixture
def client_actor():
    return Actor("api", UserFactory())


def create(extractor, actor, file_id, name=NAME, **fields) -> ExtractionJob:
    if "source_url" not in fields:
        fields["upload"] = ContentFile((SAMPLES / name).read_bytes(), name=name)
    return job_create(
        NewJob(extractor=extractor, file_id=file_id, file_name=name, **fields), actor=actor
    )


def sandbox_calls(sandbox, job) -> int:
    return sum(
        n for key, n in sandbox.stats()["posts_by_key"].items() if key.startswith(str(job.pk))
    )


def test_an_identical_document_takes_the_result_with_no_extractor_call(
    sandbox, extractor, client_actor
):
    first = run_to_end(create(extractor, client_actor, "a"))
    again = step(create(extractor, client_actor, "b"))

    assert again.status_id == states.SUCCEEDED
    assert sandbox_calls(sandbox, first) == 1
    assert sandbox_calls(sandbox, again) == 0
    assert (again.reused_from_job, again.reused_from_attempt) == (first.pk, 1)
    assert (again.external_job_id, again.submit_attempts, again.started_at) == ("", 0, None)
    source = ExtractionResult.objects.get(job=first)
    copy = ExtractionResult.objects.get(job=again, attempt=1)
    assert copy.load_payload() == source.load_payload()
    assert (copy.page_count, copy.content_sha256) == (source.page_count, source.content_sha256)
    change = JobStatusChange.objects.get(job=again, to_status=states.SUCCEEDED)
    assert change.from_status_id == states.PENDING
    assert change.reason == f"Result reused from job {first.pk} attempt 1"
    assert change.details["reused_from"] == {"job": str(first.pk), "attempt": 1}
    assert change.details["pages_saved"] == 3
    assert JobEvent.objects.filter(job=again, type="job.succeeded").count() == 1
    shown = job_representation(again)
    assert shown["reused_from"]["job"] == str(first.pk)
    assert (shown["reused_from"]["attempt"], shown["reuse_result"]) == (1, True)


def test_a_reused_attempt_costs_no_pages_and_counts_its_sources_as_saved(
    sandbox, extractor, client_actor
):
    run_to_end(create(extractor, client_actor, "a"))
    again = step(create(extractor, client_actor, "b"))

    record = UsageRecord.objects.get(job_id=again.pk)
    assert (record.pages, record.pages_saved, record.counted_by) == (0, 3, UsageCountedBy.REUSED)
    today = timezone.now().date()

    def summary():
        (line,) = usage_summary(client=None, start=today, end=today, group_by=["client"])
        return line.pages, line.jobs, line.pages_saved

    # One billed attempt of three pages; the reused one billed nothing and saved three.
    assert summary() == (3, 1, 3)
    usage_roll_up()
    assert summary() == (3, 1, 3)


@pytest.mark.parametrize(
    "differs",
    [
        "window_off",
        "opted_out",
        "other_client",
        "other_options",
        "other_model",
        "window_passed",
        "other_document",
    ],
)
def test_the_extractor_is_called_unless_everything_matches(
    sandbox, extractor, client_actor, differs
):
    first = run_to_end(create(extractor, client_actor, "a", options={"pages": "1-3"}))
    actor, fields, name = client_actor, {"options": {"pages": "1-3"}}, NAME
    if differs == "window_off":
        extractor.reuse_window = None
        extractor.save()
    elif differs == "opted_out":
        fields["reuse_result"] = False
    elif differs == "other_client":
        actor = Actor("api", UserFactory())
    elif differs == "other_options":
        fields["options"] = {"pages": "1"}
    elif differs == "other_model":
        extractor.model_id = "v2"
        extractor.save()
    elif differs == "window_passed":
        ExtractionJob.objects.filter(pk=first.pk).update(
            completed_at=timezone.now() - timedelta(hours=2)
        )
    elif differs == "other_document":
        name = "grant-report.txt"
    again = run_to_end(create(extractor, actor, "b", name=name, **fields))

    assert again.status_id == states.SUCCEEDED
    assert again.reused_from_job is None
    assert sandbox_calls(sandbox, again) == 1


def test_a_url_job_takes_part_when_its_client_declares_the_digest(sandbox, extractor, client_actor):
    first = run_to_end(create(extractor, client_actor, "a"))
    digest = hashlib.sha256((SAMPLES / NAME).read_bytes()).hexdigest()
    url = "https://files.example.org/statement.pdf"  # never fetched: no call is made

    declared = step(create(extractor, client_actor, "b", source_url=url, file_sha256=digest))

    assert declared.status_id == states.SUCCEEDED
    assert declared.reused_from_job == first.pk


def test_a_reused_result_is_no_source_its_extraction_is(sandbox, extractor, client_actor):
    """The window counts from an extraction: a chain of reuses never stretches it."""
    first = run_to_end(create(extractor, client_actor, "a"))
    second = step(create(extractor, client_actor, "b"))
    ExtractionJob.objects.filter(pk=first.pk).update(
        completed_at=timezone.now() - timedelta(hours=2)
    )

    third = run_to_end(create(extractor, client_actor, "c"))

    assert second.reused_from_job == first.pk
    assert third.reused_from_job is None
    assert sandbox_calls(sandbox, third) == 1


def test_a_requeue_clears_where_the_result_came_from(sandbox, extractor, client_actor):
    run_to_end(create(extractor, client_actor, "a"))
    again = step(create(extractor, client_actor, "b", reuse_result=True))

    requeued = job_requeue(job_id=again.pk, actor=client_actor, force=True)

    assert (requeued.attempt, requeued.reused_from_job, requeued.reused_from_attempt) == (
        2,
        None,
        None,
    )


def test_a_forced_requeue_of_a_reused_job_calls_the_extractor(sandbox, extractor, client_actor):
    """A succeeded job is requeued (with force) to be extracted again: not to be handed the
    same result."""
    run_to_end(create(extractor, client_actor, "a"))
    again = step(create(extractor, client_actor, "b"))
    assert again.reused_from_job is not None

    staff = Actor("admin", UserFactory(is_staff=True))
    again = run_to_end(job_requeue(job_id=again.pk, actor=staff, reason="Check it", force=True))

    assert (again.status_id, again.attempt, again.reused_from_job) == (states.SUCCEEDED, 2, None)
    assert sandbox_calls(sandbox, again) == 1
    record = UsageRecord.objects.get(job_id=again.pk, attempt=2)
    assert (record.pages, record.pages_saved) == (3, 0)


def test_a_plain_requeue_of_a_failed_job_may_take_an_identical_result(
    sandbox, extractor, client_actor
):
    sandbox.configure(permanent_failure_rate=1.0)
    failed = run_to_end(create(extractor, client_actor, "b"))
    sandbox.configure(permanent_failure_rate=0.0)
    first = run_to_end(create(extractor, client_actor, "a"))
    assert failed.status_id == states.FAILED

    again = step(job_requeue(job_id=failed.pk, actor=client_actor))

    assert (again.status_id, again.reused_from_job) == (states.SUCCEEDED, first.pk)
    assert sandbox_calls(sandbox, again) == 1  # its first attempt's only


def test_a_result_stored_as_a_file_is_copied_to_a_file_of_its_own(
    sandbox, extractor, client_actor, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    settings.JOBS_RESULT_INLINE_MAX_BYTES = 10
    first = run_to_end(create(extractor, client_actor, "a"))
    again = step(create(extractor, client_actor, "b"))

    source = ExtractionResult.objects.get(job=first)
    copy = ExtractionResult.objects.get(job=again)
    assert source.payload_file and copy.payload_file
    assert copy.payload_file.name != source.payload_file.name
    source.payload_file.delete(save=False)  # the source purged: the copy stands alone
    assert copy.load_payload()["pages"]


def claim(*jobs) -> None:
    ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).update(claimed_at=timezone.now())


def test_a_source_that_cannot_be_copied_costs_only_its_own_job_the_reuse(
    sandbox, extractor, client_actor, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    settings.JOBS_RESULT_INLINE_MAX_BYTES = 10
    broken = run_to_end(create(extractor, client_actor, "a"))
    sound = run_to_end(create(extractor, client_actor, "c", name="grant-report.txt"))
    ExtractionResult.objects.get(job=broken).payload_file.delete(save=False)
    lost = create(extractor, client_actor, "b")
    served = create(extractor, client_actor, "d", name="grant-report.txt")
    claim(lost, served)

    started = jobs_start(job_ids=[lost.pk, served.pk])

    lost.refresh_from_db()
    served.refresh_from_db()
    assert (served.status_id, served.reused_from_job) == (states.SUCCEEDED, sound.pk)
    assert lost.status_id == states.SUBMITTING  # to the extractor instead
    assert [planned.job.pk for planned in started.submits] == [lost.pk]


def reuse_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "extractionresult" in q["sql"]]


def test_without_a_window_the_batch_start_looks_for_no_source(sandbox, sandbox_extractor):
    jobs = [create(sandbox_extractor, Actor("api"), f"f{n}") for n in range(3)]
    claim(*jobs)

    with CaptureQueriesContext(connection) as captured:
        jobs_start(job_ids=[job.pk for job in jobs])

    assert reuse_queries(captured) == []


def test_one_query_finds_the_sources_of_a_whole_batch(sandbox, extractor, client_actor):
    names = ["financial-statement.pdf", "grant-report.txt", "budget.csv"]
    for name in names:
        run_to_end(create(extractor, client_actor, f"first-{name}", name=name))
    jobs = [create(extractor, client_actor, f"again-{name}", name=name) for name in names]
    claim(*jobs)

    with CaptureQueriesContext(connection) as captured:
        jobs_start(job_ids=[job.pk for job in jobs])

    finds = [sql for sql in reuse_queries(captured) if sql.lstrip().startswith("SELECT")]
    assert len(finds) == 1
    assert ExtractionJob.objects.filter(
        pk__in=[job.pk for job in jobs], status=states.SUCCEEDED
    ).count() == len(names)


def batch(*jobs) -> list[ExtractionJob]:
    """Run one batch task over `jobs`, as the dispatcher hands out jobs due together."""
    claim(*jobs)
    process_jobs([str(job.pk) for job in jobs])
    for job in jobs:
        job.refresh_from_db()
    return list(jobs)


def test_two_identical_jobs_in_one_batch_cost_one_extractor_call(sandbox, extractor, client_actor):
    first, second = batch(
        create(extractor, client_actor, "a"), create(extractor, client_actor, "b")
    )

    # The second waits a round for the first's result: not failed, not held, no history.
    assert first.status_id in states.IN_FLIGHT
    assert second.status_id == states.PENDING and second.due_at > timezone.now()
    assert JobStatusChange.objects.filter(job=second).count() == 1
    first, second = run_to_end(first), run_to_end(second)

    assert (second.status_id, second.reused_from_job) == (states.SUCCEEDED, first.pk)
    assert (sandbox_calls(sandbox, first), sandbox_calls(sandbox, second)) == (1, 0)


@pytest.mark.parametrize("end", ["fails", "is_cancelled"])
def test_a_job_waiting_for_an_identical_one_is_submitted_when_that_one_fails(
    sandbox, extractor, client_actor, end
):
    if end == "fails":
        sandbox.configure(permanent_failure_rate=1.0)
    first, second = batch(
        create(extractor, client_actor, "a"), create(extractor, client_actor, "b")
    )
    assert second.status_id == states.PENDING
    if end == "fails":
        first = run_to_end(first)
        sandbox.configure(permanent_failure_rate=0.0)
    else:
        first = job_cancel(job_id=first.pk, actor=client_actor)
    assert first.status_id in {states.FAILED, states.CANCELLED}

    second = run_to_end(second)

    assert (second.status_id, second.reused_from_job) == (states.SUCCEEDED, None)
    assert sandbox_calls(sandbox, second) == 1


def test_identical_documents_of_two_clients_are_not_shared(sandbox, extractor, client_actor):
    first, other = batch(
        create(extractor, client_actor, "a"), create(extractor, Actor("api", UserFactory()), "b")
    )

    assert first.status_id in states.IN_FLIGHT and other.status_id in states.IN_FLIGHT
    assert run_to_end(other).reused_from_job is None
    assert (sandbox_calls(sandbox, first), sandbox_calls(sandbox, other)) == (1, 1)


def test_a_job_waits_for_an_older_identical_one_only_in_the_first_half_of_its_time(
    sandbox, extractor, client_actor
):
    older, younger = create(extractor, client_actor, "a"), create(extractor, client_actor, "b")
    # An older one pending in another batch leads; it never waits for the younger.
    (younger,) = batch(younger)
    assert younger.status_id == states.PENDING
    (older,) = batch(older)
    assert older.status_id in states.IN_FLIGHT

    late = timezone.now() + extractor.max_duration / 2 - timedelta(seconds=5)
    ExtractionJob.objects.filter(pk=younger.pk).update(deadline_at=late, due_at=None)
    (younger,) = batch(younger)

    assert younger.status_id in states.IN_FLIGHT  # its own call, not a missed deadline
    assert sandbox_calls(sandbox, younger) == 1
