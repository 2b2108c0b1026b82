"""The usage page (chart, lines, CSV), the price table's logged changes, and `usage_report`."""

import csv
import io
import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command

from jobtracking import states
from jobtracking.admin import usage as usage_admin
from jobtracking.models import UsagePrice, UsageRecord
from jobtracking.services import SYSTEM, Move, jobs_transition
from jobtracking.usage_selectors import usage_summary
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory
from tests.jobtracking.admin.conftest import staff

pytestmark = pytest.mark.django_db

USAGE = "/admin/usage/"
PRICES = "/admin/jobtracking/usageprice/"


def used(client, extractor, pages: int, day: date) -> None:
    job = ExtractionJobFactory(extractor=extractor, processing=True, requested_by=client)
    jobs_transition([Move(job.pk, states.SUCCEEDED, billed_pages=pages)], actor=SYSTEM)
    moment = datetime(day.year, day.month, day.day, 9, tzinfo=UTC)
    UsageRecord.objects.filter(job_id=job.pk).update(day=day, recorded_at=moment)


@pytest.fixture
def november():
    layout = ExtractorFactory(slug="layout", model_id="prebuilt-layout")
    UsagePrice.objects.create(
        extractor=layout, effective_from=date(2026, 1, 1), price_per_1000_pages=Decimal("10")
    )
    acme, globex = UserFactory(username="acme"), UserFactory(username="=globex")
    used(acme, layout, 300, date(2026, 11, 2))
    used(acme, layout, 200, date(2026, 11, 3))
    used(globex, layout, 50, date(2026, 11, 3))
    used(globex, layout, 999, date(2026, 10, 31))  # another month
    return layout


def test_usage_page_draws_pages_a_day_and_lists_the_month(root_client, november):
    page = root_client.get(USAGE, {"month": "2026-11"}).content.decode()

    assert "Usage, November 2026" in page
    assert page.count("<rect") == 3  # acme on the 2nd; acme and globex stacked on the 3rd
    assert "2026-11-03: acme, 200 pages" in page
    assert "<td>acme</td><td>layout</td><td>prebuilt-layout</td><td>500</td><td>2</td>" in page
    assert "5.0000 USD" in page
    assert "999 pages" not in page and "<td>999</td>" not in page


@pytest.mark.parametrize("by", ["client", "extractor"])
def test_usage_page_reads_the_summary_once_and_shows_what_it_says(
    root_client, november, monkeypatch, by
):
    # A price whose days do not round to 0.0001: the month's lines round once, not per day
    # (3 pages a day: 0.0004 rounded, but 0.0007 for the two days).
    UsagePrice.objects.create(
        extractor=november, effective_from=date(2026, 11, 4), price_per_1000_pages=Decimal("0.1234")
    )
    initech = UserFactory(username="initech")
    used(initech, november, 3, date(2026, 11, 4))
    used(initech, november, 3, date(2026, 11, 5))
    reads = []

    def counted(**kwargs):
        reads.append(kwargs["group_by"])
        return usage_summary(**kwargs)

    monkeypatch.setattr(usage_admin, "usage_summary", counted)
    answer = root_client.get(USAGE, {"month": "2026-11", "by": by})

    assert len(reads) == 1
    span = {"client": None, "start": date(2026, 11, 1), "end": date(2026, 11, 30)}
    columns = answer.context["columns"]
    assert answer.context["lines"] == usage_summary(**span, group_by=columns)
    daily = usage_summary(**span, group_by=[by, "day"])
    assert answer.context["chart"] == usage_admin._chart(daily, by, span["start"], span["end"])


def test_usage_csv_has_a_row_per_client_extractor_model_and_day(root_client, november):
    answer = root_client.get(USAGE, {"month": "2026-11", "export": "csv"})

    rows = list(csv.reader(io.StringIO(b"".join(answer.streaming_content).decode())))
    assert answer["Content-Disposition"] == 'attachment; filename="usage-2026-11.csv"'
    assert rows == [
        ["client", "extractor", "model", "day", "pages", "jobs", "pages_saved", "cost", "currency"],
        ["'=globex", "layout", "prebuilt-layout", "2026-11-03", "50", "1", "0", "0.5000", "USD"],
        ["acme", "layout", "prebuilt-layout", "2026-11-02", "300", "1", "0", "3.0000", "USD"],
        ["acme", "layout", "prebuilt-layout", "2026-11-03", "200", "1", "0", "2.0000", "USD"],
    ]


def test_usage_page_shows_a_client_without_view_all_only_its_own(client, november):
    user = staff("view_extractionjob")
    used(user, november, 7, date(2026, 11, 4))
    client.force_login(user)

    page = client.get(USAGE, {"month": "2026-11"}).content.decode()
    assert "acme" not in page and "globex" not in page
    assert f"<td>{user.username}</td>" in page


def test_usage_page_needs_the_view_permission(client, november):
    client.force_login(staff())
    assert client.get(USAGE).status_code == 403


def test_a_price_change_is_logged_with_who_and_why(root_client, november):
    price = UsagePrice.objects.get()
    answer = root_client.post(
        f"{PRICES}{price.pk}/change/",
        {
            "extractor": november.pk,
            "model_id": "",
            "effective_from": "2026-01-01",
            "price_per_1000_pages": "12",
            "currency": "USD",
            "reason": "Contract renewed at the new list price",
        },
    )

    assert answer.status_code == 302
    entry = LogEntry.objects.get(object_id=str(price.pk))
    assert entry.user.username == "root"
    assert "price_per_1000_pages" in entry.change_message
    assert "Reason: Contract renewed at the new list price" in entry.change_message


def test_a_price_needs_a_reason_and_is_never_deleted(root_client, november):
    answer = root_client.post(
        f"{PRICES}add/",
        {
            "extractor": november.pk,
            "effective_from": "2026-12-01",
            "price_per_1000_pages": "12",
            "currency": "USD",
        },
    )

    assert answer.status_code == 200 and "reason" in answer.context["adminform"].form.errors
    assert UsagePrice.objects.count() == 1
    assert root_client.get(f"{PRICES}{UsagePrice.objects.get().pk}/delete/").status_code == 403


def test_usage_report_prints_a_month_as_csv_and_as_a_table(november):
    out = io.StringIO()
    call_command("usage_report", "--month", "2026-11", "--format", "csv", stdout=out)
    assert out.getvalue().splitlines() == [
        "client,extractor,model,pages,jobs,pages_saved,cost,currency",
        "'=globex,layout,prebuilt-layout,50,1,0,0.5000,USD",
        "acme,layout,prebuilt-layout,500,2,0,5.0000,USD",
    ]

    out = io.StringIO()
    call_command("usage_report", "--month", "2026-11", "--group-by", "extractor", stdout=out)
    assert out.getvalue().splitlines()[1].split() == ["layout", "550", "3", "0", "5.5000", "USD"]
    assert "550 page(s), 0 saved, 2026-11-01 to 2026-11-30" in out.getvalue()


def test_usage_report_refuses_a_bad_month():
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("usage_report", "--month", "2026-13")


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ("client,color", "--group-by: Unknown group 'color': use client, extractor"),
        ("day,month", "--group-by: Group by day or by month, not both."),
    ],
)
def test_usage_report_refuses_groups_as_the_api_does(groups, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("usage_report", "--month", "2026-11", "--group-by", groups)
