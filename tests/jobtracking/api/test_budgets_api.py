"""Budgets as clients see them: a held job says so and since when; a client whose budget
refuses gets a problem at creation; its usage events are in its feed."""

import pytest

from jobtracking import states
from jobtracking.models import UsageBudget, WhenUsedUp
from jobtracking.services.budgets import budget_changed
from tests.factories import ExtractionJobFactory
from tests.jobtracking.api.conftest import assert_problem
from tests.jobtracking.services.test_budgets import used

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def test_a_held_job_shows_its_status_and_since_when(api, owner, extractor):
    job = ExtractionJobFactory(requested_by=owner, extractor=extractor, held=True)

    shown = api.get(f"{URL}{job.pk}/").json()
    assert shown["status"] == states.HELD
    assert shown["held_since"] == job.held_since.isoformat().replace("+00:00", "Z")
    assert [j["id"] for j in api.get(f"{URL}?status=held").json()["results"]] == [str(job.pk)]


def test_a_refusing_budget_used_up_answers_403_and_creates_nothing(api, owner, extractor):
    budget = UsageBudget.objects.create(client=owner, pages=3, when_used_up=WhenUsedUp.REFUSE)
    budget_changed(budget)
    used(owner, extractor, 3)
    body = {
        "extractor": extractor.slug,
        "file_id": "grant-1",
        "source_url": "https://files.example.org/a.pdf",
    }

    problem = assert_problem(api.post(URL, body, format="json"), 403, "budget_exhausted")
    assert problem["used_pages"] == 3 and problem["budget_pages"] == 3
    assert "used up" in problem["detail"] and problem["resets_at"].endswith("T00:00:00Z")
    assert_problem(
        api.post(f"{URL}bulk/", {"jobs": [body]}, format="json"), 403, "budget_exhausted"
    )
    assert not owner.extraction_jobs.filter(file_id="grant-1").exists()


def test_a_holding_budget_used_up_still_accepts_jobs(api, owner, extractor):
    UsageBudget.objects.create(client=owner, pages=3)
    used(owner, extractor, 3)
    body = {
        "extractor": extractor.slug,
        "file_id": "grant-2",
        "source_url": "https://files.example.org/a.pdf",
    }
    assert api.post(URL, body, format="json").status_code == 201
