"""The usage summary's PostgreSQL statement (`_summed_in_sql`) against the portable summary it
stands in for (`_summed_in_python`, SQLite's): the same lines, whatever the grouping, range,
client and prices."""

import dataclasses
import itertools
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.db import connection

from jobtracking.models import UsageCountedBy, UsageDaily, UsagePrice, UsageRecord
from jobtracking.services.usage import usage_roll_up
from jobtracking.usage_selectors import (
    GROUPS,
    SUMS,
    UsageLine,
    _price_table,
    _sources,
    _summed_in_python,
    _summed_in_sql,
    usage_summary,
)
from tests.factories import ExtractorFactory, UserFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the statement is PostgreSQL's"),
]


def record(n: int, day: date, *, client, extractor, pages: int, reused: bool = False) -> None:
    UsageRecord.objects.create(
        job_id=f"00000000-0000-7000-8000-{n:012x}",
        attempt=1,
        client=client,
        extractor=extractor,
        model_id=extractor.model_id,
        outcome="succeeded",
        pages=0 if reused else pages,
        pages_saved=pages if reused else 0,
        counted_by=UsageCountedBy.REUSED if reused else UsageCountedBy.RESULT,
        recorded_at=datetime(day.year, day.month, day.day, 12, tzinfo=UTC),
        day=day,
    )


@pytest.fixture
def usage():
    """Two clients and jobs without one; a priced extractor whose model gets its own price (in
    another currency) mid-November and whose catch-all price changes later, a second model on
    it, and an unpriced extractor; reused results; rows rolled up and rows not yet; sums of a
    client since deleted."""
    clients = [UserFactory(), UserFactory(), None]
    layout = ExtractorFactory(model_id="prebuilt-layout")
    read = ExtractorFactory(model_id="prebuilt-read")
    unpriced = ExtractorFactory(model_id="custom")
    for extractor, model, since, price, currency in (
        (layout, "", date(2026, 1, 1), "1.5", "USD"),
        (layout, "", date(2026, 11, 20), "2.25", "USD"),
        (layout, "prebuilt-layout", date(2026, 11, 15), "10.0005", "EUR"),
        (read, "", date(2026, 10, 1), "0.3333", "USD"),
    ):
        UsagePrice.objects.create(
            extractor=extractor,
            model_id=model,
            effective_from=since,
            price_per_1000_pages=Decimal(price),
            currency=currency,
        )
    days = [date(2026, 10, 30), date(2026, 11, 1), date(2026, 11, 14), date(2026, 11, 15)]
    days += [date(2026, 11, 21), date(2026, 11, 30), date(2026, 12, 1), date(2026, 12, 3)]
    extractors = [layout, read, unpriced]
    rows = itertools.product(days, clients, extractors)
    for n, (day, client, extractor) in enumerate(rows):
        record(n, day, client=client, extractor=extractor, pages=n % 11 + 1, reused=n % 5 == 0)
    usage_roll_up()
    for n, (day, client, extractor) in enumerate(itertools.product(days[2:6], clients, extractors)):
        record(1000 + n, day, client=client, extractor=extractor, pages=3 * n + 1, reused=n == 4)
    # November's sums of `layout` are read by day (its prices change within the month).
    UsageDaily.objects.create(
        day=date(2026, 11, 2),
        client_key=10**9,
        extractor=layout,
        model_id="prebuilt-layout",
        pages=7,
    )
    return clients


def both(client, start: date, end: date, keys: list[str]) -> tuple[list, list]:
    prices = _price_table()
    sources = _sources(client, start, end, prices, by_day="day" in keys)
    fast = _summed_in_sql(sources, keys, prices, start, end)
    slow = _summed_in_python(sources, keys, prices)
    return sorted(map(repr, fast)), sorted(map(repr, slow))


GROUPINGS = [
    list(keys)
    for size in range(len(GROUPS) + 1)
    for keys in itertools.permutations(GROUPS, size)
    if not {"day", "month"} <= set(keys) and size <= 3
]
RANGES = [
    (date(2026, 11, 1), date(2026, 11, 30)),  # a whole month, its prices changing within it
    (date(2026, 10, 1), date(2026, 12, 31)),  # whole months and the days of one
    (date(2026, 11, 14), date(2026, 11, 21)),  # days across two price changes
    (date(2026, 12, 1), date(2026, 12, 2)),
    (date(2026, 1, 1), date(2026, 1, 31)),  # nothing
]


@pytest.mark.parametrize(("start", "end"), RANGES)
def test_usage_summary_statement_equals_the_portable_summary(usage, start, end):
    for keys, client in itertools.product(GROUPINGS, [None, usage[0].pk, 0]):
        fast, slow = both(client, start, end, keys)
        assert fast == slow, (keys, client)


def test_usage_summary_statement_prices_in_each_currency_and_names_clients(usage):
    fast, slow = both(None, date(2026, 11, 1), date(2026, 11, 30), ["client", "extractor"])

    assert fast == slow
    lines = "".join(fast)
    assert "'EUR'" in lines and "'USD'" in lines and "currency=None" in lines
    assert usage[0].username in lines and "'client': None" in lines and "1000000000" in lines
    assert "pages_saved=0" in lines and any("pages_saved=0" not in line for line in fast)


def test_usage_summary_statement_on_a_table_without_prices(usage):
    UsagePrice.objects.all().delete()

    for keys in ([], ["client"], ["month", "model"]):
        fast, slow = both(None, date(2026, 10, 1), date(2026, 12, 31), keys)
        assert fast == slow
        assert fast and all("cost=None, currency=None" in line for line in fast)


def test_usage_lines_hold_the_sums_both_summaries_add(usage):
    # A sum is added to `SUMS` once and both summaries add it; a field of its own on the line
    # would be filled by one of them only (`exact_cost` is the cost as both hand it to `_line`).
    fields = {field.name for field in dataclasses.fields(UsageLine)}
    assert fields == {"group", "cost", "exact_cost", "currency", *SUMS}
    assert set(SUMS.values()) <= {field.attname for field in UsageDaily._meta.fields}


def test_usage_summary_is_one_statement_and_the_price_table(usage, django_assert_num_queries):
    with django_assert_num_queries(2):
        lines = usage_summary(
            client=None,
            start=date(2026, 11, 1),
            end=date(2026, 11, 30),
            group_by=["client", "extractor", "model"],
        )
    assert len(lines) > 9
