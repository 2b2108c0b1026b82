"""Usage per attempt, recorded by the state machine as an attempt ends; its rollup and summary."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY

from jobtracking import states
from jobtracking.models import (
    UsageCountedBy,
    UsageDaily,
    UsageMonthly,
    UsagePrice,
    UsageRecord,
)
from jobtracking.services import (
    SYSTEM,
    Actor,
    Move,
    NewJob,
    job_cancel,
    job_create,
    job_requeue,
    jobs_transition,
)
from jobtracking.services.usage import usage_roll_up
from jobtracking.usage_selectors import usage_summary
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory
from tests.jobtracking.engine.test_tasks import SAMPLES, run_to_end

pytestmark = pytest.mark.django_db


def new_job(extractor, name: str, actor: Actor):
    upload = ContentFile((SAMPLES / name).read_bytes(), name=name)
    new = NewJob(extractor=extractor, file_id=name, file_name=name, upload=upload)
    return job_create(new, actor=actor)


def end(job, pages: int | None, to_status=states.SUCCEEDED):
    """End a running job's attempt as the engine does, the extractor billing `pages`."""
    move = Move(job.pk, to_status, remote=("done", 100), billed_pages=pages)
    outcome = jobs_transition([move], actor=SYSTEM)
    assert job.pk in outcome.moved
    return outcome.moved[job.pk]


def test_usage_of_a_sandbox_job_is_its_result_pages(sandbox, sandbox_extractor, api_actor):
    job = run_to_end(new_job(sandbox_extractor, "financial-statement.pdf", api_actor))

    record = UsageRecord.objects.get(job_id=job.pk)
    assert job.status_id == states.SUCCEEDED
    assert (record.attempt, record.pages, record.counted_by) == (1, 3, UsageCountedBy.RESULT)
    assert (record.extractor_id, record.client_id) == (sandbox_extractor.pk, api_actor.user_id)
    assert record.day == job.completed_at.astimezone(UTC).date()


def test_usage_counts_a_requeued_attempt_again(sandbox, sandbox_extractor, client_user):
    actor = Actor("api", client_user)
    job = run_to_end(new_job(sandbox_extractor, "grant-report.txt", actor))
    job_requeue(job_id=job.pk, actor=actor, reason="again", force=True)
    job = run_to_end(job)

    records = UsageRecord.objects.filter(job_id=job.pk).order_by("attempt")
    assert [(r.attempt, r.pages, r.client_id) for r in records] == [
        (1, 2, client_user.pk),
        (2, 2, client_user.pk),
    ]


def test_usage_of_a_failed_attempt_is_what_the_extractor_billed(sandbox, sandbox_extractor):
    sandbox.configure(permanent_failure_rate=1.0)
    job = run_to_end(new_job(sandbox_extractor, "financial-statement.pdf", Actor("api")))

    record = UsageRecord.objects.get(job_id=job.pk)
    assert (job.status_id, job.error_code) == (states.FAILED, "extraction_failed")
    assert (record.pages, record.counted_by, record.outcome) == (
        3,
        UsageCountedBy.EXTRACTOR,
        states.FAILED,
    )


def test_usage_of_an_attempt_ended_without_the_extractors_word_is_zero_by_rule(extractor):
    job = ExtractionJobFactory(extractor=extractor, processing=True)
    job_cancel(job_id=job.pk, actor=SYSTEM, reason="not needed")

    record = UsageRecord.objects.get(job_id=job.pk)
    assert (record.pages, record.counted_by, record.outcome) == (
        0,
        UsageCountedBy.RULE,
        states.CANCELLED,
    )


def test_usage_is_not_recorded_for_an_attempt_that_never_reached_the_extractor(extractor):
    job = ExtractionJobFactory(extractor=extractor)  # pending: no external job
    job_cancel(job_id=job.pk, actor=SYSTEM, reason="not needed")

    assert not UsageRecord.objects.filter(job_id=job.pk).exists()


def test_usage_rows_of_a_batch_are_written_with_one_insert(extractor):
    def statements(count: int) -> list[str]:
        jobs = [ExtractionJobFactory(extractor=extractor, processing=True) for _ in range(count)]
        moves = [Move(j.pk, states.SUCCEEDED, remote=("done", 100), billed_pages=2) for j in jobs]
        with CaptureQueriesContext(connection) as captured:
            jobs_transition(moves, actor=SYSTEM)
        return [query["sql"] for query in captured.captured_queries]

    two, six = statements(2), statements(6)
    assert len(two) == len(six)
    assert len([sql for sql in six if "usagerecord" in sql]) == 1
    assert UsageRecord.objects.filter(pages=2).count() == 8


def test_usage_pages_are_counted_for_prometheus(extractor, django_capture_on_commit_callbacks):
    extractor.model_id = "prebuilt-read"
    extractor.save()
    labels = {"extractor": extractor.slug, "model": "prebuilt-read"}

    def counted() -> float:
        return REGISTRY.get_sample_value("jobtracking_usage_pages_total", labels) or 0.0

    job = ExtractionJobFactory(extractor=extractor, processing=True)
    with django_capture_on_commit_callbacks(execute=True):
        end(job, 7)
        assert counted() == 0  # counted once committed
    assert counted() == 7


def priced(extractor, day: date, price: str, model: str = "", currency: str = "USD"):
    return UsagePrice.objects.create(
        extractor=extractor,
        model_id=model,
        effective_from=day,
        price_per_1000_pages=Decimal(price),
        currency=currency,
    )


def at_day(record_day: date, job, pages):
    """End `job`'s attempt with `pages`, then date its usage `record_day` (the arrange step:
    usage is always recorded today)."""
    end(job, pages)
    moment = datetime(record_day.year, record_day.month, record_day.day, 12, tzinfo=UTC)
    UsageRecord.objects.filter(job_id=job.pk).update(day=record_day, recorded_at=moment)


def test_usage_summary_prices_each_day_at_its_days_price(extractor):
    client = UserFactory()
    priced(extractor, date(2026, 11, 1), "10")
    priced(extractor, date(2026, 11, 15), "20")
    for day in (date(2026, 11, 10), date(2026, 11, 20)):
        job = ExtractionJobFactory(extractor=extractor, processing=True, requested_by=client)
        at_day(day, job, 100)

    ask = {"client": None, "start": date(2026, 11, 1), "end": date(2026, 11, 30)}
    [line] = usage_summary(**ask, group_by=["client"])
    # 100 pages at 10 per 1,000, then 100 at 20.
    assert (line.group, line.pages, line.jobs) == ({"client": client.username}, 200, 2)
    assert (line.cost, line.currency) == (Decimal("3.0000"), "USD")
    usage_roll_up()
    # A whole month, but its price changed within it: priced from the day sums.
    assert usage_summary(**ask, group_by=["client"]) == [line]
    priced(ExtractorFactory(), date(2026, 11, 20), "1")  # another extractor's change: no matter
    assert usage_summary(**ask, group_by=["client"]) == [line]


def test_usage_summary_prefers_a_models_own_price_and_shows_unpriced_pages(extractor):
    other = ExtractorFactory()
    extractor.model_id = "prebuilt-layout"
    extractor.save()
    priced(extractor, date(2026, 1, 1), "1")
    priced(extractor, date(2026, 1, 1), "10", model="prebuilt-layout", currency="EUR")
    at_day(date(2026, 11, 3), ExtractionJobFactory(extractor=extractor, processing=True), 1000)
    at_day(date(2026, 11, 3), ExtractionJobFactory(extractor=other, processing=True), 50)

    lines = usage_summary(
        client=None, start=date(2026, 11, 1), end=date(2026, 11, 30), group_by=["extractor"]
    )
    by_extractor = {line.group["extractor"]: line for line in lines}
    assert (by_extractor[extractor.slug].cost, by_extractor[extractor.slug].currency) == (
        Decimal("10.0000"),
        "EUR",
    )
    assert (by_extractor[other.slug].pages, by_extractor[other.slug].cost) == (50, None)


def test_usage_summary_is_the_same_before_and_after_the_rollup(extractor):
    clients = [UserFactory(), UserFactory()]
    priced(extractor, date(2026, 1, 1), "1.5")
    for n in range(6):
        job = ExtractionJobFactory(
            extractor=extractor, processing=True, requested_by=clients[n % 2]
        )
        at_day(date(2026, 11, 1 + n), job, 10 + n)
    ask = {"client": None, "start": date(2026, 11, 1), "end": date(2026, 11, 30)}
    groupings = (["client"], ["client", "day"], ["extractor", "model", "month"], [])
    before = {tuple(g): usage_summary(**ask, group_by=g) for g in groupings}

    assert usage_roll_up() == 6
    assert usage_roll_up() == 0  # nothing left: never counted twice
    assert UsageDaily.objects.count() == 6
    assert sorted(UsageMonthly.objects.values_list("day", "pages", "attempts")) == [
        (date(2026, 11, 1), 36, 3),  # client 0's 10, 12 and 14 pages
        (date(2026, 11, 1), 39, 3),
    ]
    assert not UsageRecord.objects.filter(rolled_up=False).exists()
    after = {tuple(g): usage_summary(**ask, group_by=g) for g in groupings}
    assert after == before
    [total] = before[()]
    assert (total.pages, total.jobs, total.cost) == (75, 6, Decimal("0.1125"))


def test_usage_summary_adds_new_rows_to_rolled_up_ones_and_keeps_to_a_client(extractor):
    mine, theirs = UserFactory(), UserFactory()
    today = timezone.now().astimezone(UTC).date()
    end(ExtractionJobFactory(extractor=extractor, processing=True, requested_by=mine), 4)
    usage_roll_up()
    end(ExtractionJobFactory(extractor=extractor, processing=True, requested_by=mine), 5)
    end(ExtractionJobFactory(extractor=extractor, processing=True, requested_by=theirs), 9)

    [line] = usage_summary(client=mine.pk, start=today, end=today, group_by=["client", "day"])
    assert (line.group, line.pages, line.jobs) == ({"client": mine.username, "day": today}, 9, 2)
    usage_roll_up()
    assert usage_summary(client=mine.pk, start=today, end=today, group_by=["client", "day"]) == [
        line
    ]
    outside = usage_summary(
        client=None, start=today - timedelta(days=2), end=today - timedelta(days=1), group_by=[]
    )
    assert outside == []


def test_usage_summary_over_whole_and_partial_months_counts_every_day_once(extractor):
    priced(extractor, date(2026, 1, 1), "2")
    days = [date(2026, 10, 31), date(2026, 11, 1), date(2026, 11, 30), date(2026, 12, 1)]
    for day in days:
        at_day(day, ExtractionJobFactory(extractor=extractor, processing=True), 100)
    usage_roll_up()
    at_day(date(2026, 11, 15), ExtractionJobFactory(extractor=extractor, processing=True), 1)

    def pages(start: date, end: date) -> tuple:
        lines = usage_summary(client=None, start=start, end=end, group_by=["month"])
        return tuple((line.group["month"], line.pages, line.cost) for line in lines)

    assert pages(date(2026, 10, 31), date(2026, 12, 1)) == (
        ("2026-10", 100, Decimal("0.2000")),
        ("2026-11", 201, Decimal("0.4020")),
        ("2026-12", 100, Decimal("0.2000")),
    )
    assert pages(date(2026, 11, 2), date(2026, 11, 29)) == (("2026-11", 1, Decimal("0.0020")),)
    assert pages(date(2026, 11, 30), date(2026, 12, 31)) == (
        ("2026-11", 100, Decimal("0.2000")),
        ("2026-12", 100, Decimal("0.2000")),
    )


def test_usage_takes_an_extractors_page_count_up_to_what_the_column_holds(extractor):
    job = end(ExtractionJobFactory(extractor=extractor, processing=True), 10**15)

    assert job.status_id == states.SUCCEEDED
    assert UsageRecord.objects.get(job_id=job.pk).pages == 2**31 - 1
