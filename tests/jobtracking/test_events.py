"""An event's payload is the job as the API shows it, written from what the locked read of the
job loaded: publishing an event costs no query of its own."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobtracking.models import JobEvent
from jobtracking.services import SYSTEM, job_transition
from jobtracking.services.engine import jobs_start
from tests.factories import ExtractionJobFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_transitions_event_names_the_requester_without_a_query_of_its_own(
    django_assert_num_queries,
):
    job = ExtractionJobFactory(submitted=True, requested_by=UserFactory(username="platform"))
    # The locked read (with extractor and requester) and the statement that writes the job, its
    # audit row, event and deliveries: as many as before events named the requester.
    with django_assert_num_queries(2):
        job_transition(job_id=job.pk, to_status="processing", actor=SYSTEM)
    payload = JobEvent.objects.get(job=job).payload
    assert (payload["status"], payload["requested_by"]) == ("processing", "platform")


def test_a_workers_batch_names_each_requester_without_a_query_per_job(django_assert_num_queries):
    now = timezone.now()
    overdue = [
        ExtractionJobFactory(
            processing=True,
            claimed_at=now,
            deadline_at=now - timedelta(seconds=1),
            requested_by=UserFactory(username=f"client-{n}"),
        )
        for n in range(3)
    ]
    # A savepoint and its release around the locked read (with extractors and requesters) and
    # the statement that writes the jobs, audit rows, events, deliveries and the usage rows of
    # the attempts the deadline ended.
    with django_assert_num_queries(4):
        jobs_start(job_ids=[job.pk for job in overdue])
    named = dict(JobEvent.objects.filter(type="job.timed_out").values_list("job_id", "payload"))
    assert {job.pk: named[job.pk]["requested_by"] for job in overdue} == {
        job.pk: job.requested_by.username for job in overdue
    }


def test_an_event_of_a_job_without_a_requester_names_none():
    job = ExtractionJobFactory(submitted=True, requested_by=None)
    job_transition(job_id=job.pk, to_status="processing", actor=SYSTEM)
    assert JobEvent.objects.get(job=job).payload["requested_by"] is None
