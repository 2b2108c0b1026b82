"""Priorities end to end: a client's bulk backlog does not hold another client's jobs, with the
real cluster, dispatcher and sandbox."""

import pytest
from django.core.files.base import ContentFile
from django.db import transaction

from jobtracking.models import ActorType, ExtractionJob, JobStatusChange, Priority
from jobtracking.services import Actor, NewJob, job_create
from tests.e2e.conftest import SAMPLES, wait_for_terminal
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def upload_jobs(extractor, actor, count: int, prefix: str, priority: Priority) -> list:
    body = (SAMPLES / "budget.csv").read_bytes()
    return [
        job_create(
            NewJob(
                extractor=extractor,
                file_id=f"{prefix}-{n}",
                file_name="budget.csv",
                upload=ContentFile(body, name="budget.csv"),
                priority=priority,
            ),
            actor=actor,
        ).pk
        for n in range(count)
    ]


def submitted_at(job_ids) -> dict:
    return dict(
        JobStatusChange.objects.filter(job_id__in=job_ids, to_status="submitting")
        .order_by("-changed_at")
        .values_list("job_id", "changed_at")
    )


def test_a_later_clients_jobs_overtake_a_bulk_backlog(stack, sandbox, extractor):
    sandbox.configure(latency_min=0.05, latency_max=0.1)
    a = Actor(ActorType.API, UserFactory(username="platform-loader"))
    b = Actor(ActorType.API, UserFactory(username="grants-officer"))
    with transaction.atomic():  # the whole backlog is due before B asks
        backlog = upload_jobs(extractor, a, 400, "a", Priority.BULK)
    urgent = upload_jobs(extractor, b, 5, "b", Priority.NORMAL)
    jobs = wait_for_terminal(backlog + urgent, 240, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    submitted = submitted_at(backlog + urgent)
    last_urgent = max(submitted[pk] for pk in urgent)
    overtaken = [pk for pk in backlog if submitted[pk] > last_urgent]
    # In due order B would wait for all 400. It waits only for what the broker and the workers
    # already held when it came (a few batches), while most of A's backlog is still to come.
    assert len(overtaken) >= 200, f"only {len(overtaken)} of A's jobs went after B's"
    assert ExtractionJob.objects.filter(pk__in=urgent, priority=Priority.NORMAL).count() == 5
