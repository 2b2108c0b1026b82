"""Batches end to end: their events (`batch.created`, `batch.completed`, `batch.cancelled`) go
through the outbox, the pull feed and webhooks exactly once per change of the batch, while
workers and dispatchers are SIGKILLed, and a completion whose check died with its process is
published by the scheduled safety net. The stack runs the django-q2 schedules as deployed
(`setup_schedules`); the API is called in this process, on the database the stack works on."""

import os
import re
import signal
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command

from jobtracking import states
from jobtracking.models import Batch, JobEvent, WebhookDelivery
from jobtracking.services import Actor
from jobtracking.services.batch_completion import batches_complete_due
from jobtracking.services.batches import NewBatch, batch_close, batch_create
from tests.e2e.conftest import (
    assert_each_transition_published_once,
    assert_no_duplicate_submissions,
    idle_workers,
    kill_at_random,
    new_jobs,
    wait_for_terminal,
)
from tests.factories import WebhookSubscriptionFactory
from tests.jobtracking.api.conftest import client_for, service_account
from tests.processes import manage, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# django-q2's cluster runs due schedules every 30 s (its first round 30 s after it starts), and
# the safety net is due every minute: a lost completion is published within about 90 s.
SAFETY_NET_SECONDS = 95
BUSY_WORKER_TITLE = re.compile(r"^qcluster Process-\w+ processing")


@pytest.fixture
def stack_env():
    # The dispatcher's delivery lane posts the webhooks to the sandbox's receiver, on loopback.
    return {"OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8"}


@pytest.fixture
def client_user(db):
    return service_account("batch-client")


@pytest.fixture
def receiver(sandbox, client_user):
    """The client's webhook endpoint for its batches' events: the sandbox's demo receiver."""
    return WebhookSubscriptionFactory(
        url=f"{sandbox.url}/_sandbox/webhooks",
        event_types=list(states.BATCH_EVENT_TYPES),
        created_by=client_user,
    )


@pytest.fixture
def scheduled(stack):
    """The stack with its housekeeping schedules, the safety net among them, as deployed."""
    call_command("setup_schedules", stdout=StringIO())
    return stack


def create_batch(extractor, user, count: int, *, close: bool, prefix: str) -> tuple[Batch, list]:
    made = batch_create(
        NewBatch(close=close), new_jobs(extractor, count, prefix), actor=Actor("api", user)
    )
    return made.batch, [outcome.job.pk for outcome in made.outcomes]


def batch_event_types(batch: Batch) -> list[str]:
    return list(JobEvent.objects.filter(batch=batch).order_by("id").values_list("type", flat=True))


def wait_for_batch_event(batch: Batch, event_type: str, timeout: float, stack) -> JobEvent:
    try:
        wait_until(
            lambda: JobEvent.objects.filter(batch=batch, type=event_type).exists(),
            timeout,
            f"{event_type} of batch {batch.pk}",
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{stack.logs()}") from None
    return JobEvent.objects.get(batch=batch, type=event_type)


def assert_counts_agree(payload: dict, jobs) -> None:
    """The event's counts are the jobs' statuses, none of them active any more."""
    counts = Counter(job.status_id for job in jobs)
    assert payload["by_status"] == {s.code: counts[s.code] for s in states.STATUSES}
    assert (payload["total"], payload["active"], payload["progress"]) == (len(jobs), 0, 100.0)


def assert_in_feed_once(user, event: JobEvent) -> None:
    """The client's pull feed (`GET /api/v1/events/?type=…`) shows the event, once."""
    api = client_for(user)

    def published() -> list[dict]:
        answer = api.get("/api/v1/events/", {"type": event.type})
        assert answer.status_code == 200, answer.content
        return answer.json()["results"]

    # The feed shows an event once it has settled (JOBS_EVENT_FEED_SETTLE_SECONDS).
    wait_until(published, 10, f"{event.type} in the feed")
    (shown,) = published()
    assert (shown["id"], shown["event_id"], shown["batch"]) == (
        event.pk,
        str(event.event_id),
        str(event.batch_id),
    )
    assert shown["payload"]["by_status"] == event.payload["by_status"]


def assert_webhooks_delivered(sandbox, batch: Batch) -> None:
    """Each of the batch's events reached the receiver (at least once, under its own id) and
    its delivery is recorded as delivered; nothing else arrived."""
    events = JobEvent.objects.filter(batch=batch)
    wait_until(
        lambda: (
            not WebhookDelivery.objects.filter(event__in=events).exclude(state="delivered").exists()
        ),
        20,
        "the batch's webhooks to be delivered",
    )
    assert WebhookDelivery.objects.filter(event__in=events).count() == events.count()
    received = {hook["headers"]["webhook-id"] for hook in sandbox.webhooks()}
    assert received == {str(event.event_id) for event in events}


def busy_worker(stack, timeout: float) -> int:
    """The pid of a worker of the cluster in the middle of a task."""
    found = []

    def busy() -> bool:
        titles = stack.titles().items()
        found[:] = [pid for pid, title in titles if BUSY_WORKER_TITLE.search(title)]
        return bool(found)

    wait_until(busy, timeout, "a busy worker")
    return found[0]


def test_a_closed_batch_under_kills_publishes_created_and_completed_once(
    scheduled, sandbox, extractor, client_user, receiver
):
    sandbox.configure(latency_min=0.2, latency_max=1.0, transient_rate=0.2, poll_retry_after=0.3)
    batch, job_ids = create_batch(extractor, client_user, 30, close=True, prefix="k")
    killed = kill_at_random(scheduled, seconds=8, seed=11)
    assert killed["dispatcher"] >= 1 and killed["worker"] >= 1, killed

    jobs = wait_for_terminal(job_ids, 120, scheduled)
    assert {job.status_id for job in jobs} == {"succeeded"}
    assert_no_duplicate_submissions(sandbox, jobs)
    assert_each_transition_published_once(job_ids)
    # Published by the check after the last job's commit, or, had that worker been killed
    # between the two, by the safety net.
    completed = wait_for_batch_event(batch, states.BATCH_COMPLETED, SAFETY_NET_SECONDS, scheduled)
    assert batch_event_types(batch) == [states.BATCH_CREATED, states.BATCH_COMPLETED]
    assert completed.payload["status"] == "completed"
    assert_counts_agree(completed.payload, jobs)
    assert_in_feed_once(client_user, completed)
    assert_webhooks_delivered(sandbox, batch)


def test_a_completion_whose_check_died_with_its_process_is_published_by_the_safety_net(
    scheduled, sandbox, extractor, client_user, receiver, monkeypatch
):
    sandbox.configure(latency_min=0.2, latency_max=0.5, permanent_failure_rate=0.3)
    batch, job_ids = create_batch(extractor, client_user, 6, close=False, prefix="n")
    jobs = wait_for_terminal(job_ids, 60, scheduled)
    # The close commits and its process dies before checking: its completion check never runs.
    monkeypatch.setattr(
        "jobtracking.services.batches.batches_complete_on_commit", lambda batch_ids: None
    )
    batch_close(batch_id=batch.pk)
    assert Batch.objects.get(pk=batch.pk).completed_at is None
    assert batch_event_types(batch) == [states.BATCH_CREATED]

    # The safety net, as its schedule or an operator runs it, in a process of its own.
    reaped = manage("reap_stuck_jobs", env=scheduled.env)
    assert reaped.returncode == 0, reaped.stderr
    assert "completed 1 batch(es)" in reaped.stdout
    completed = wait_for_batch_event(batch, states.BATCH_COMPLETED, 5, scheduled)
    assert batch_event_types(batch) == [states.BATCH_CREATED, states.BATCH_COMPLETED]
    assert_counts_agree(completed.payload, jobs)
    assert Batch.objects.get(pk=batch.pk).completed_at is not None
    assert_in_feed_once(client_user, completed)
    assert_webhooks_delivered(sandbox, batch)


def test_a_batch_cancelled_in_flight_with_a_worker_killed_publishes_cancelled_once(
    scheduled, sandbox, extractor, client_user, receiver
):
    # Jobs run 2-3 s at the extractor and half its answers come 1.5 s late: the cancel finds
    # them on their way there or at it, and a worker in the middle of a call.
    sandbox.configure(latency_min=2, latency_max=3, slow_rate=0.5, slow_seconds=1.5)
    batch, job_ids = create_batch(extractor, client_user, 12, close=True, prefix="c")
    os.kill(busy_worker(scheduled, 20), signal.SIGKILL)

    answer = client_for(client_user).post(
        f"/api/v1/batches/{batch.pk}/cancel/", {"reason": "Grant withdrawn"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["moved"] >= 1

    jobs = wait_for_terminal(job_ids, 60, scheduled)
    # The workers' tasks for the cancelled jobs have all ended: nothing of theirs is pending.
    wait_until(lambda: len(idle_workers(scheduled)) == 2, 40, "the workers to be idle")
    assert Counter(job.status_id for job in jobs)["cancelled"] == answer.json()["moved"]
    assert_no_duplicate_submissions(sandbox, jobs)
    assert_each_transition_published_once(job_ids)
    # Nothing after the cancel completes it: not its jobs' last moves, not the safety net.
    assert batches_complete_due() == 0
    assert batch_event_types(batch) == [states.BATCH_CREATED, states.BATCH_CANCELLED]
    cancelled = JobEvent.objects.get(batch=batch, type=states.BATCH_CANCELLED)
    # Written with the cancel, after its moves: the jobs' statuses then are their last ones.
    assert cancelled.payload["status"] == "cancelled"
    assert_counts_agree(cancelled.payload, jobs)
    assert_in_feed_once(client_user, cancelled)
    assert_webhooks_delivered(sandbox, batch)
