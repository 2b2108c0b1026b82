"""The engine in batches: the batch form of the state machine, the batch task against the real
sandbox, the in-flight cap, rate slots and the dispatcher's grouping and wake-up."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from jobtracking.engine.dispatcher import WORKERS, Dispatcher, broker_depth, claim_due_jobs
from jobtracking.engine.tasks import process_jobs
from jobtracking.errors import JobMovedOnError
from jobtracking.infra.wakeup import Listener
from jobtracking.models import ExtractionJob, JobEvent, JobStatusChange, RateSlot, ServiceHeartbeat
from jobtracking.services import (
    SYSTEM,
    Actor,
    Move,
    NewJob,
    job_cancel,
    job_create,
    jobs_transition,
)
from jobtracking.services.engine import jobs_start, reserve_slots
from jobtracking.services.housekeeping import heartbeat_record
from tests.factories import ExtractionJobFactory, ExtractorFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback_sources(settings):
    # These jobs' source URLs are the sandbox's own, on loopback.
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def url_jobs(extractor, count: int, sandbox) -> list[ExtractionJob]:
    return [
        job_create(
            NewJob(
                extractor=extractor,
                file_id=f"batch-{n}",
                file_name="budget.csv",
                source_url=f"{sandbox.url}/healthz",
            ),
            actor=Actor("api"),
        )
        for n in range(count)
    ]


def claim(jobs) -> list[str]:
    ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).update(
        claimed_at=timezone.now(), due_at=timezone.now()
    )
    return [str(job.pk) for job in jobs]


# The batch form of the single writer


def test_jobs_transition_drops_a_job_that_moved_on_and_writes_the_others():
    jobs = ExtractionJobFactory.create_batch(4, processing=True)
    job_cancel(job_id=jobs[0].pk, actor=Actor("api"))
    moves = [Move(job.pk, "failed", expected_from={"processing"}) for job in jobs]
    outcome = jobs_transition(moves, actor=SYSTEM)
    assert set(outcome.moved) == {job.pk for job in jobs[1:]}
    assert isinstance(outcome.refused[jobs[0].pk], JobMovedOnError)
    statuses = dict(ExtractionJob.objects.values_list("pk", "status"))
    assert statuses == {jobs[0].pk: "cancelled", **{job.pk: "failed" for job in jobs[1:]}}
    # The dropped job has only its cancellation; each other job one audit row and one event.
    assert JobStatusChange.objects.filter(job=jobs[0]).count() == 1
    for job in jobs[1:]:
        (change,) = JobStatusChange.objects.filter(job=job)
        assert (change.from_status_id, change.to_status_id) == ("processing", "failed")
        assert JobEvent.objects.get(job=job).type == "job.failed"


def test_jobs_transition_refuses_what_the_table_forbids_in_a_batch_too():
    done, active = ExtractionJobFactory(succeeded=True), ExtractionJobFactory()
    outcome = jobs_transition(
        [Move(done.pk, "pending"), Move(active.pk, "cancelled")], actor=SYSTEM
    )
    assert outcome.refused[done.pk].code == "force_required"
    assert set(outcome.moved) == {active.pk}


@pytest.mark.parametrize("size", [5, 40])
def test_jobs_transition_costs_the_same_statements_for_any_batch_size(
    size, django_assert_max_num_queries
):
    jobs = ExtractionJobFactory.create_batch(size, processing=True)
    moves = [Move(job.pk, "failed", expected_from={"processing"}) for job in jobs]
    # Lock, update, audit insert, event insert, subscriptions (and the savepoint pair).
    with django_assert_max_num_queries(6):
        jobs_transition(moves, actor=SYSTEM)
    assert ExtractionJob.objects.filter(status="failed").count() == size


# The batch task against the sandbox


def test_a_batch_goes_from_pending_to_succeeded_in_two_steps(sandbox, sandbox_extractor):
    jobs = url_jobs(sandbox_extractor, 6, sandbox)
    process_jobs(claim(jobs))
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"submitted"}
    time.sleep(0.1)
    process_jobs(claim(jobs))
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"succeeded"}
    assert sandbox.stats()["requests"] == {"POST": 6, "GET": 12}
    for job in jobs:
        assert [(c.from_status_id, c.to_status_id) for c in job.status_changes.all()] == [
            (None, "pending"),
            ("pending", "submitting"),
            ("submitting", "submitted"),
            ("submitted", "succeeded"),
        ]


def test_a_redelivered_batch_does_nothing_twice(sandbox, sandbox_extractor):
    jobs = url_jobs(sandbox_extractor, 5, sandbox)
    ids = claim(jobs)
    process_jobs(ids)
    process_jobs(ids)  # the broker's second copy
    stats = sandbox.stats()
    assert set(stats["posts_by_key"].values()) == {1} and len(stats["posts_by_key"]) == 5
    assert JobStatusChange.objects.filter(to_status="submitted").count() == 5


def test_a_job_cancelled_during_its_batch_is_dropped_and_cancelled_at_the_extractor(
    sandbox, sandbox_extractor, monkeypatch
):
    jobs = url_jobs(sandbox_extractor, 3, sandbox)
    ids = claim(jobs)
    started = jobs_start(job_ids=ids)
    # Cancel one job while its submission is on the wire.
    job_cancel(job_id=jobs[0].pk, actor=Actor("api"), reason="changed my mind")
    monkeypatch.setattr("jobtracking.engine.tasks.jobs_start", lambda job_ids: started)
    process_jobs(ids)
    statuses = dict(ExtractionJob.objects.values_list("pk", "status"))
    assert statuses[jobs[0].pk] == "cancelled"
    assert {statuses[jobs[1].pk], statuses[jobs[2].pk]} == {"submitted"}
    assert sandbox.stats()["requests"]["DELETE"] == 1


def test_a_source_url_is_checked_again_at_each_submission(sandbox, sandbox_extractor, settings):
    jobs = url_jobs(sandbox_extractor, 1, sandbox)
    settings.OUTBOUND_ALLOWED_NETWORKS = []  # loopback is no longer allowed (or the name moved)
    process_jobs(claim(jobs))
    job = ExtractionJob.objects.get(pk=jobs[0].pk)
    assert (job.status_id, job.error_code) == ("failed", "source_unusable")
    assert "non-public address (loopback)" in job.error_message
    assert sandbox.stats()["posts_by_key"] == {}


def test_the_in_flight_cap_leases_only_the_room_left_and_defers_the_rest(
    sandbox, sandbox_extractor
):
    sandbox_extractor.max_in_flight = 3
    sandbox_extractor.save()
    ExtractionJobFactory(extractor=sandbox_extractor, processing=True)
    jobs = url_jobs(sandbox_extractor, 5, sandbox)
    started = jobs_start(job_ids=claim(jobs))
    assert len(started.submits) == 2
    waiting = ExtractionJob.objects.filter(pk__in=[j.pk for j in jobs], status="pending")
    assert waiting.count() == 3
    assert all(job.due_at > timezone.now() and job.claimed_at is None for job in waiting)


# Rate slots


def test_rate_slots_are_evenly_spaced_shared_and_never_more_than_the_horizon_ahead(settings):
    settings.JOBS_PRIORITY_RESERVED_SHARE = 0  # one lane: the lanes are tested with priorities
    extractor = ExtractorFactory(submit_rate=10)
    now = timezone.now()
    slots, free_at = reserve_slots(extractor, RateSlot.SUBMIT, 30, now)
    # One second ahead at 10/s: 11 calls, 0.1 s apart, from now.
    assert len(slots) == 11
    assert [round((at - now).total_seconds(), 3) for at in slots[:3]] == [0.0, 0.1, 0.2]
    assert free_at == slots[-1] + timedelta(seconds=0.1)
    # The next reservation (another worker) starts where this one stopped.
    more, _ = reserve_slots(extractor, RateSlot.SUBMIT, 30, now)
    assert more == []
    later, _ = reserve_slots(extractor, RateSlot.SUBMIT, 2, now + timedelta(seconds=1))
    assert later[0] == free_at


def test_azure_extractors_default_to_the_services_limits():
    azure = ExtractorFactory(azure=True)
    assert (azure.rate_limit("submit"), azure.rate_limit("poll")) == (15, 50)
    assert ExtractorFactory(azure=True, submit_rate=0).rate_limit("submit") == 0
    assert ExtractorFactory().rate_limit("poll") == 0


def test_a_batch_beyond_its_rate_defers_the_rest_until_a_slot_is_free(
    settings, sandbox, sandbox_extractor
):
    settings.JOBS_PRIORITY_RESERVED_SHARE = 0
    sandbox_extractor.submit_rate = 2
    sandbox_extractor.save()
    jobs = url_jobs(sandbox_extractor, 6, sandbox)
    started = jobs_start(job_ids=claim(jobs))
    assert len(started.submits) == 3  # now, +0.5 s, +1 s
    deferred = ExtractionJob.objects.filter(pk__in=[j.pk for j in jobs], status="pending")
    assert deferred.count() == 3
    slot = RateSlot.objects.get(extractor=sandbox_extractor, kind="submit")
    assert {job.due_at for job in deferred} == {slot.next_free_at}


# The dispatcher


def test_the_dispatcher_enqueues_one_task_per_batch_of_one_extractor(
    monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.JOBS_TASK_BATCH_SIZE = 4
    monkeypatch.setattr(Conf, "SYNC", False)  # into the real queue, not run inline
    now = timezone.now()
    first, second = ExtractorFactory(), ExtractorFactory()
    jobs = ExtractionJobFactory.create_batch(6, extractor=first, due_at=now)
    jobs += ExtractionJobFactory.create_batch(3, extractor=second, due_at=now)
    with django_capture_on_commit_callbacks(execute=True):
        claimed = claim_due_jobs(batch_size=100, lease=timedelta(seconds=30))
    assert len(claimed) == 9
    batches = [SignedPackage.loads(row.payload)["args"][0] for row in OrmQ.objects.all()]
    extractor_of = {str(job.pk): job.extractor_id for job in jobs}
    assert sorted(len(batch) for batch in batches) == [2, 3, 4]
    assert sorted(pk for batch in batches for pk in batch) == sorted(extractor_of)
    for batch in batches:
        assert len({extractor_of[pk] for pk in batch}) == 1


def test_the_dispatcher_claims_nothing_while_the_broker_holds_enough_work(
    monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.JOBS_DISPATCH_QUEUED_PER_WORKER = 2  # no cluster has said: one worker's worth
    monkeypatch.setattr(Conf, "SYNC", False)
    job = ExtractionJobFactory(due_at=timezone.now())
    for _ in range(2):
        async_task("jobtracking.engine.tasks.process_jobs", [])
    dispatcher = Dispatcher()
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatcher.tick() == 0
    job.refresh_from_db()
    assert job.claimed_at is None
    OrmQ.objects.all().delete()  # the workers caught up
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatcher.tick() == 1


def test_the_broker_depth_follows_the_live_clusters_workers(settings):
    settings.JOBS_DISPATCH_QUEUED_PER_WORKER = 3
    assert broker_depth() == 3
    heartbeat_record(WORKERS, "workers@a:1", workers=2)
    heartbeat_record(WORKERS, "workers@b:2", workers=8)
    assert broker_depth() == 30
    ServiceHeartbeat.objects.filter(name="workers@b:2").update(
        beat_at=timezone.now() - timedelta(minutes=5)
    )
    assert broker_depth() == 6  # a cluster that stopped beating no longer counts


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="NOTIFY is PostgreSQL's")
def test_a_new_job_wakes_the_dispatcher_once_its_transaction_commits(seeded_statuses):
    extractor = ExtractorFactory()
    woken: list[bool] = []
    listening = threading.Event()

    def listen() -> None:
        listener = Listener()
        listener.wait(0.01)  # LISTEN on this thread's connection
        listening.set()
        woken.append(listener.wait(10))
        connection.close()

    thread = threading.Thread(target=listen)
    thread.start()
    assert listening.wait(10)
    started = time.monotonic()
    job_create(
        NewJob(
            extractor=extractor, file_id="wake", source_url="https://files.example.org/wake.pdf"
        ),
        actor=Actor("api"),
    )
    thread.join(15)
    assert woken == [True] and time.monotonic() - started < 5
