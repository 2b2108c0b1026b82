import importlib
import itertools
import pkgutil
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.utils import timezone

import jobtracking
from jobtracking import states
from jobtracking.engine.dispatcher import claim_due_jobs
from jobtracking.engine.tasks import reap_stuck_jobs
from jobtracking.errors import InvalidTransitionError, JobMovedOnError
from jobtracking.models import (
    ActorType,
    ExtractionJob,
    JobStatus,
    JobStatusChange,
    Priority,
    status_in,
)
from jobtracking.selectors import active_jobs_by_extractor, queue_by_priority
from jobtracking.services import Actor, job_cancel, job_time_out, job_transition
from jobtracking.services.engine import _in_flight_rooms
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory

# The lifecycle of DESIGN §4, restated by hand so that a change to the table must be deliberate.
EXPECTED = {
    (None, "pending"),
    ("pending", "submitting"),
    ("submitting", "pending"),
    ("submitting", "submitted"),
    ("submitted", "processing"),
    ("submitted", "succeeded"),
    ("processing", "succeeded"),
    ("pending", "succeeded"),  # an identical document's result reused (issue #45)
    *{
        (s, t)
        for s in ("pending", "submitting", "submitted", "processing")
        for t in ("failed", "timed_out", "cancelled")
    },
    *{(s, "pending") for s in ("succeeded", "failed", "timed_out", "cancelled")},
    # Held for the client's budget, and released; a held job may fail or be cancelled, but its
    # deadline does not run while it waits.
    ("pending", "held"),
    ("held", "pending"),
    ("held", "failed"),
    ("held", "cancelled"),
}


def test_states_split_into_five_active_and_four_terminal():
    assert states.ACTIVE == {"pending", "held", "submitting", "submitted", "processing"}
    assert states.TERMINAL == {"succeeded", "failed", "timed_out", "cancelled"}


def test_states_derive_each_set_from_the_declarations():
    assert states.IN_FLIGHT == {"submitting", "submitted", "processing"}
    assert states.DISPATCHED == states.REAPED_AT_DEADLINE == states.ACTIVE - {"held"}
    assert states.WORKED_ENDS == {"succeeded", "failed"}
    assert states.FAILURES == {"failed", "timed_out", "cancelled"}
    assert states.JUDGED == {"succeeded", "failed", "timed_out"}
    assert states.NEEDS_FORCE == {("succeeded", "pending")}
    assert states.SETTABLE_BY["api"] == states.SETTABLE_BY["admin"] == {"pending", "cancelled"}
    assert states.SETTABLE_BY["system"] == states.ALL
    for name in states.DERIVED:
        assert getattr(states, name) == getattr(states.LIFECYCLE, name.lower()), name


@pytest.mark.parametrize(
    ("from_status", "to_status"),
    list(itertools.product([None, *sorted(states.ALL)], sorted(states.ALL))),
)
def test_is_allowed_matches_the_lifecycle(from_status, to_status):
    assert states.is_allowed(from_status, to_status, force=True) == (
        (from_status, to_status) in EXPECTED
    )


def test_is_allowed_requeue_of_succeeded_needs_force():
    assert not states.is_allowed("succeeded", "pending")
    assert states.is_allowed("succeeded", "pending", force=True)
    assert states.is_allowed("failed", "pending")


def test_event_type_names_client_facing_moves_only():
    assert states.event_type(None, "pending") == "job.created"
    assert states.event_type("failed", "pending") == "job.requeued"
    assert states.event_type("processing", "succeeded") == "job.succeeded"
    assert states.event_type("pending", "succeeded") == "job.succeeded"
    assert states.event_type("pending", "submitting") is None
    assert states.event_type("submitting", "pending") is None
    published = {t for t in states.TRANSITIONS.values() if t}
    assert published == set(states.EVENT_TYPES)


# A status added the way the review added `on_hold`: staff set it on a pending job and clear it;
# the job stays active (it holds its file), but the engine does not take it, poll it or time it
# out. Declared here only: `lifecycle()` derives everything else.
ON_HOLD = states.Status(
    "test_on_hold",
    "On hold (test)",
    "Held by staff; the engine leaves it alone until they release it",
    set_by=states.STAFF,
    entered_from=((states.PENDING, None),),
    leads_to=((states.PENDING, None),),
)
WITH_HOLD = states.lifecycle((*states.STATUSES, ON_HOLD))


def test_lifecycle_places_a_declared_status_in_each_derived_set():
    hold = ON_HOLD.code
    assert hold in WITH_HOLD.all and hold in WITH_HOLD.active and hold not in WITH_HOLD.terminal
    assert hold not in WITH_HOLD.in_flight | WITH_HOLD.dispatched | WITH_HOLD.reaped_at_deadline
    assert hold not in WITH_HOLD.failures | WITH_HOLD.judged | WITH_HOLD.worked_ends
    assert [s for s, ok in WITH_HOLD.settable_by.items() if hold in ok] == ["admin", "command"]
    # The sets of the other statuses are unchanged.
    assert WITH_HOLD.in_flight == states.IN_FLIGHT and WITH_HOLD.dispatched == states.DISPATCHED
    assert WITH_HOLD.event_types == states.EVENT_TYPES


def test_lifecycle_generates_the_moves_of_a_declared_status():
    hold, table = ON_HOLD.code, WITH_HOLD.transitions
    assert table[(states.PENDING, hold)] is None and table[(hold, states.PENDING)] is None
    assert table[(hold, states.CANCELLED)] == "job.cancelled"
    assert table[(hold, states.FAILED)] == "job.failed"
    assert (hold, states.TIMED_OUT) not in table  # its deadline does not reap it
    assert {to for source, to in table if source == hold} == {"pending", "cancelled", "failed"}
    assert {source for source, to in table if to == hold} == {"pending"}
    assert {move: event for move, event in table.items() if hold not in move} == dict(
        states.TRANSITIONS
    )


def test_status_in_gives_the_conditions_of_a_declared_status():
    (lookup, active), (_, dispatched) = (
        status_in(WITH_HOLD.active).children[0],
        status_in(WITH_HOLD.dispatched).children[0],
    )
    assert lookup == "status__in" and ON_HOLD.code in active
    assert ON_HOLD.code not in dispatched


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        (states.Status("x", "X", "", terminal=True, dispatched=True), "neither dispatched"),
        (states.Status("x", "X", "", in_flight=True), "in flight is dispatched"),
        (states.Status("x", "X", "", with_result=True), "terminal statuses only"),
        (states.Status("x", "X", "", set_by=frozenset({"robot"})), "unknown actor"),
        (states.Status("x", "X", "", leads_to=(("nowhere", None),)), "undeclared"),
        (states.Status(states.PENDING, "Again", ""), "declared twice"),
    ],
)
def test_lifecycle_refuses_declarations_that_contradict_one_another(declaration, message):
    with pytest.raises(ValueError, match=message):
        states.lifecycle((*states.STATUSES, declaration))


def test_no_module_keeps_its_own_set_of_statuses():
    """Code reads each set from `states` when it uses it. A module's own tuple or set of status
    codes (the `IN_FLIGHT = (SUBMITTING, SUBMITTED, PROCESSING)` the review found) would miss a
    new status, and so would a copy bound at import time (`from jobtracking.states import
    ACTIVE`)."""
    copies = []
    for found in pkgutil.walk_packages(jobtracking.__path__, "jobtracking."):
        if ".migrations" in found.name or found.name == states.__name__:
            continue
        module = importlib.import_module(found.name)
        for name, value in vars(module).items():
            if (
                isinstance(value, set | frozenset | tuple | list)
                and len(value) > 1
                and all(isinstance(item, str) and item in states.ALL for item in value)
            ):
                copies.append(f"{found.name}.{name}")
    assert copies == []


# Each status-conditioned partial index and constraint, and the set it covers.
CONDITIONED = {
    "job_one_active_per_file": "active",
    "job_active_idx": "active",
    "job_due_active_idx": "dispatched",
    "job_due_fair_idx": "dispatched",
    "job_active_document_idx": "active",
}
# What some of them ask besides the status.
BESIDES = {"job_active_document_idx": ~Q(file_sha256="")}
# Those conditioned on one status by name, which no new status changes, and why.
NAMED = {"job_reuse_source_idx": "a reused result's sources: jobs that succeeded"}


def test_partial_indexes_and_constraints_follow_the_declarations():
    meta = ExtractionJob._meta
    conditions = {
        item.name: item.condition
        for item in [*meta.indexes, *meta.constraints]
        if item.condition is not None and "status" in str(item.condition)
    }
    # A new one says which set it covers.
    assert conditions.keys() == CONDITIONED.keys() | NAMED.keys()
    for name, derived in CONDITIONED.items():
        expected = status_in(getattr(states.LIFECYCLE, derived)) & BESIDES.get(name, Q())
        assert conditions[name] == expected, name


@pytest.mark.django_db
def test_the_database_indexes_hold_the_declared_sets():
    """The migrations built what the model declares (a new status without `makemigrations`
    fails here)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
            [list(CONDITIONED)],
        )
        definitions = dict(cursor.fetchall())
    for name, derived in CONDITIONED.items():
        listed = set(re.findall(r"'(\w+)'::", definitions[name].split(" WHERE ", 1)[1]))
        assert listed == getattr(states.LIFECYCLE, derived), name


# The behaviours that follow, with `ON_HOLD` declared.


@pytest.fixture
def on_hold(db, monkeypatch) -> states.Status:
    """The lifecycle with `ON_HOLD` declared, as if it were in `states.STATUSES`: every name
    `states` derives is rebound, and its JobStatus row inserted as its data migration would."""
    for name in states.DERIVED:
        monkeypatch.setattr(states, name, getattr(WITH_HOLD, name.lower()))
    monkeypatch.setattr(states, "LIFECYCLE", WITH_HOLD)
    JobStatus.objects.create(
        code=ON_HOLD.code,
        label=ON_HOLD.label,
        terminal=ON_HOLD.terminal,
        description=ON_HOLD.meaning,
        position=len(WITH_HOLD.statuses) - 1,
    )
    return ON_HOLD


def held_job(**kwargs) -> ExtractionJob:
    """A pending job that staff put on hold, through the one writer of status."""
    job = ExtractionJobFactory(**kwargs)
    staff = Actor("admin", UserFactory(is_staff=True))
    return job_transition(job_id=job.pk, to_status=ON_HOLD.code, actor=staff, reason="hold")


def test_on_hold_staff_set_and_clear_it_through_the_table(on_hold):
    job = held_job()
    assert job.status_id == on_hold.code and not job.is_terminal
    staff = Actor("admin", UserFactory(is_staff=True))
    job = job_transition(job_id=job.pk, to_status=states.PENDING, actor=staff)
    assert job.status_id == states.PENDING
    held = held_job()
    assert job_cancel(job_id=held.pk, actor=staff).status_id == states.CANCELLED
    changes = JobStatusChange.objects.filter(job=job).values_list("from_status", "to_status")
    assert list(changes.order_by("changed_at")) == [
        (states.PENDING, on_hold.code),
        (on_hold.code, states.PENDING),
    ]


@pytest.mark.parametrize("actor_type", ["api", "system"])
def test_on_hold_only_whom_it_declares_may_set_it(on_hold, actor_type):
    job = ExtractionJobFactory()
    audit = JobStatusChange.objects.filter(job=job)
    before = audit.count()
    with pytest.raises(InvalidTransitionError, match=f"{actor_type} cannot move a job to"):
        job_transition(job_id=job.pk, to_status=on_hold.code, actor=Actor(actor_type))
    job.refresh_from_db()
    assert (job.status_id, audit.count()) == (states.PENDING, before)


def test_the_declared_actor_types_are_the_audit_rows():
    assert states.ANYONE == set(ActorType.values)


def test_on_hold_the_reaper_times_out_only_statuses_a_deadline_reaps(on_hold):
    past = timezone.now() - timedelta(minutes=1)
    overdue = ExtractionJobFactory(deadline_at=past)
    held = held_job(deadline_at=past)
    ExtractionJob.objects.filter(pk=held.pk).update(due_at=None)  # nothing is due while held

    outcome = reap_stuck_jobs()

    overdue.refresh_from_db()
    held.refresh_from_db()
    assert outcome["timed_out"] == 1 and outcome["repaired"] == 0
    assert overdue.status_id == states.TIMED_OUT
    assert (held.status_id, held.due_at, held.error_code) == (on_hold.code, None, "")
    with pytest.raises(JobMovedOnError):  # the reaper's service refuses it too
        job_time_out(job_id=held.pk)


def test_on_hold_the_dispatcher_never_claims_it(on_hold):
    held = held_job(due_at=timezone.now() - timedelta(minutes=1))
    due = ExtractionJobFactory(
        due_at=timezone.now() - timedelta(minutes=1), requested_by=held.requested_by
    )
    queue = queue_by_priority(ExtractionJob.objects.all())[Priority.NORMAL.code]
    assert (queue["active"], queue["pending"], queue["due"]) == (2, 1, 1)
    assert claim_due_jobs(batch_size=10, lease=timedelta(seconds=30)) == [due.pk]
    held.refresh_from_db()
    assert held.claimed_at is None


def test_on_hold_the_in_flight_cap_does_not_count_it(on_hold):
    extractor = ExtractorFactory(max_in_flight=1)
    held_job(extractor=extractor)
    normal = Priority.NORMAL
    assert _in_flight_rooms(extractor, {normal: 1}, {}, {normal}) == {normal: 1}
    ExtractionJobFactory(extractor=extractor, submitted=True)
    assert _in_flight_rooms(extractor, {normal: 1}, {}, {normal}) == {normal: 0}


def test_on_hold_the_dashboard_counts_it_by_status_not_in_flight(on_hold, client):
    held = held_job(extractor__slug="alpha")
    active = active_jobs_by_extractor(ExtractionJob.objects.all())
    assert (active["pending"].count, active["in_flight"].count) == (0, 0)
    assert active["by_status"][on_hold.code] == 1
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    html = client.get("/admin/dashboard/").content.decode()
    in_flight = re.search(r'<tr id="in-flight-total">(.*?)</tr>', html, re.S).group(1)
    assert "<td>0</td>" in in_flight and str(held.pk)[-12:] not in html
    assert f'<a href="/admin/jobtracking/extractionjob/?status={on_hold.code}">1</a>' in html
