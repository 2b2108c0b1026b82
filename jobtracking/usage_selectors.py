"""Reads of usage (`services.usage` writes it): a summary over a date range, grouped as asked,
with pages, billed attempts ("jobs"), and the estimated cost in its currency.

The summary is one statement: the rolled-up sums (`UsageMonthly` for whole months, `UsageDaily`
for the other days) plus the rows the rollup has not folded yet (a partial index finds them),
each grouped in the database, so its cost follows the number of months or days, clients and
extractors, not of jobs. Each day's pages are priced at the price in
force that day (`UsagePrice`: a model's own price before its extractor's price for every model,
the latest `effective_from` on or before the day), written into the query as one CASE from the
(short) price table; pages without a price have no cost and no currency.

On PostgreSQL (`_summed_in_sql`) the same statement also prices the groups in exact numeric,
adds them up per currency and names clients and extractors by joins: Python receives a row per
line. Elsewhere (SQLite, `_summed_in_python`) the database groups and Python prices, adds up
and names. Both read the same sources (`_sources`) and sums (`SUMS`); a test holds them to the
same lines."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
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
# A line's sums (`UsageLine` fields) and the column each adds up, in the sources and the sums.
SUMS = {"pages": "pages", "jobs": "attempts", "pages_saved": "pages_saved"}
# A source row, as `_summed_in_sql` reads it.
ROW_COLUMNS = ("client_key", "extractor_id", "model_id", "day", *SUMS.values())
# Each group over a source row `r` in SQL (`_grouped`'s expressions, in PostgreSQL).
_GROUP_SQL = {
    "client": "r.client_key",
    "extractor": "r.extractor_id",
    "model": "r.model_id",
    "day": "r.day",
    "month": "date_trunc('month', r.day)::date",
}


def parse_groups(value: str) -> list[str]:
    """The groups a comma-separated list names (the API's `group_by`, `usage_report
    --group-by`), in order, each once. Raises ValueError saying what is wrong: an unknown group,
    or both day and month."""
    keys = [key.strip() for key in value.split(",") if key.strip()]
    if unknown := [key for key in keys if key not in GROUPS]:
        raise ValueError(f"Unknown group {', '.join(map(repr, unknown))}: use {', '.join(GROUPS)}.")
    if {"day", "month"} <= set(keys):
        raise ValueError("Group by day or by month, not both.")
    return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class UsageLine:
    group: dict[str, Any]  # the requested groups' values: client, extractor (slug), model…
    pages: int
    jobs: int  # billed attempts: a requeued job counts once per attempt, a reused result not
    pages_saved: int  # the pages reused results did not cost (their sources' billed pages)
    cost: Decimal | None
    currency: str | None
    # The cost before its rounding: lines added up (`usage_regrouped`) round their sum once, as
    # a summary grouped so does.
    exact_cost: Decimal | None = field(repr=False)


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
    prices = _price_table()
    sources = _sources(client, start, end, prices, by_day="day" in keys)
    if connection.vendor == "postgresql":
        lines = _summed_in_sql(sources, keys, prices, start, end)
    else:
        lines = _summed_in_python(sources, keys, prices)
    return _in_order(lines)


def usage_regrouped(lines: Iterable[UsageLine], keys: Sequence[str]) -> list[UsageLine]:
    """`lines` of a summary added up by some of its groups (`keys`): the lines `usage_summary`
    gives grouped by `keys`, without reading usage again (a page that shows a month by day and
    in all reads it once)."""
    added: dict[tuple, list] = {}
    for line in lines:
        sums = added.setdefault(
            (*(line.group[key] for key in keys), line.currency), [0] * len(SUMS) + [None]
        )
        for index, name in enumerate(SUMS):
            sums[index] += getattr(line, name)
        if line.exact_cost is not None:
            sums[-1] = (sums[-1] or 0) + line.exact_cost
    return _in_order(
        _costed(dict(zip(keys, group, strict=True)), sums, cost, currency)
        for (*group, currency), (*sums, cost) in added.items()
    )


def _in_order(lines: Iterable[UsageLine]) -> list[UsageLine]:
    return sorted(lines, key=lambda line: [str(v) for v in (*line.group.values(), line.currency)])


def _sources(
    client: int | None, start: date, end: date, prices: list[UsagePrice], *, by_day: bool
) -> list[QuerySet]:
    """The rows the summary adds up, each with `client_key`, `extractor_id`, `model_id`, `day`
    and the sums (`SUMS`): the rows the rollup has not folded yet, and the rolled-up sums."""
    fresh = UsageRecord.objects.filter(rolled_up=False, day__range=(start, end)).annotate(
        client_key=Coalesce("client", 0), attempts=BILLED_ATTEMPT
    )
    sources = [fresh, *_sums(start, end, prices, by_day=by_day)]
    if client is not None:
        sources = [rows.filter(client_key=client) for rows in sources]
    return sources


def _line(group: dict[str, Any], sums: Sequence[int], priced: Decimal | None, currency: str | None):
    """A line from its sums and `priced`, its pages times their price per 1,000 pages, summed."""
    return _costed(group, sums, None if priced is None else priced / 1000, currency)


def _costed(group: dict[str, Any], sums: Sequence[int], cost: Decimal | None, currency: str | None):
    return UsageLine(
        group=group,
        **dict(zip(SUMS, map(int, sums), strict=True)),
        cost=None if cost is None else cost.quantize(Decimal("0.0001")),
        currency=currency,
        exact_cost=cost,
    )


def _summed_in_python(
    sources: list[QuerySet], keys: list[str], prices: list[UsagePrice]
) -> list[UsageLine]:
    """The portable summary (SQLite's, and the reference `_summed_in_sql` is tested against):
    each source grouped by the groups and the price in force in the database, then priced,
    added up and named in Python."""
    in_force = _in_force(prices)
    parts = [_grouped(rows, keys, in_force) for rows in sources]
    lines: dict[tuple, list] = {}
    for row in parts[0].union(*parts[1:], all=True):
        group, (price_index, *sums) = row[: len(keys)], row[len(keys) :]
        if sums[0] is None:
            continue  # grouped by constants only (no group, no price): a sum over no rows
        price = prices[price_index] if price_index is not None else None
        line = lines.setdefault((*group, price and price.currency), [0] * len(SUMS) + [None])
        for index, value in enumerate(sums):
            line[index] += value
        if price is not None:
            line[-1] = (line[-1] or 0) + sums[0] * price.price_per_1000_pages
    names = _names(keys, lines)
    return [
        _line(
            {key: names.get((key, value), value) for key, value in zip(keys, group, strict=True)},
            sums,
            cost,
            currency_code,
        )
        for (*group, currency_code), (*sums, cost) in lines.items()
    ]


def _summed_in_sql(
    sources: list[QuerySet], keys: list[str], prices: list[UsagePrice], start: date, end: date
) -> list[UsageLine]:
    """The summary in one PostgreSQL statement: each source's rows (the ORM's SQL) grouped by
    the groups, extractor, model and price period (the days from one price change to the
    next: within one, every extractor's and model's price is the same), then priced by the
    period's first day (a CASE in the order of `_price_table`) in PostgreSQL's exact numeric,
    grouped again by currency and named by joins. Python gets a row per line and does no
    arithmetic but the division by 1,000 and its rounding."""
    changes = sorted({p.effective_from for p in prices if start < p.effective_from <= end})
    period = "%s::date"
    period_params: list[Any] = [start]
    for change in changes:
        period = f"CASE WHEN r.day >= %s THEN %s::date ELSE {period} END"
        period_params = [change, change, *period_params]
    groups = [f"{_GROUP_SQL[key]} AS g_{key}" for key in keys]
    group_columns = [f"g_{key}" for key in keys]
    sums = ", ".join(f"SUM(r.{column}) AS {column}" for column in SUMS.values())
    parts, params = [], []
    for rows in sources:
        part, part_params = rows.values_list(*ROW_COLUMNS).query.sql_with_params()
        parts.append(
            f"SELECT {', '.join([*groups, ''])}r.extractor_id, r.model_id, {period} AS period, "
            f"{sums} FROM ({part}) AS r ({', '.join(ROW_COLUMNS)}) "
            f"GROUP BY {', '.join([*group_columns, 'r.extractor_id', 'r.model_id', 'period'])}"
        )
        params += [*period_params, *part_params]
    outer_sums = ", ".join(f"SUM(s.{column})" for column in SUMS.values())
    if prices:
        rows = ", ".join("(%s, %s::numeric, %s::text)" for _ in prices)
        params += [v for i, p in enumerate(prices) for v in (i, p.price_per_1000_pages, p.currency)]
        whens = []
        for index, price in enumerate(prices):
            model = " AND s.model_id = %s" if price.model_id else ""
            whens.append(f"WHEN s.extractor_id = %s AND s.period >= %s{model} THEN {index}")
            params += [price.extractor_id, price.effective_from]
            params += [price.model_id] if model else []
        in_force = f"CASE {' '.join(whens)} END"
        priced = f"LEFT JOIN (VALUES {rows}) AS p (idx, price, currency) ON p.idx = {in_force}"
        price, currency = "p.price", "p.currency"
    else:
        priced, price, currency = "", "NULL::numeric", "NULL::text"
    quote = connection.ops.quote_name
    names, named = [], []
    if "client" in keys:
        users = get_user_model()._meta
        username = users.get_field(get_user_model().USERNAME_FIELD).column
        names.append(f"u.{quote(username)}")
        named.append(
            f"LEFT JOIN {quote(users.db_table)} AS u ON u.{quote(users.pk.column)} = t.g_client"
        )
    if "extractor" in keys:
        extractors = Extractor._meta
        names.append(f"e.{quote(extractors.get_field('slug').column)}")
        named.append(
            f"LEFT JOIN {quote(extractors.db_table)} AS e "
            f"ON e.{quote(extractors.pk.column)} = t.g_extractor"
        )
    sql = f"""
        SELECT t.*{"".join(f", {name}" for name in names)} FROM (
            SELECT {", ".join([*group_columns, ""])}{currency} AS currency, {outer_sums},
                   SUM(s.{SUMS["pages"]} * {price}) AS cost
            FROM ({" UNION ALL ".join(parts)}) AS s {priced}
            GROUP BY {", ".join([*group_columns, currency])}
        ) AS t {" ".join(named)}
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    lines = []
    width = len(keys)
    for row in rows:
        group = dict(zip(keys, row[:width], strict=True))
        currency_code, *sums, cost = row[width : width + len(SUMS) + 2]
        found = iter(row[width + len(SUMS) + 2 :])
        if "client" in group:
            name = next(found)
            group["client"] = (
                None if group["client"] == 0 else group["client"] if name is None else name
            )
        if "extractor" in group:
            name = next(found)
            group["extractor"] = group["extractor"] if name is None else name
        if "month" in group:
            group["month"] = f"{group['month']:%Y-%m}"
        lines.append(_line(group, sums, cost, currency_code))
    return lines


def _sums(start: date, end: date, prices: list[UsagePrice], *, by_day: bool) -> list[QuerySet]:
    """The rolled-up sums from `start` to `end`: the month sums of the whole months within it,
    but for an extractor (or model) a price of which starts inside one of them (its days may
    be priced differently), and the day sums of the rest."""
    first = start if start.day == 1 else next_month(start)
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


def next_month(day: date) -> date:
    """The first day of the month after `day`'s."""
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
    sums = {f"g_{line_field}": Sum(column) for line_field, column in SUMS.items()}
    return (
        rows.annotate(**group, g_price=in_force)
        .values(*group, "g_price")
        .order_by()
        .annotate(**sums)
        .values_list(*group, "g_price", *sums)
    )


def _price_table() -> list[UsagePrice]:
    """The price table in the order a row's price in force is looked for (see the module
    docstring): per extractor, a model's own prices before its catch-all ones, each latest
    first; the first that matches a row's extractor, model and day is its price."""
    return sorted(
        UsagePrice.objects.order_by(),
        key=lambda p: (p.extractor_id, p.model_id == "", p.model_id, -p.effective_from.toordinal()),
    )


def _in_force(prices: list[UsagePrice]) -> Case:
    """A CASE giving a row the index in `prices` of its price in force (its first matching
    WHEN), for the portable summary: rows are grouped by that index and priced in Python, the
    database sums pages, never money (SQLite has no exact decimal)."""
    return Case(
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
