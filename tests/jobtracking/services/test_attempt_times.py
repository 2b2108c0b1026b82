"""A job's times describe its current attempt: `started_at` once the extractor has shown work,
however quickly, and a turnaround that counts from the attempt's start, not from the creation of
a job that was requeued."""

from datetime import timedelta

import pytest
from django.utils import timezone

from extraction.errors import ErrorCode
from jobtracking import states
from jobtracking.models import TURNAROUND, ExtractionJob
from jobtracking.representation import job_representation
from jobtracking.selectors import job_stats
from jobtracking.services import SYSTEM, Actor, Move, job_cancel, job_requeue, jobs_transition
from jobtracking.services.engine import Result, fail_move, succeeded_move
from tests.factories import ExtractionJobFactory

pytestmark = pytest.mark.django_db


def moved(move: Move) -> ExtractionJob:
    outcome = jobs_transition([move], actor=SYSTEM)
    assert not outcome.refused, outcome.refused
    return ExtractionJob.objects.get(pk=move.job_id)


def test_jobs_transition_stamps_started_at_when_a_job_succeeds_unseen_running():
    job = ExtractionJobFactory(submitted=True)
    done = Result({"pages": []}, 0, "v1", 0)
    job = moved(succeeded_move(job.pk, seen_status="submitted", raw_status="done", result=done))
    assert job.started_at == job.completed_at is not None


def test_jobs_transition_stamps_started_at_when_the_extractor_fails_a_job_it_ran():
    job = ExtractionJobFactory(submitted=True)
    job = moved(
        fail_move(
            job.pk,
            expected_from={states.SUBMITTED},
            code=ErrorCode.EXTRACTION_FAILED,
            message="unreadable",
            remote=("failed", 0),
        )
    )
    assert job.started_at == job.completed_at


def test_jobs_transition_keeps_the_first_started_at():
    job = ExtractionJobFactory(processing=True)
    first = job.started_at
    done = Result({"pages": []}, 0, "v1", 0)
    job = moved(succeeded_move(job.pk, seen_status="processing", raw_status="done", result=done))
    assert job.started_at == first < job.completed_at


@pytest.mark.parametrize("trait", ["pending", "submitting", "submitted"])
def test_job_cancel_leaves_started_at_empty_when_no_work_was_shown(trait):
    job = ExtractionJobFactory(**({trait: True} if trait != "pending" else {}))
    job_cancel(job_id=job.pk, actor=Actor("api"))
    assert ExtractionJob.objects.get(pk=job.pk).started_at is None


def test_jobs_transition_leaves_started_at_empty_when_a_submission_is_refused():
    job = ExtractionJobFactory(submitting=True)
    refused = fail_move(
        job.pk, expected_from={states.SUBMITTING}, code=ErrorCode.EXTRACTION_FAILED, message="no"
    )
    assert moved(refused).started_at is None


@pytest.fixture
def requeued_then_succeeded():
    """A job that failed a day after its creation, was requeued a week later and succeeded 30 s
    after its requeue."""
    created = timezone.now() - timedelta(days=8)
    job = ExtractionJobFactory(
        failed=True, created_at=created, completed_at=created + timedelta(days=1)
    )
    job = job_requeue(job_id=job.pk, actor=SYSTEM)
    requeued = job.requeued_at
    ExtractionJob.objects.filter(pk=job.pk).update(
        status="succeeded",
        submitted_at=requeued + timedelta(seconds=10),
        completed_at=requeued + timedelta(seconds=30),
    )
    return ExtractionJob.objects.select_related("extractor", "requested_by").get(pk=job.pk)


def test_job_requeue_starts_the_new_attempt_now():
    job = ExtractionJobFactory(failed=True, created_at=timezone.now() - timedelta(days=2))
    before = timezone.now()
    job = job_requeue(job_id=job.pk, actor=SYSTEM)
    assert before <= ExtractionJob.objects.get(pk=job.pk).requeued_at <= timezone.now()
    assert job.attempt_started_at == job.requeued_at


def test_turnaround_counts_from_the_current_attempt(requeued_then_succeeded):
    job = requeued_then_succeeded
    assert job.turnaround == timedelta(seconds=30)
    durations = job_representation(job)["durations"]
    assert durations == {
        "waiting_seconds": 10.0,
        "processing_seconds": 20.0,
        "turnaround_seconds": 30.0,
    }


def test_turnaround_of_a_first_attempt_counts_from_its_creation():
    created = timezone.now() - timedelta(minutes=5)
    done = created + timedelta(seconds=42)
    job = ExtractionJobFactory(succeeded=True, created_at=created, completed_at=done)
    assert job.requeued_at is None and job.turnaround == timedelta(seconds=42)
    assert ExtractionJobFactory(processing=True).turnaround is None


def test_turnaround_in_queries_is_the_models_rule(requeued_then_succeeded):
    first = ExtractionJobFactory(succeeded=True, created_at=timezone.now() - timedelta(minutes=3))
    in_sql = dict(ExtractionJob.objects.annotate(t=TURNAROUND).values_list("pk", "t"))
    assert in_sql == {
        requeued_then_succeeded.pk: requeued_then_succeeded.turnaround,
        first.pk: ExtractionJob.objects.get(pk=first.pk).turnaround,
    }


def test_job_stats_turnaround_leaves_out_the_time_before_a_requeue(requeued_then_succeeded):
    stats = job_stats(jobs=ExtractionJob.objects.all(), window=timedelta(hours=1))
    assert stats["turnaround_seconds"]["p50"] == pytest.approx(30.0)
