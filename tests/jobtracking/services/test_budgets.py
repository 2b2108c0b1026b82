"""Monthly usage budgets: the gate that holds a client's jobs at its limit (in the worker's lease
step), their release in order, the threshold event, and the refusal at creation."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django.utils import timezone

from jobtracking import states
from jobtracking.errors import BudgetExhaustedError
from jobtracking.infra.pages import known_pages
from jobtracking.models import (
    ExtractionJob,
    JobEvent,
    JobStatusChange,
    UsageBudget,
    UsageRecord,
    WebhookDelivery,
    WhenUsedUp,
)
from jobtracking.selectors import event_list
from jobtracking.services import Actor, NewJob, job_create
from jobtracking.services.budgets import (
    HELD_REASON,
    budget_changed,
    budget_room,
    budgets_send_thresholds,
    budgets_tend,
)
from jobtracking.services.engine import jobs_start
from jobtracking.services.usage import usage_roll_up
from tests.factories import (
    ExtractionJobFactory,
    ExtractorFactory,
    UserFactory,
    WebhookSubscriptionFactory,
)
from tests.jobtracking.engine.test_tasks import SAMPLES

pytestmark = pytest.mark.django_db


def used(client, extractor, pages: int, *, day=None) -> UsageRecord:
    """Usage the client already has this month (an attempt that ended)."""
    now = timezone.now()
    return UsageRecord.objects.create(
        job_id=ExtractionJobFactory(extractor=extractor, requested_by=client, succeeded=True).pk,
        attempt=1,
        client=client,
        extractor=extractor,
        model_id="",
        outcome=states.SUCCEEDED,
        pages=pages,
        counted_by="result",
        recorded_at=now,
        day=day or now.astimezone(UTC).date(),
    )


def claimed(client, extractor, pages: int | None, *, minutes_ago: int = 0, **kwargs):
    """A pending job the dispatcher has handed to a worker."""
    now = timezone.now()
    return ExtractionJobFactory(
        extractor=extractor,
        requested_by=client,
        expected_pages=pages,
        claimed_at=now,
        created_at=now - timedelta(minutes=minutes_ago),
        **kwargs,
    )


def statuses(*jobs) -> list[str]:
    return [ExtractionJob.objects.get(pk=job.pk).status_id for job in jobs]


def start(*jobs) -> list:
    return [planned.job.pk for planned in jobs_start(job_ids=[job.pk for job in jobs]).submits]


@pytest.fixture
def extractor():
    return ExtractorFactory(slug="sandbox")


@pytest.fixture
def client_a():
    return UserFactory(username="client-a")


@pytest.fixture
def client_b():
    return UserFactory(username="client-b")


# The gate


def test_jobs_are_submitted_while_they_fit_and_held_past_the_limit(extractor, client_a, client_b):
    UsageBudget.objects.create(client=client_a, pages=10)
    used(client_a, extractor, 6)
    fits = claimed(client_a, extractor, 3, minutes_ago=3)
    too_big = claimed(client_a, extractor, 2, minutes_ago=2)
    others = claimed(client_b, extractor, 50, minutes_ago=1)  # no budget: never held

    submitted = start(fits, too_big, others)

    assert set(submitted) == {fits.pk, others.pk}
    assert statuses(fits, too_big, others) == ["submitting", "held", "submitting"]
    held = ExtractionJob.objects.get(pk=too_big.pk)
    assert held.held_since is not None and held.due_at is None
    change = JobStatusChange.objects.get(job=held, to_status="held")
    assert change.reason == HELD_REASON
    assert change.details["budgets"][0]["used"] == 6
    assert change.details["budgets"][0]["in_flight"] == 3  # the job let through before it
    assert JobEvent.objects.filter(job=held, type=states.EVENT_HELD).exists()


def test_jobs_in_flight_count_against_the_budget_and_unknown_pages_count_one(extractor, client_a):
    UsageBudget.objects.create(client=client_a, pages=5)
    # Polled in the same batch: still in flight, still counted.
    polled = claimed(client_a, extractor, 3, submitted=True)
    ExtractionJobFactory(extractor=extractor, requested_by=client_a, processing=True)  # one
    url_job = claimed(client_a, extractor, None, minutes_ago=2)  # one: fits (3 + 1 + 1)
    pdf = claimed(client_a, extractor, 1, minutes_ago=1)  # past it

    assert start(polled, url_job, pdf) == [url_job.pk]
    assert statuses(pdf) == ["held"]


def test_a_job_never_overtakes_an_older_held_job_of_its_client_and_extractor(extractor, client_a):
    other_extractor = ExtractorFactory(slug="other")
    UsageBudget.objects.create(client=client_a, pages=10)
    ExtractionJobFactory(
        extractor=extractor,
        requested_by=client_a,
        held=True,
        expected_pages=20,
        created_at=timezone.now() - timedelta(hours=1),
    )
    small = claimed(client_a, extractor, 1)
    elsewhere = claimed(client_a, other_extractor, 1)

    assert start(small, elsewhere) == [elsewhere.pk]
    assert statuses(small) == ["held"]


def test_a_budget_for_one_extractor_holds_only_that_extractors_jobs(extractor, client_a):
    other_extractor = ExtractorFactory(slug="other")
    UsageBudget.objects.create(client=client_a, extractor=extractor, pages=4)
    used(client_a, extractor, 4)
    used(client_a, other_extractor, 100)  # not this budget's
    here = claimed(client_a, extractor, 1)
    there = claimed(client_a, other_extractor, 1)

    assert start(here, there) == [there.pk]
    assert statuses(here, there) == ["held", "submitting"]


def test_both_budgets_covering_a_job_must_have_room(extractor, client_a):
    UsageBudget.objects.create(client=client_a, pages=100)
    UsageBudget.objects.create(client=client_a, extractor=extractor, pages=2)
    job = claimed(client_a, extractor, 3)

    assert start(job) == []
    assert len(JobStatusChange.objects.get(job=job, to_status="held").details["budgets"]) == 2


def test_the_months_usage_counts_rolled_up_and_fresh_rows_and_not_last_months(extractor, client_a):
    budget = UsageBudget.objects.create(client=client_a, pages=100)
    last_month = (timezone.now().astimezone(UTC).replace(day=1) - timedelta(days=1)).date()
    used(client_a, extractor, 40, day=last_month)
    used(client_a, extractor, 7)
    usage_roll_up()
    used(client_a, extractor, 5)

    assert budget_room(budget, timezone.now()).used == 12


@pytest.mark.django_db(transaction=True)
def test_two_lease_steps_of_one_client_take_turns_and_never_spend_the_budget_twice(
    seeded_statuses, extractor, client_a
):
    """Two workers (each its own connection) start batches of the same client at once: the
    advisory lock makes the second count what the first put in flight."""
    UsageBudget.objects.create(client=client_a, pages=5)
    first = [claimed(client_a, extractor, 1) for _ in range(4)]
    second = [claimed(client_a, extractor, 1) for _ in range(4)]
    barrier, results = threading.Barrier(2), {}

    def work(name, jobs):
        try:
            barrier.wait()
            results[name] = start(*jobs)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(n, j)) for n, j in (("1", first), ("2", second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results["1"]) + len(results["2"]) == 5
    assert ExtractionJob.objects.filter(status=states.HELD).count() == 3


# Releases


def test_raising_the_budget_releases_held_jobs_in_their_order_while_they_fit(extractor, client_a):
    budget = UsageBudget.objects.create(client=client_a, pages=1)
    used(client_a, extractor, 1)
    jobs = [claimed(client_a, extractor, 2, minutes_ago=10 - n) for n in range(4)]
    start(*jobs)
    assert statuses(*jobs) == ["held"] * 4

    budget.pages = 6  # room for two of them
    budget.save()
    later = timezone.now() + timedelta(minutes=5)
    assert budgets_tend(now=later)["released"] == 2

    assert statuses(*jobs) == ["pending", "pending", "held", "held"]
    released = ExtractionJob.objects.get(pk=jobs[0].pk)
    assert released.held_since is None and released.due_at == later
    assert released.deadline_at == later + extractor.max_duration  # a new one from now
    assert JobEvent.objects.filter(job=released, type=states.EVENT_RELEASED).exists()
    assert budgets_tend(now=later)["released"] == 0  # nothing more fits


def test_a_new_month_releases_them(extractor, client_a):
    UsageBudget.objects.create(client=client_a, pages=3)
    used(client_a, extractor, 3)
    job = claimed(client_a, extractor, 1)
    start(job)

    assert budgets_tend()["released"] == 0
    next_month = (timezone.now().astimezone(UTC).replace(day=28) + timedelta(days=4)).replace(
        day=1, hour=0, minute=1
    )
    assert budgets_tend(now=next_month)["released"] == 1
    assert statuses(job) == ["pending"]


def test_removing_the_budget_releases_every_held_job(
    extractor, client_a, django_capture_on_commit_callbacks
):
    budget = UsageBudget.objects.create(client=client_a, pages=0)
    jobs = [claimed(client_a, extractor, 5) for _ in range(3)]
    start(*jobs)
    with django_capture_on_commit_callbacks(execute=True):
        budget.delete()
        budget_changed(budget)

    assert statuses(*jobs) == ["pending"] * 3


def test_a_held_job_can_be_cancelled_and_does_not_time_out(extractor, client_a):
    from jobtracking.engine.tasks import reap_stuck_jobs
    from jobtracking.services import job_cancel

    UsageBudget.objects.create(client=client_a, pages=0)
    job = claimed(client_a, extractor, 1, deadline_at=timezone.now() + timedelta(seconds=1))
    start(job)
    ExtractionJob.objects.filter(pk=job.pk).update(deadline_at=timezone.now() - timedelta(hours=1))

    reap_stuck_jobs()
    assert statuses(job) == ["held"]
    job_cancel(job_id=job.pk, actor=Actor("api", client_a))
    assert statuses(job) == ["cancelled"]


# The threshold event


def test_the_threshold_event_goes_out_once_a_month_to_the_client_and_staff(
    extractor, client_a, client_b
):
    UsageBudget.objects.create(client=client_a, pages=100, threshold_percent=80)
    theirs = WebhookSubscriptionFactory(created_by=client_a, event_types=[], all_event_types=True)
    WebhookSubscriptionFactory(created_by=client_b, event_types=[], all_event_types=True)
    used(client_a, extractor, 79)
    assert budgets_send_thresholds() == 0

    used(client_a, extractor, 1)
    assert budgets_send_thresholds() == 1
    assert budgets_send_thresholds() == 0  # once a month

    event = JobEvent.objects.get(type=states.USAGE_THRESHOLD_REACHED)
    assert event.requested_by == client_a
    assert event.payload["used_pages"] == 80 and event.payload["budget_pages"] == 100
    assert event.payload["client"] == "client-a"
    assert [d.subscription_id for d in WebhookDelivery.objects.filter(event=event)] == [theirs.pk]
    assert list(event_list(user=client_a, settle=timedelta(0))) == [event]
    assert list(event_list(user=client_b, settle=timedelta(0))) == []


# Creation


def test_a_client_whose_budget_refuses_gets_a_403_once_it_is_used_up(extractor, client_a):
    budget = UsageBudget.objects.create(client=client_a, pages=2, when_used_up=WhenUsedUp.REFUSE)
    budget_changed(budget)  # as the admin does: this process reads the refusing clients again
    actor = Actor("api", client_a)
    new = NewJob(extractor=extractor, file_id="f1", source_url="https://files.example.org/a.pdf")
    job_create(new, actor=actor)  # room left

    used(client_a, extractor, 2)
    with pytest.raises(BudgetExhaustedError) as refused:
        job_create(
            NewJob(extractor=extractor, file_id="f2", source_url=new.source_url), actor=actor
        )
    assert refused.value.http_status == 403
    assert refused.value.extra["used_pages"] == 2
    assert not ExtractionJob.objects.filter(file_id="f2").exists()


def test_an_uploaded_pdf_knows_its_pages_and_an_image_is_one(extractor, client_a):
    pdf = (SAMPLES / "financial-statement.pdf").read_bytes()
    job = job_create(
        NewJob(
            extractor=extractor,
            file_id="statement",
            upload=ContentFile(pdf, name="statement.pdf"),
            content_type="application/pdf",
        ),
        actor=Actor("api", client_a),
    )
    assert job.expected_pages == 3  # the sandbox bills the same three
    assert known_pages(ContentFile(b"\x89PNG\r\n\x1a\n", name="a.png"), "image/png") == 1
    assert known_pages(ContentFile(b"%PDF-1.4 broken", name="b.pdf"), "application/pdf") is None
    assert known_pages(ContentFile(b"a,b\n", name="c.csv"), "text/csv") is None


def test_a_month_boundary_in_utc(extractor, client_a):
    budget = UsageBudget.objects.create(client=client_a, pages=10)
    used(client_a, extractor, 10, day=datetime(2026, 11, 30, tzinfo=UTC).date())
    assert budget_room(budget, datetime(2026, 11, 30, 23, 59, tzinfo=UTC)).used == 10
    assert budget_room(budget, datetime(2026, 12, 1, 0, 0, tzinfo=UTC)).used == 0
