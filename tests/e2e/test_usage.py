"""Usage end to end: real cluster and dispatcher processes, the sandbox over HTTP, PostgreSQL. The
pages the service counts (its usage rows, the usage API, `usage_report`, the workers' Prometheus
counter) are those the sandbox says it analysed, attempt by attempt, failures and requeues
included."""

import csv
import io
from collections import Counter
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.base import ContentFile
from prometheus_client.parser import text_string_to_metric_families
from pypdf import PdfReader, PdfWriter

from jobtracking.models import UsageCountedBy, UsagePrice, UsageRecord
from jobtracking.services import Actor, NewJob, job_create, job_requeue
from jobtracking.services.usage import usage_roll_up
from tests.e2e.conftest import SAMPLES, wait_for_terminal
from tests.factories import UserFactory
from tests.jobtracking.api.conftest import client_for, service_account
from tests.processes import manage

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PRICE_PER_1000 = Decimal("10.0000")


@pytest.fixture
def stack_env(tmp_path):
    """Every process of the stack writes its counters where `/metrics` adds them up, as on a
    production machine (PROMETHEUS_MULTIPROC_DIR)."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    return {"PROMETHEUS_MULTIPROC_DIR": str(metrics)}


def pdf_of(pages: int, mark: str) -> bytes:
    """A PDF of `pages` pages (the sample statement's, in turn), a document of its own by its
    title (identical documents may one day be reused, not analysed)."""
    sample = PdfReader(SAMPLES / "financial-statement.pdf")
    writer = PdfWriter()
    for n in range(pages):
        writer.add_page(sample.pages[n % len(sample.pages)])
    writer.add_metadata({"/Title": mark})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def create(
    extractor, user: AbstractBaseUser, pages_by_file: dict[str, int]
) -> dict[str, tuple[int, AbstractBaseUser]]:
    """A job of `user` per file id, an uploaded PDF of its pages: job id → (pages, user)."""
    return {
        str(
            job_create(
                NewJob(
                    extractor=extractor,
                    file_id=file_id,
                    file_name=f"{file_id}.pdf",
                    upload=ContentFile(pdf_of(pages, file_id), name=f"{file_id}.pdf"),
                ),
                actor=Actor("api", user),
            ).pk
        ): (pages, user)
        for file_id, pages in pages_by_file.items()
    }


def usage_api(staff, start: date, end: date, group_by: str = "") -> list[dict]:
    answer = client_for(staff).get(
        "/api/v1/usage/", {"from": start, "to": end, "group_by": group_by}
    )
    assert answer.status_code == 200, answer.content
    return answer.json()["results"]


def usage_report(stack, months: set[date]) -> Counter:
    """Pages and jobs by client from `manage.py usage_report --format csv`, month by month."""
    totals = Counter()
    for month in months:
        report = manage(
            "usage_report", "--month", f"{month:%Y-%m}", "--format", "csv", env=stack.env
        )
        assert report.returncode == 0, report.stderr
        for row in csv.DictReader(io.StringIO(report.stdout)):
            totals[row["client"], "pages"] += int(row["pages"])
            totals[row["client"], "jobs"] += int(row["jobs"])
    return totals


def pages_counted_by_workers(monkeypatch, staff, stack) -> int:
    """`jobtracking_usage_pages_total` for the sandbox at `/metrics`, from the counters the
    stack's processes wrote (this process's own are not in the folder)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", stack.env["PROMETHEUS_MULTIPROC_DIR"])
    answer = client_for(staff).get("/metrics")
    assert answer.status_code == 200
    return sum(
        sample.value
        for family in text_string_to_metric_families(answer.content.decode())
        for sample in family.samples
        if sample.name == "jobtracking_usage_pages_total"
        and sample.labels["extractor"] == "sandbox"
    )


def test_usage_totals_equal_the_pages_the_sandbox_analysed(stack, sandbox, extractor, monkeypatch):
    started = datetime.now(UTC).date()
    UsagePrice.objects.create(
        extractor=extractor,
        effective_from=date(2000, 1, 1),
        price_per_1000_pages=PRICE_PER_1000,
        currency="EUR",
    )
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    staff = service_account("usage-staff", "view_all_extractionjobs")
    sandbox.configure(latency_min=0.2, latency_max=0.5)

    # Failures after reading every page: billed as the sandbox says (`usage.pages`).
    sandbox.configure(permanent_failure_rate=1.0)
    failing = {
        **create(extractor, bob, {"b-3": 3, "b-5": 5}),
        **create(extractor, alice, {"a-2": 2}),
    }
    jobs = wait_for_terminal(list(failing), 60, stack)
    assert {(job.status_id, job.error_code) for job in jobs} == {("failed", "extraction_failed")}
    # Folded now: the totals below add rolled-up sums to rows not folded yet.
    assert usage_roll_up() == 3

    # Successes, and bob's two failures requeued by him: their second attempts are paid again.
    sandbox.configure(permanent_failure_rate=0.0)
    succeeding = {
        **create(extractor, alice, {"a-1": 1, "a-4": 4, "a-6": 6}),
        **create(extractor, bob, {"b-7": 7}),
    }
    requeued = [job_id for job_id, (_, user) in failing.items() if user == bob]
    for job_id in requeued:
        job_requeue(job_id=job_id, actor=Actor("api", bob), reason="retry")
    jobs = wait_for_terminal([*succeeding, *requeued], 60, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    # A succeeded job requeued (forced) is paid again too.
    (six,) = [job_id for job_id, (pages, _) in succeeding.items() if pages == 6]
    job_requeue(job_id=six, actor=Actor("api", alice), reason="again", force=True)
    (job,) = wait_for_terminal([six], 60, stack)
    assert (job.status_id, job.attempt) == ("succeeded", 2)
    ended = datetime.now(UTC).date()

    # The sandbox's own word: one extraction per attempt, each of its document's pages.
    stats = sandbox.stats()
    assert stats["duplicate_keys"] == []
    analysed = stats["pages_by_key"]
    made = failing | succeeding
    attempts = [f"{job_id}:1" for job_id in made] + [f"{job_id}:2" for job_id in [*requeued, six]]
    assert analysed == {key: made[key.split(":")[0]][0] for key in attempts}
    total = sum(analysed.values())
    assert total == (3 + 5 + 2) + (1 + 4 + 6 + 7) + (3 + 5) + 6

    # The service's rows: attempt by attempt, the pages the sandbox analysed; the failures'
    # as the sandbox reported them, the others from their results.
    rows = UsageRecord.objects.values_list("job_id", "attempt", "pages", "counted_by")
    assert {f"{job_id}:{n}": pages for job_id, n, pages, _ in rows} == analysed
    reported = {f"{job_id}:{n}" for job_id, n, _, by in rows if by == UsageCountedBy.EXTRACTOR}
    assert reported == {f"{job_id}:1" for job_id in failing}

    # The usage API, in total and by client, and usage_report, before and after the rollup.
    expected = Counter()
    for key, pages in analysed.items():
        client = made[key.split(":")[0]][1].username
        expected[client, "pages"] += pages
        expected[client, "jobs"] += 1
    start = started.replace(day=1)
    for rolled_up in (False, True):
        if rolled_up:
            assert usage_roll_up() == len(analysed) - 3
        (line,) = usage_api(staff, start, ended)
        assert (line["pages"], line["jobs"]) == (total, len(analysed))
        assert (Decimal(line["cost"]), line["currency"]) == (total * PRICE_PER_1000 / 1000, "EUR")
        by_client = Counter()
        for line in usage_api(staff, start, ended, group_by="client"):
            by_client[line["group"]["client"], "pages"] += line["pages"]
            by_client[line["group"]["client"], "jobs"] += line["jobs"]
        assert by_client == expected
        assert usage_report(stack, {start, ended.replace(day=1)}) == expected

    # The workers' counter of pages, as a scrape of `/metrics` adds it up.
    assert pages_counted_by_workers(monkeypatch, staff, stack) == total
