"""Budgets in the staff console: set and changed with a reason that the admin log keeps, and a
raised budget releases the held jobs it has room for at once."""

import pytest
from django.contrib.admin.models import LogEntry

from jobtracking import states
from jobtracking.models import ExtractionJob, UsageBudget
from tests.factories import ExtractionJobFactory, ExtractorFactory, UserFactory

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
