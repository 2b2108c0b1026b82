"""The admin in a real browser: Debian's headless Chromium driven by Playwright. Screenshots go
to test-artifacts/browser/."""

import os
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from jobtracking.models import ExtractionJob
from jobtracking.services import Actor, job_create, job_transition
from tests.factories import ExtractorFactory

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("seeded_statuses"),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason="Chromium is installed by `make test` (.ci/ensure_chromium.sh)",
    ),
]


@pytest.fixture
def browser_page(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # around it are still synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield page
        browser.close()


def test_staff_logs_in_filters_opens_a_timeline_requeues_and_sees_the_dashboard(
    live_server, browser_page
):
    get_user_model().objects.create_superuser("root", "root@example.org", "browser-pass-1")
    extractor = ExtractorFactory(slug="sandbox")
    failed = job_create(
        extractor=extractor,
        actor=Actor("api"),
        file_id="audit-2024",
        file_name="audited-statement.pdf",
        source_url="https://files.example.org/a.pdf",
    )
    job_transition(job_id=failed.pk, to_status="failed", actor=Actor.system(), reason="corrupt")
    job_create(
        extractor=extractor,
        actor=Actor("api"),
        file_id="budget-2024",
        file_name="budget.csv",
        source_url="https://files.example.org/b.csv",
    )
    page = browser_page

    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "browser-pass-1")
    page.click("input[type=submit]")
    page.wait_for_selector("text=Open the jobs dashboard")
    page.screenshot(path=str(ARTIFACTS / "01-admin-index.png"))

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/")
    page.click("#changelist-filter >> text=Failed")
    page.wait_for_url("**status__code__exact=failed**")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and "audited-statement.pdf" in rows.first.inner_text()
    page.screenshot(path=str(ARTIFACTS / "02-jobs-filtered.png"), full_page=True)

    rows.first.locator("th a, td a").first.click()
    page.wait_for_selector("text=Status timeline")
    timeline = page.locator("text=Status timeline").locator("xpath=ancestor::fieldset[1]")
    assert "corrupt" in timeline.inner_text()
    page.screenshot(path=str(ARTIFACTS / "03-job-timeline.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/?status__code__exact=failed")
    page.check("#result_list tbody input.action-select")
    page.select_option("select[name=action]", "requeue_selected")
    page.fill("input[name=reason]", "extractor fixed")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "1 job(s) requeued" in page.locator(".messagelist").inner_text()
    page.screenshot(path=str(ARTIFACTS / "04-requeued.png"), full_page=True)
    requeued = ExtractionJob.objects.get(pk=failed.pk)
    assert (requeued.status_id, requeued.attempt) == ("pending", 2)

    page.goto(f"{live_server.url}/admin/dashboard/")
    page.wait_for_selector("#throughput")
    assert "Jobs by status" in page.content()
    assert page.locator("#oldest tr").count() >= 2
    page.screenshot(path=str(ARTIFACTS / "05-dashboard.png"), full_page=True)
    assert len(list(ARTIFACTS.glob("*.png"))) >= 5
