"""The console's pages on a phone (390 x 844) and a laptop (1366 x 900): none scrolls sideways,
and on a phone the lists and the job page's tables show each row as a card of labelled cells.
Screenshots: test-artifacts/browser/layout-<width>-<page>.png."""

import json
from pathlib import Path

import pytest
from django.urls import reverse

from jobtracking import batch_states
from jobtracking.models import ActorType, DeliveryAttempt, ExtractionJob
from jobtracking.services import Actor, NewJob, job_transition
from jobtracking.services.batches import NewBatch, batch_create
from tests.browser.chromium import ARTIFACTS, LAPTOP, MARKS, PHONE
from tests.browser.test_dashboard_browser import contrast
from tests.factories import (
    ExtractionResultFactory,
    ExtractorFactory,
    WebhookDeliveryFactory,
    api_job,
)
from tests.jobtracking.admin.test_circuits_admin import open_circuit
from tests.jobtracking.services.test_batch_states import batch_in

pytestmark = MARKS

AZURE_RESULT = Path(__file__).resolve().parents[1] / (
    "extraction/fixtures/azure_di/result_succeeded.json"
)


def record_error(job) -> None:
    job.error_code = "extraction_failed"
    job.error_message = "The extractor could not read page 3: " + "unreadable-scan-" * 12


@pytest.fixture
def console_jobs():
    extractor = ExtractorFactory(slug="azure-document-intelligence", azure=True)
    # Long words that cannot break at a space: the hardest case for a narrow screen.
    failed = api_job(
        extractor,
        "riverbend-community-trust-quarterly-financial-statement-2025-q2",
        file_name="riverbend-community-trust-quarterly-financial-statement-2025-q2.pdf",
        source_url="https://files.example.org/" + "statements/" * 8 + "q2.pdf",
    )
    job_transition(
        job_id=failed.pk,
        to_status="submitting",
        actor=Actor.system(),
        details={"http_status": 202, "external_job_id": "ext-" + "7" * 40},
    )
    job_transition(
        job_id=failed.pk,
        to_status="failed",
        actor=Actor.system(),
        reason="the extractor said: corrupt",
        prepare=record_error,
    )
    analyzed = api_job(extractor, "budget", file_name="budget.pdf", source_url="https://f.org/b")
    result = ExtractionResultFactory(
        job=analyzed,
        payload=json.loads(AZURE_RESULT.read_text())["body"]["analyzeResult"],
        model_version="prebuilt-layout/2024-11-30",
    )
    return ExtractionJob.objects.get(pk=failed.pk), result


@pytest.fixture
def console_batch():
    """A closed batch of a long-named grant request, one of its jobs failed."""
    extractor = ExtractorFactory(slug="sandbox-extractor")
    items = [
        NewJob(
            extractor=extractor,
            file_id=f"riverbend-community-trust-annual-audited-statement-{n}",
            source_url=f"https://files.example.org/statement-{n}.pdf",
        )
        for n in range(3)
    ]
    new = NewBatch(client_reference="grant-request-riverbend-community-trust-2025-0042", close=True)
    batch = batch_create(new, items, actor=Actor(ActorType.API, None)).batch
    failed = ExtractionJob.objects.filter(batch=batch).order_by("file_id").first()
    job_transition(job_id=failed.pk, to_status="submitting", actor=Actor.system())
    job_transition(job_id=failed.pk, to_status="failed", actor=Actor.system(), prepare=record_error)
    return batch


def scrolls_sideways(page) -> bool:
    return page.evaluate(
        "() => document.documentElement.scrollWidth > document.documentElement.clientWidth"
    )


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_console_pages_fit_the_screen_without_scrolling_sideways(
    live_server, staff_page, viewport, console_jobs, console_batch
):
    failed, result = console_jobs
    pages = {
        "jobs": ("/admin/jobtracking/extractionjob/", "#result_list"),
        "job": (f"/admin/jobtracking/extractionjob/{failed.pk}/change/", "#timeline"),
        "full-result": (
            reverse("admin:jobtracking_job_result", args=[result.job_id, result.attempt]),
            "#document-tables table",
        ),
        "events": ("/admin/jobtracking/jobevent/", "#result_list"),
        "results": ("/admin/jobtracking/extractionresult/", "#result_list"),
        "audit": ("/admin/jobtracking/jobstatuschange/", "#result_list"),
        "batches": ("/admin/jobtracking/batch/", "#result_list"),
        "batch": (f"/admin/jobtracking/batch/{console_batch.pk}/change/", "#batch-timeline"),
    }
    page = staff_page
    crowded = []
    for name, (path, ready) in pages.items():
        page.goto(f"{live_server.url}{path}")
        page.wait_for_selector(ready)
        page.screenshot(
            path=str(ARTIFACTS / f"layout-{viewport['width']}-{name}.png"), full_page=True
        )
        if scrolls_sideways(page):
            crowded.append(name)
    assert crowded == []


def test_on_a_phone_rows_are_cards_of_labelled_cells(live_server, staff_page, console_jobs):
    failed, result = console_jobs
    page = staff_page
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/")
    priority = page.locator("#result_list tbody td.field-priority").first
    assert priority.get_attribute("data-label") == "Priority"
    before = priority.evaluate("e => getComputedStyle(e, '::before').content")
    assert before == '"Priority: "'
    # The cells of a row wrap onto lines of their own width, not a table's column.
    row = page.locator("#result_list tbody tr").first
    assert row.evaluate("e => getComputedStyle(e).display") == "flex"

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/{failed.pk}/change/")
    reason = page.locator("#timeline tbody tr:not(.attempt) td").last
    assert reason.get_attribute("data-label") == "reason and details"
    # An empty cell shows no label alone ("reason and details:" and nothing).
    assert (
        page.evaluate(
            "() => [...document.querySelectorAll('td[data-label]')]"
            ".filter(td => !td.textContent.trim()).length"
        )
        == 0
    )
    assert page.locator("#timeline tr.attempt th").first.inner_text() == "Attempt 1"

    page.goto(
        f"{live_server.url}"
        + reverse("admin:jobtracking_job_result", args=[result.job_id, result.attempt])
    )
    amount = page.locator("#document-tables th[colspan='2']")
    assert amount.inner_text() == "Amount"
    assert page.locator("#document-tables th[rowspan='2']").inner_text() == "Assets"
    assert page.locator("#key-values td[data-label='confidence']").first.inner_text() == "93%"
    assert not scrolls_sideways(page)


def test_every_batch_status_badge_reads_at_4_5_to_1(live_server, staff_page):
    for status in batch_states.STATUSES:
        batch_in(status)
    page = staff_page
    page.set_viewport_size(LAPTOP)
    page.goto(f"{live_server.url}/admin/jobtracking/batch/")
    badges = page.evaluate(
        "() => [...document.querySelectorAll('.batch-status')].map(b => [b.className, "
        "getComputedStyle(b).color, getComputedStyle(b).backgroundColor])"
    )
    assert {name.split()[-1] for name, _, _ in badges} == {
        f"batch-status-{status}" for status in batch_states.STATUSES
    }
    low = [(name, round(contrast(fg, bg), 2)) for name, fg, bg in badges if contrast(fg, bg) < 4.5]
    assert low == []


def test_the_extractors_list_fits_a_laptop_with_its_last_error_in_view(live_server, staff_page):
    for n in range(3):
        open_circuit(extractor=ExtractorFactory(slug=f"extractor-with-a-long-slug-{n}"))
    page = staff_page
    page.set_viewport_size(LAPTOP)
    page.goto(f"{live_server.url}/admin/extraction/extractor/")
    results = page.locator("#changelist .results")
    assert results.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert page.locator("#result_list td.field-last_error").first.is_visible()


WORDS_BROKEN = """(selector) => {
  const broken = [];
  for (const th of document.querySelectorAll(selector)) {
    const text = th.firstChild && th.firstChild.nodeType === 3 ? th.firstChild : null;
    const node = text || th;
    const words = node.textContent.split(/\\s+/).filter(Boolean);
    const content = node.textContent;
    let at = 0;
    for (const word of words) {
      const start = content.indexOf(word, at);
      at = start + word.length;
      if (!text) continue;
      const range = document.createRange();
      range.setStart(text, start);
      range.setEnd(text, at);
      const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (lines.size > 1) broken.push(word);
    }
  }
  return broken;
}"""


def test_on_a_phone_a_deliverys_attempts_break_headers_between_words(live_server, staff_page):
    delivery = WebhookDeliveryFactory()
    attempt = DeliveryAttempt.objects.create(
        delivery=delivery,
        status_code=503,
        error="HTTP 503 from hooks.example.org:443",
        response_excerpt="Service Unavailable",
        duration_ms=120,
    )
    page = staff_page
    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/admin/jobtracking/webhookdelivery/{attempt.delivery_id}/change/")
    headers = ".inline-group .tabular thead th"
    page.wait_for_selector(headers, state="attached")
    assert page.evaluate(WORDS_BROKEN, headers) == []
    assert not scrolls_sideways(page)
