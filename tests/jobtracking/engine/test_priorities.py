"""Priorities and fair share: the split rule, the dispatcher's order between priorities and
clients, the in-flight cap and the rate lanes, and priority as clients and staff set it."""

from datetime import timedelta
from itertools import pairwise

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobtracking import states
from jobtracking.engine.dispatcher import active_queues, claim_due_jobs
from jobtracking.models import ActorType, ExtractionJob, JobStatusChange, Priority, RateSlot
from jobtracking.priorities import round_robin, split, submit_lanes
from jobtracking.selectors import queue_by_priority
from jobtracking.services import Actor, jobs_set_priority
from jobtracking.services.engine import jobs_start, reserve_slots
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory

pytestmark = pytest.mark.django_db

INTERACTIVE, NORMAL, BULK = Priority.INTERACTIVE, Priority.NORMAL, Priority.BULK
LEASE = timedelta(seconds=30)


# The split rule (JOBS_PRIORITY_RESERVED_SHARE = 0.1)


def test_a_priority_alone_gets_all_the_room():
    assert split(10, {BULK: 50}) == {BULK: 10}


def test_the_highest_priority_goes_first_and_the_lower_ones_keep_their_share():
    assert split(100, {INTERACTIVE: 500, BULK: 500}) == {INTERACTIVE: 90, BULK: 10}
    assert split(100, {INTERACTIVE: 500, NORMAL: 500, BULK: 500}) == {
        INTERACTIVE: 80,
        NORMAL: 10,
        BULK: 10,
    }


def test_room_the_higher_priority_leaves_goes_down():
    assert split(100, {INTERACTIVE: 5, BULK: 500}) == {INTERACTIVE: 5, BULK: 95}


def test_small_capacities_still_reserve_a_unit_when_there_is_one_for_each():
    assert split(2, {INTERACTIVE: 5, BULK: 5}) == {INTERACTIVE: 1, BULK: 1}
    # One unit for two priorities: strict priority.
    assert split(1, {INTERACTIVE: 5, BULK: 5}) == {INTERACTIVE: 1, BULK: 0}


def test_round_robin_takes_one_from_each_client_in_turn():
    assert round_robin([["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]) == [
        "a1",
        "b1",
        "c1",
        "a2",
        "c2",
        "a3",
    ]


# The dispatcher


def due_jobs(count: int, *, priority, user, extractor, age: float = 0.0) -> list[ExtractionJob]:
    due_at = timezone.now() - timedelta(seconds=age)
    return ExtractionJobFactory.create_batch(
        count, priority=priority, requested_by=user, extractor=extractor, due_at=due_at
    )


def test_claims_go_by_priority_not_by_age(django_capture_on_commit_callbacks):
    extractor = ExtractorFactory()
    a, b = UserFactory(), UserFactory()
    backlog = due_jobs(30, priority=BULK, user=a, extractor=extractor, age=60)
    urgent = due_jobs(5, priority=NORMAL, user=b, extractor=extractor)
    claimed = set(claim_due_jobs(batch_size=10, lease=LEASE))
    # B's five first; the bulk backlog gets the rest of the round, its oldest first.
    assert {job.pk for job in urgent} <= claimed
    assert len(claimed & {job.pk for job in backlog}) == 5


def test_within_a_priority_clients_take_turns():
    extractor = ExtractorFactory()
    a, c = UserFactory(), UserFactory()
    big = due_jobs(30, priority=BULK, user=a, extractor=extractor, age=60)
    small = due_jobs(3, priority=BULK, user=c, extractor=extractor)
    claimed = set(claim_due_jobs(batch_size=6, lease=LEASE))
    assert {job.pk for job in small} <= claimed
    assert len(claimed & {job.pk for job in big}) == 3


def test_bulk_work_is_never_starved_by_a_flood_of_interactive_work():
    extractor = ExtractorFactory()
    user = UserFactory()
    due_jobs(50, priority=INTERACTIVE, user=user, extractor=extractor)
    bulk = due_jobs(50, priority=BULK, user=user, extractor=extractor, age=60)
    claimed = set(claim_due_jobs(batch_size=20, lease=LEASE))
    assert len(claimed) == 20
    assert len(claimed & {job.pk for job in bulk}) == 2  # its 10 % share


def test_the_queues_are_found_by_priority_and_requester_without_the_terminal_jobs():
    extractor = ExtractorFactory()
    a, b = UserFactory(), UserFactory()
    due_jobs(2, priority=BULK, user=a, extractor=extractor)
    due_jobs(1, priority=INTERACTIVE, user=b, extractor=extractor)
    ExtractionJobFactory(priority=NORMAL, requested_by=None, extractor=extractor)
    ExtractionJobFactory(priority=NORMAL, requested_by=a, succeeded=True)
    assert active_queues() == [(INTERACTIVE, b.pk), (NORMAL, 0), (BULK, a.pk)]


# The in-flight cap


def in_flight(count: int, priority, extractor) -> None:
    ExtractionJobFactory.create_batch(count, submitted=True, priority=priority, extractor=extractor)


def start(jobs) -> int:
    return len(jobs_start_priorities(jobs))


def test_bulk_work_leaves_the_cap_to_waiting_interactive_work():
    extractor = ExtractorFactory(max_in_flight=10)
    in_flight(5, BULK, extractor)
    waiting = ExtractionJobFactory(priority=INTERACTIVE, extractor=extractor)
    # Bulk already holds more than its share while interactive work waits: no new lease.
    assert start(ExtractionJobFactory.create_batch(4, priority=BULK, extractor=extractor)) == 0
    assert start([waiting]) == 1


def test_interactive_work_leaves_bulk_its_share_of_the_cap():
    extractor = ExtractorFactory(max_in_flight=10)
    in_flight(9, INTERACTIVE, extractor)
    batch = ExtractionJobFactory.create_batch(3, priority=INTERACTIVE, extractor=extractor)
    batch += ExtractionJobFactory.create_batch(3, priority=BULK, extractor=extractor)
    started = jobs_start_priorities(batch)
    assert started == [BULK]


def jobs_start_priorities(jobs) -> list[int]:
    ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).update(claimed_at=timezone.now())
    return [planned.job.priority for planned in jobs_start(job_ids=[j.pk for j in jobs]).submits]


def test_a_priority_alone_may_fill_the_whole_cap():
    extractor = ExtractorFactory(max_in_flight=10)
    assert start(ExtractionJobFactory.create_batch(12, priority=BULK, extractor=extractor)) == 10


# The submission rate's lanes


def test_the_highest_waiting_priority_books_the_shared_lane_and_the_others_the_reserved_one():
    assert submit_lanes(INTERACTIVE, {INTERACTIVE, BULK}) == (RateSlot.SHARED,)
    assert submit_lanes(BULK, {INTERACTIVE, BULK}) == (RateSlot.RESERVED,)
    assert submit_lanes(BULK, {BULK}) == (RateSlot.SHARED, RateSlot.RESERVED)


def test_the_lanes_split_the_rate_and_together_keep_to_it():
    extractor = ExtractorFactory(submit_rate=10)
    now = timezone.now()
    shared, _ = reserve_slots(extractor, RateSlot.SUBMIT, 30, now, (RateSlot.SHARED,))
    reserved, _ = reserve_slots(extractor, RateSlot.SUBMIT, 30, now, (RateSlot.RESERVED,))
    # Within the one-second horizon: 9/s in the shared lane, 1/s in the reserved one.
    assert len(shared) == 10 and len(reserved) == 2
    gaps = {round((b - a).total_seconds(), 3) for a, b in pairwise(shared)}
    assert gaps == {round(1 / 9, 3)}
    # Over any second, both lanes together: the rate, plus one where the lanes' first calls
    # coincide (a token bucket holding a second's worth, as Azure's and the sandbox's, allows it).
    calls = sorted(shared + reserved)
    assert max(sum(1 for at in calls if s <= at < s + timedelta(seconds=1)) for s in calls) == 11


def test_interactive_work_is_submitted_while_bulk_work_waits_for_its_lane():
    extractor = ExtractorFactory(submit_rate=2)
    bulk = ExtractionJobFactory.create_batch(4, priority=BULK, extractor=extractor)
    interactive = ExtractionJobFactory.create_batch(2, priority=INTERACTIVE, extractor=extractor)
    started = jobs_start_priorities(bulk + interactive)
    # Interactive books the shared lane (1.8/s: now and +0.56 s), bulk the reserved one
    # (0.2/s: now only).
    assert sorted(started) == [INTERACTIVE, INTERACTIVE, BULK]


# Setting the priority


def test_staff_change_the_priority_of_active_jobs_with_an_audit_row_and_not_of_finished_ones():
    active = ExtractionJobFactory(priority=BULK)
    done = ExtractionJobFactory(priority=BULK, succeeded=True)
    staff = UserFactory()
    outcome = jobs_set_priority(
        job_ids=[active.pk, done.pk],
        priority=INTERACTIVE,
        actor=Actor(ActorType.ADMIN, staff),
        reason="Board meeting tomorrow",
    )
    assert set(outcome.moved) == {active.pk} and set(outcome.refused) == {done.pk}
    active.refresh_from_db()
    assert active.priority == INTERACTIVE and active.status_id == states.PENDING
    change = JobStatusChange.objects.get(job=active)
    assert (change.from_status_id, change.to_status_id) == (states.PENDING, states.PENDING)
    assert change.details["priority_from"] == "bulk" and change.details["priority_to"] == (
        "interactive"
    )
    assert change.reason == "Board meeting tomorrow" and change.actor == staff
    done.refresh_from_db()
    assert done.priority == BULK


def test_requeue_jobs_sets_the_new_attempts_priority():
    job = ExtractionJobFactory(failed=True, priority=BULK)
    call_command("requeue_jobs", "--ids", str(job.pk), "--priority", "interactive")
    job.refresh_from_db()
    assert (job.status_id, job.attempt, job.priority) == (states.PENDING, 2, INTERACTIVE)
    change = JobStatusChange.objects.filter(job=job).latest("changed_at")
    assert change.details["priority"] == "interactive"


def test_the_queue_by_priority_counts_due_work_and_its_age():
    extractor = ExtractorFactory()
    user = UserFactory()
    due_jobs(3, priority=BULK, user=user, extractor=extractor, age=30)
    ExtractionJobFactory(priority=BULK, due_at=timezone.now() + timedelta(minutes=5))
    due_jobs(1, priority=INTERACTIVE, user=user, extractor=extractor, age=2)
    queue = queue_by_priority(ExtractionJob.objects.all())
    assert queue["bulk"]["active"] == 4 and queue["bulk"]["due"] == 3
    assert 30 <= queue["bulk"]["oldest_due_seconds"] < 60
    assert queue["interactive"]["due"] == 1
    assert queue["normal"] == {
        "active": 0,
        "pending": 0,
        "due": 0,
        "oldest_due_at": None,
        "oldest_due_seconds": None,
    }
