"""Budgets on the real stack: a client whose monthly budget runs out has its jobs held, nothing
submitted for them, while another client's keep flowing; raising the budget in the admin
releases them; and with two clusters and two dispatchers racing, the pages submitted never pass
the budget by more than what was in flight (here, where every page is known, not at all)."""

import pytest
from django.core.files.base import ContentFile
from django.db.models import Sum

from jobtracking import states
from jobtracking.models import ExtractionJob, UsageBudget, UsageRecord
from jobtracking.services import Actor, NewJob, job_create
from tests.e2e.conftest import SAMPLES, wait_for_terminal
from tests.factories import UserFactory
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PAGES = 3  # financial-statement.pdf


def statement_jobs(extractor, client, count: int, prefix: str) -> list:
    """Uploads of the three-page statement, each a document of its own (a comment after it)."""
    pdf = (SAMPLES / "financial-statement.pdf").read_bytes()
    return [
        job_create(
            NewJob(
                extractor=extractor,
                file_id=f"{prefix}-{n}",
                upload=ContentFile(pdf + f"\n% {prefix}-{n}\n".encode(), name="statement.pdf"),
                content_type="application/pdf",
            ),
            actor=Actor("api", client),
        ).pk
        for n in range(count)
    ]


def by_status(job_ids) -> dict[str, int]:
    found: dict[str, int] = {}
    for status in ExtractionJob.objects.filter(pk__in=job_ids).values_list("status", flat=True):
        found[status] = found.get(status, 0) + 1
    return found


def settled(job_ids) -> bool:
    """Every job has ended or is held: nothing more will move without a person or a month."""
    active = ExtractionJob.objects.filter(pk__in=job_ids, status__in=states.ACTIVE)
    return not active.exclude(status=states.HELD).exists()


def pages_used(client) -> int:
    return UsageRecord.objects.filter(client=client).aggregate(Sum("pages"))["pages__sum"] or 0


def submitted_to_sandbox(sandbox, job_ids) -> set[str]:
    keys = sandbox.stats()["created_by_key"]
    return {str(pk) for pk in job_ids if f"{pk}:1" in keys}


def test_a_used_up_budget_holds_its_clients_jobs_and_raising_it_releases_them(
    stack, sandbox, extractor, client
):
    acme, globex = UserFactory(username="acme"), UserFactory(username="globex")
    UsageBudget.objects.create(client=acme, pages=5)
    held_back = statement_jobs(extractor, acme, 4, "acme")
    flowing = statement_jobs(extractor, globex, 4, "globex")

    wait_until(lambda: settled(held_back + flowing), 60, "the jobs to end or be held")
    # One statement fits in five pages; the next would pass it, and the others wait their turn.
    assert by_status(held_back) == {states.SUCCEEDED: 1, states.HELD: 3}
    assert by_status(flowing) == {states.SUCCEEDED: 4}  # the other client is unaffected
    held = set(
        map(str, ExtractionJob.objects.filter(status=states.HELD).values_list("pk", flat=True))
    )
    assert not submitted_to_sandbox(sandbox, held)  # nothing was submitted for them
    assert pages_used(acme) == PAGES

    # Staff raise the budget: room for the three held statements, released at once.
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    budget = UsageBudget.objects.get(client=acme)
    answer = client.post(
        f"/admin/jobtracking/usagebudget/{budget.pk}/change/",
        {
            "client": acme.pk,
            "extractor": "",
            "pages": 4 * PAGES,
            "threshold_percent": 80,
            "when_used_up": "hold",
            "reason": "Raised for the grant round",
        },
    )
    assert answer.status_code == 302

    jobs = wait_for_terminal(held_back, 60, stack)
    assert {job.status_id for job in jobs} == {states.SUCCEEDED}
    assert pages_used(acme) == 4 * PAGES
    assert submitted_to_sandbox(sandbox, held) == held


@pytest.fixture
def stack_env():
    # Small batches, so that the two clusters' workers race each other for the budget.
    return {"JOBS_TASK_BATCH_SIZE": "1", "Q_WORKERS": "2"}


def test_two_clusters_and_two_dispatchers_never_submit_past_the_budget(stack, sandbox, extractor):
    stack.start("run_workers", log="cluster2.log")
    stack.start_dispatcher()
    acme = UserFactory(username="acme")
    budget = 20
    UsageBudget.objects.create(client=acme, pages=budget)
    job_ids = statement_jobs(extractor, acme, 15, "race")

    wait_until(lambda: settled(job_ids), 90, "the jobs to end or be held")

    # Every page was known before submission, so nothing was in flight beyond what was
    # counted: six statements (18 pages) fit, a seventh would pass 20.
    assert pages_used(acme) <= budget
    assert by_status(job_ids) == {states.SUCCEEDED: 6, states.HELD: 9}
    assert len(submitted_to_sandbox(sandbox, job_ids)) == 6
    assert sum(sandbox.stats()["pages_by_key"].values()) == pages_used(acme) == 6 * PAGES
