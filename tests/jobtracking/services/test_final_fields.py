"""A job that ends says what happened at the extractor: its final word, or that none came
(no status word, progress 0), never "running" at 70 % on a failed job. A requeue resets them."""

import pytest
from django.utils import timezone

from extraction.registry import get_client
from jobtracking.models import ExtractionJob
from jobtracking.services import Actor, job_cancel, job_requeue
from tests.jobtracking.engine.test_tasks import new_job, run_to_end, step

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(sandbox, sandbox_extractor):
    """A job the extractor reports running, part of the way through."""
    sandbox.configure(latency_min=2, latency_max=2)
    job = step(new_job(sandbox_extractor))
    for _ in range(20):
        job = step(job)
        if job.status_id == "processing" and job.progress > 0:
            return job
    raise AssertionError("the job never reported progress")


def fields(job: ExtractionJob) -> tuple[str, str, int]:
    job.refresh_from_db()
    return job.status_id, job.external_status, job.progress


def test_a_succeeded_job_keeps_the_extractors_final_word(running):
    assert fields(run_to_end(running)) == ("succeeded", "succeeded", 100)


def test_a_job_the_extractor_failed_keeps_its_final_word(sandbox, sandbox_extractor):
    sandbox.configure(permanent_failure_rate=1.0)
    job = run_to_end(new_job(sandbox_extractor))
    status, word, _progress = fields(job)
    assert (status, word) == ("failed", "failed")


def test_a_job_failed_without_a_final_word_says_none_came(running, sandbox):
    sandbox.configure(lost_rate=1.0)
    sandbox.reset()  # the extractor forgets the job: 404 on the next poll
    assert fields(run_to_end(running)) == ("failed", "", 0)


def test_a_timed_out_job_says_no_final_word_came(running):
    ExtractionJob.objects.filter(pk=running.pk).update(deadline_at=timezone.now())
    assert fields(step(running)) == ("timed_out", "", 0)


def test_a_job_cancelled_by_a_person_says_no_final_word_came(running):
    job_cancel(job_id=running.pk, actor=Actor("api"))
    assert fields(running) == ("cancelled", "", 0)


def test_a_job_cancelled_by_the_extractor_keeps_its_word(running, sandbox_extractor):
    get_client(sandbox_extractor).cancel(running.external_url)
    status, word, _progress = fields(run_to_end(running))
    assert (status, word) == ("cancelled", "canceled")


def test_a_requeue_resets_what_the_extractor_said(running):
    job_cancel(job_id=running.pk, actor=Actor("api"))
    job = job_requeue(job_id=running.pk, actor=Actor("api"))
    assert (job.external_status, job.progress, job.external_job_id) == ("", 0, "")
