"""Reads of usage (`services.usage` writes it): a summary over a date range, grouped as asked,
with pages, billed attempts ("jobs"), and the estimated cost in its currency.

The summary is one statement: the rolled-up sums (`UsageMonthly` for whole months, `UsageDaily`
for the other days) plus the rows the rollup has not folded yet (a partial index finds them),
each grouped in the database, so its cost follows the number of months or days, clients and
extractors, not of jobs. Each day's pages are priced at the price in
force that day (`UsagePrice`: a model's own price before its extractor's price for every model,
the latest `effective_from` on or before the day), written into the query as one CASE from the
(short) price table; pages without a price have no cost and no currency."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import (
    Case,
    F,
    IntegerField,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, TruncMonth

from extraction.models import Extractor
from jobtracking.models import BILLED_ATTEMPT, UsageDaily, UsageMonthly, UsagePrice, UsageRecord
from jobtracking.selectors import sees_every_client

GROUPS = ("client", "extractor", "model", "day", "month")


@dataclass(frozen=True)
class UsageLine:
    group: dict[str, Any]  # the requested groups' values: client, extractor (slug), model…
    pages: int
    jobs: int  # billed attempts: a requeued job counts once per attempt, a reused result not
    pages_saved: int  # the pages reused results did not cost (their sources' billed pages)
    cost: Decimal | None
    currency: str | None


def usage_client_scope(user: AbstractBaseUser) -> int | None:
    """The client whose usage `user` may see (their own), or None for every client's: the
    job scoping rule (`selectors.visible`) applied to usage."""
    return None if sees_every_client(user) else user.pk


def usage_summary(
    *, client: int | None, start: date, end: date, group_by: Sequence[str]
) -> list[UsageLine]:
    """Usage from `start` to `end` (UTC days, both included) of `client` (None: every client),
    one line per group of `group_by` (names from `GROUPS`) and currency, in group order."""
    keys = list(dict.fromkeys(group_by))
    prices, in_force = _prices()
    fresh = UsageRecord.objects.filter(rolled_up=False, day__range=(start, end)).annotate(
        client_key=Coalesce("client", 0), attempts=BILLED_ATTEMPT
    )
    sources = [fresh, *_sums(start, end, prices, by_day="day" in keys)]
    if client is not None:
        sources = [rows.filter(client_key=client) for rows in sources]
    parts = [_grouped(rows, keys, in_force) for rows in sources]
    lines: dict[tuple, list] = {}
    for row in parts[0].union(*parts[1:], all=True):
        *group, price_index, pages, jobs, saved = row
        if pages is None:
            continue  # grouped by constants only (no group, no price): a sum over no rows
        price = prices[price_index] if price_index is not None else None
        line = lines.setdefault((*group, price and price.currency), [0, 0, 0, None])
        line[0] += pages
        line[1] += jobs
        line[2] += saved
        if price is not None:
            line[3] = (line[3] or 0) + pages * price.price_per_1000_pages
    names = _names(keys, lines)
    found = [
        UsageLine(
            group={
                key: names.get((key, value), value) for key, value in zip(keys, group, strict=True)
            },
            pages=pages,
            jobs=jobs,
            pages_saved=saved,
            cost=None if cost is None else (cost / 1000).quantize(Decimal("0.0001")),
            currency=currency_code,
        )
        for (*group, currency_code), (pages, jobs, saved, cost) in lines.items()
    ]
    return sorted(found, key=lambda line: [str(v) for v in (*line.group.values(), line.currency)])


def _sums(start: date, end: date, prices: list[UsagePrice], *, by_day: bool) -> list[QuerySet]:
    """The rolled-up sums from `start` to `end`: the month sums of the whole months within it,
    but for an extractor (or model) a price of which starts inside one of them (its days may
    be priced differently), and the day sums of the rest."""
    first = start if start.day == 1 else _next_month(start)
    after = end + timedelta(days=1)
    last = after if after.day == 1 else after.replace(day=1)  # the day after the whole months
    if by_day or first >= last:
        return [UsageDaily.objects.filter(day__range=(start, end))]
    repriced = Q(pk__in=[])
    for price in prices:
        if first < price.effective_from < last and price.effective_from.day != 1:
            model = Q(model_id=price.model_id) if price.model_id else Q()
            repriced |= Q(extractor_id=price.extractor_id) & model
    whole = Q(day__gte=first, day__lt=last)
    return [
        UsageMonthly.objects.filter(whole).exclude(repriced),
        UsageDaily.objects.filter(Q(day__range=(start, end)) & (~whole | repriced)),
    ]


def _next_month(day: date) -> date:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def _grouped(rows: QuerySet, keys: list[str], in_force: Case) -> QuerySet:
    """Pages, attempts and pages saved summed by the groups and the price in force (its
    index)."""
    expressions = {
        "client": F("client_key"),
        "extractor": F("extractor_id"),
        "model": F("model_id"),
        "day": F("day"),
        "month": TruncMonth("day"),
    }
    group = {f"g_{key}": expressions[key] for key in keys}
    return (
        rows.annotate(**group, g_price=in_force)
        .values(*group, "g_price")
        .order_by()
        .annotate(g_pages=Sum("pages"), g_jobs=Sum("attempts"), g_saved=Sum("pages_saved"))
        .values_list(*group, "g_price", "g_pages", "g_jobs", "g_saved")
    )


def _prices() -> tuple[list[UsagePrice], Case]:
    """The price table, and a CASE giving a row the index in it of the price in force for the
    row's extractor, model and day (its first matching WHEN; see the module docstring). Rows
    are grouped by that index and priced in Python: the database sums pages, never money."""
    # Per extractor, a model's own prices before its catch-all ones, each latest first.
    prices = sorted(
        UsagePrice.objects.order_by(),
        key=lambda p: (p.extractor_id, p.model_id == "", p.model_id, -p.effective_from.toordinal()),
    )
    in_force = Case(
        *[
            When(
                Q(extractor_id=p.extractor_id, day__gte=p.effective_from)
                & (Q(model_id=p.model_id) if p.model_id else Q()),
                then=Value(index),
            )
            for index, p in enumerate(prices)
        ],
        default=None,
        output_field=IntegerField(),
    )
    return prices, in_force


def _names(keys: list[str], lines: dict) -> dict[tuple[str, Any], Any]:
    """Readable values for ids: a client's username (None for jobs without a requester), an
    extractor's slug, a month as YYYY-MM."""
    names: dict[tuple[str, Any], Any] = {}
    for index, key in enumerate(keys):
        values = {group[index] for group in lines}
        if key == "client":
            users = get_user_model().objects.filter(pk__in=values)
            field = get_user_model().USERNAME_FIELD
            names.update({(key, pk): name for pk, name in users.values_list("pk", field)})
            names[(key, 0)] = None
        elif key == "extractor":
            extractors = Extractor.objects.filter(pk__in=values)
            names.update({(key, pk): slug for pk, slug in extractors.values_list("pk", "slug")})
        elif key == "month":
            names.update({(key, value): f"{value:%Y-%m}" for value in values})
    return names
