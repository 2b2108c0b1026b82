"""One file is extracted once at a time on an extractor, whoever asks; the 409 names the active
job only to a caller who may see it."""

import pytest

from tests.jobtracking.api.conftest import assert_problem
from tests.jobtracking.api.test_jobs_create import URL, body

pytestmark = pytest.mark.django_db


def test_another_clients_active_job_is_not_disclosed(api, other_api, extractor):
    held = api.post(URL, body(), format="json").json()
    single = assert_problem(other_api.post(URL, body(), format="json"), 409, "active_job_exists")
    bulk = other_api.post(URL + "bulk/", {"jobs": [body()]}, format="json").json()
    for problem in (single, bulk["results"][0]["error"]):
        assert problem["code"] == "active_job_exists"
        assert held["id"] not in str(problem) and "job_id" not in problem
        assert "Another client's job is already active for file file-1" in problem["detail"]


def test_the_callers_own_or_a_visible_active_job_is_named(api, auditor_api, extractor):
    held = api.post(URL, body(), format="json").json()
    for caller in (api, auditor_api):
        problem = assert_problem(caller.post(URL, body(), format="json"), 409, "active_job_exists")
        assert problem["job_id"] == held["id"] and held["id"] in problem["detail"]
    bulk = auditor_api.post(URL + "bulk/", {"jobs": [body()]}, format="json").json()
    assert bulk["results"][0]["error"]["job_id"] == held["id"]


def test_a_requeue_blocked_by_another_clients_job_does_not_name_it(api, other_api, extractor):
    mine = other_api.post(URL, body(), format="json").json()
    assert other_api.post(f"{URL}{mine['id']}/cancel/", {}, format="json").status_code == 200
    theirs = api.post(URL, body(), format="json").json()
    problem = assert_problem(
        other_api.post(f"{URL}{mine['id']}/requeue/", {}, format="json"), 409, "active_job_exists"
    )
    assert theirs["id"] not in str(problem)
