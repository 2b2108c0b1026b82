"""Budgets in the staff console: set and changed with a reason that the admin log keeps, and a
raised budget releases the held jobs it has room for at once."""

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobtracking import states
from jobtracking.models import ExtractionJob, UsageBudget
from jobtracking.services.budgets import budget_room
from jobtracking.services.usage import usage_roll_up
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory
from tests.jobtracking.services.test_budgets import used

pytestmark = pytest.mark.django_db

BUDGETS = "/admin/jobtracking/usagebudget/"


def form(client_user, pages: int, reason: str = "Agreed for the grant round") -> dict:
    return {
        "client": client_user.pk,
        "extractor": "",
        "pages": pages,
        "threshold_percent": 80,
        "when_used_up": "hold",
        "reason": reason,
    }


def test_a_budget_change_is_logged_with_who_and_why_and_releases_held_jobs(
    root_client, django_capture_on_commit_callbacks
):
    extractor = ExtractorFactory()
    client_user = UserFactory(username="acme")
    budget = UsageBudget.objects.create(client=client_user, pages=0)
    held = ExtractionJobFactory(
        extractor=extractor, requested_by=client_user, held=True, expected_pages=4
    )

    with django_capture_on_commit_callbacks(execute=True):
        answer = root_client.post(
            f"{BUDGETS}{budget.pk}/change/", form(client_user, 10, "Raised for December")
        )

    assert answer.status_code == 302
    entry = LogEntry.objects.get(object_id=str(budget.pk))
    assert entry.user.username == "root"
    assert "Changed pages" in entry.change_message
    assert "Reason: Raised for December" in entry.change_message
    assert ExtractionJob.objects.get(pk=held.pk).status_id == states.PENDING


def test_a_budget_needs_a_reason_and_one_per_client_and_scope(root_client):
    client_user = UserFactory(username="acme")
    answer = root_client.post(f"{BUDGETS}add/", form(client_user, 10, reason=""))
    assert answer.status_code == 200 and "reason" in answer.context["adminform"].form.errors

    assert root_client.post(f"{BUDGETS}add/", form(client_user, 10)).status_code == 302
    again = root_client.post(f"{BUDGETS}add/", form(client_user, 20))
    assert again.status_code == 200
    assert UsageBudget.objects.get().pages == 10


def test_the_budget_list_shows_the_months_usage_and_held_jobs(root_client):
    client_user = UserFactory(username="acme")
    UsageBudget.objects.create(client=client_user, pages=10)
    ExtractionJobFactory(requested_by=client_user, held=True)

    page = root_client.get(BUDGETS).content.decode()
    assert "acme" in page and "(every extractor)" in page
    assert f"?status={states.HELD}" in page


def budgets_with_usage(count: int) -> list[UsageBudget]:
    """`count` budgets of as many clients, every other one for one extractor, each with usage
    rolled up and fresh, in flight and of another extractor, all different."""
    ours, other = ExtractorFactory(), ExtractorFactory()
    budgets = []
    for n in range(count):
        client_user = UserFactory()
        used(client_user, ours, 10 + n)
        used(client_user, other, 100)
        usage_roll_up()
        used(client_user, ours, n)
        ExtractionJobFactory(
            extractor=ours, requested_by=client_user, submitted=True, expected_pages=n + 1
        )
        scope = ours if n % 2 else None
        budgets.append(UsageBudget.objects.create(client=client_user, extractor=scope, pages=999))
    return budgets


def shown_usage(root_client) -> tuple[int, dict[int, str]]:
    """The list's number of queries, and the usage column by budget."""
    with CaptureQueriesContext(connection) as queries:
        page = root_client.get(BUDGETS).content.decode()
    cells = re.findall(
        r'name="_selected_action" value="(\d+)".*?<td class="field-used_this_month">([^<]*)</td>',
        page,
        re.S,
    )
    return len(queries), {int(pk): used for pk, used in cells}


def test_the_budget_lists_usage_costs_the_same_queries_for_2_budgets_as_for_12(root_client):
    budgets = budgets_with_usage(2)
    few, shown = shown_usage(root_client)
    budgets += budgets_with_usage(10)
    many, shown = shown_usage(root_client)

    assert few == many
    assert len(shown) == 12
    now = timezone.now()
    for budget in budgets:
        room = budget_room(budget, now)
        assert shown[budget.pk] == f"{room.used} ({room.in_flight})"
    # Every extractor: 110 + 2n pages used; one extractor: 10 + 2n; n + 1 in flight.
    assert shown[budgets[0].pk] == "110 (1)" and shown[budgets[1].pk] == "12 (2)"


def test_a_budget_is_removed_only_with_a_reason_and_its_held_jobs_go_on(
    root_client, django_capture_on_commit_callbacks
):
    client_user = UserFactory(username="acme")
    budget = UsageBudget.objects.create(client=client_user, pages=0)
    held = ExtractionJobFactory(requested_by=client_user, held=True)
    assert root_client.get(f"{BUDGETS}{budget.pk}/delete/").status_code == 403
    action = {"action": "remove_budgets", "_selected_action": [budget.pk]}

    root_client.post(BUDGETS, {**action, "reason": ""})
    assert UsageBudget.objects.filter(pk=budget.pk).exists()

    with django_capture_on_commit_callbacks(execute=True):
        root_client.post(BUDGETS, {**action, "reason": "Contract ended"})
    assert not UsageBudget.objects.exists()
    entry = LogEntry.objects.get(object_id=str(budget.pk))
    assert entry.is_deletion() and "Reason: Contract ended" in entry.change_message
    assert ExtractionJob.objects.get(pk=held.pk).status_id == states.PENDING
