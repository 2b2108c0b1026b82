"""The admin in a real browser: Debian's headless Chromium driven by Playwright. Screenshots go
to test-artifacts/browser/."""

from pathlib import Path

from django.core.files.base import ContentFile
from django.urls import reverse
from django.utils import timezone

from jobtracking.models import ExtractionJob, ServiceHeartbeat
from jobtracking.services import Actor, job_transition
from tests.browser.chromium import ARTIFACTS, MARKS
from tests.factories import (
    ExtractionResultFactory,
    ExtractorFactory,
    WebhookDeliveryFactory,
    api_job,
)

pytestmark = MARKS


def no_horizontal_scroll(page) -> bool:
    return page.evaluate(
        "() => { const r = document.querySelector('.results');"
        " return r.scrollWidth <= r.clientWidth; }"
    )


def test_staff_filter_search_by_short_id_and_read_every_column(live_server, staff_page):
    extractor = ExtractorFactory(slug="sandbox")
    failed = api_job(
        extractor,
        "audit-2024",
        file_name="audited-statement.pdf",
        source_url="https://f.example.org/a",
    )
    job_transition(job_id=failed.pk, to_status="failed", actor=Actor.system(), reason="corrupt")
    ExtractionJob.objects.filter(pk=failed.pk).update(error_code="extractor_unavailable")
    other = api_job(
        extractor, "budget-2024", file_name="budget.csv", source_url="https://f.example.org/b"
    )
    page = staff_page
    page.screenshot(path=str(ARTIFACTS / "01-admin-index.png"))

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/")
    assert no_horizontal_scroll(page)
    assert "Timed out" in page.locator("#changelist-filter").inner_text()
    page.click("#changelist-filter >> text=Failed")
    page.wait_for_url("**status=failed**")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and "audited-statement.pdf" in rows.first.inner_text()
    assert "extractor_unavailable" in rows.first.inner_text()
    page.screenshot(path=str(ARTIFACTS / "02-jobs-filtered.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/")
    short_id = str(other.pk)[-12:]
    page.fill("#searchbar", short_id)
    page.press("#searchbar", "Enter")
    page.wait_for_url(f"**q={short_id}**")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and short_id in rows.first.inner_text()
    page.screenshot(path=str(ARTIFACTS / "03-search-short-id.png"), full_page=True)

    WebhookDeliveryFactory(
        subscription__url="https://hooks.example.org/" + "receiver/" * 8,
        state="delivered",
        attempts=3,
        last_status_code=200,
        delivered_at=timezone.now(),
    )
    page.goto(f"{live_server.url}/admin/jobtracking/webhookdelivery/")
    assert no_horizontal_scroll(page)
    assert "delivered" in page.locator("#result_list thead").inner_text().lower()
    page.screenshot(path=str(ARTIFACTS / "04-deliveries.png"), full_page=True)


def test_job_page_timeline_result_upload_and_requeue_button(live_server, staff_page):
    extractor = ExtractorFactory(slug="sandbox")
    job = api_job(
        extractor,
        "budget-csv",
        file_name="budget.csv",
        content_type="text/csv",
        upload=ContentFile(b"item,amount\nrent,100\n", name="budget.csv"),
    )
    job_transition(job_id=job.pk, to_status="submitting", actor=Actor.system())
    job_transition(
        job_id=job.pk,
        to_status="submitted",
        actor=Actor.system(),
        details={"external_job_id": "ext-42", "http_status": 202},
    )
    job_transition(job_id=job.pk, to_status="failed", actor=Actor.system(), reason="corrupt")
    ExtractionResultFactory(
        job=job, attempt=1, payload={"pages": [{"number": 1, "text": "Rent: 100"}]}
    )
    page = staff_page

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/{job.pk}/change/")
    summary = page.locator("#job-summary").inner_text()
    assert "Failed" in summary and "sandbox" in summary
    timeline = page.locator("#timeline").inner_text()
    assert "external_job_id: ext-42" in timeline and "Attempt 1" in timeline
    assert timezone.localtime(job.created_at).strftime("%H:%M:%S") in timeline
    page.screenshot(path=str(ARTIFACTS / "05-job-page.png"), full_page=True)

    with page.expect_download() as download:
        page.click("text=Download budget.csv")
    assert Path(download.value.path()).read_bytes() == b"item,amount\nrent,100\n"

    page.click("a.result-link")
    page.wait_for_selector("#key-values")
    assert "Rent: 100" in page.locator(".page-text").first.inner_text()
    page.screenshot(path=str(ARTIFACTS / "06-job-result.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/jobtracking/extractionjob/{job.pk}/change/")
    page.click("#requeue-button")
    page.fill("textarea[name=reason]", "extractor fixed")
    page.screenshot(path=str(ARTIFACTS / "07-requeue-form.png"), full_page=True)
    page.click("#act-form input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "Job requeued" in page.locator(".messagelist").inner_text()
    assert "Attempt 2" in page.locator("#timeline").inner_text()
    assert "extractor fixed" in page.locator("#timeline").inner_text()
    page.screenshot(path=str(ARTIFACTS / "08-requeued.png"), full_page=True)
    assert (
        ExtractionJob.objects.get(pk=job.pk).status_id,
        ExtractionJob.objects.get(pk=job.pk).attempt,
    ) == ("pending", 2)

    page.click("text=History")
    assert "extractor fixed" in page.locator("#change-history").inner_text()


def test_the_dashboard_refreshes_in_place_and_shows_liveness(live_server, staff_page):
    extractor = ExtractorFactory(slug="sandbox")
    api_job(extractor, "first", source_url="https://f.example.org/1")
    page = staff_page
    page.goto(f"{live_server.url}/admin/dashboard/")
    page.wait_for_selector("#throughput")
    assert "No live dispatcher" in page.locator("#liveness").inner_text()
    page.evaluate("() => { window.notReloaded = true; }")

    ServiceHeartbeat.objects.create(
        name="dispatcher@box", kind="dispatcher", beat_at=timezone.now()
    )
    ServiceHeartbeat.objects.create(name="cluster@box", kind="cluster", beat_at=timezone.now())
    api_job(extractor, "second", source_url="https://f.example.org/2")
    page.wait_for_function(
        "() => document.querySelector('#liveness').innerText.includes('dispatcher@box')",
        timeout=15000,
    )
    assert page.evaluate("() => window.notReloaded === true")  # swapped in place, not reloaded
    assert "No live" not in page.locator("#liveness").inner_text()
    assert "alive" in page.locator("#liveness").inner_text()
    pending = page.locator(".status-counts a").first
    assert pending.inner_text() == "2"
    page.screenshot(path=str(ARTIFACTS / "09-dashboard.png"), full_page=True)
    pending.click()
    page.wait_for_url("**status=pending**")
    assert page.locator("#result_list tbody tr").count() == 2
    assert len(list(ARTIFACTS.glob("*.png"))) >= 9


def test_the_browsable_api_form_creates_and_shows_errors(live_server, staff_page, tmp_path):
    ExtractorFactory(slug="sandbox")
    page = staff_page
    page.goto(f"{live_server.url}/api/v1/jobs/")
    form = page.locator("form[enctype='multipart/form-data']")
    form.locator("select[name=extractor]").select_option("sandbox")
    form.locator("input[name=file_id]").fill("from-the-browser")
    form.locator("button:has-text('POST')").click()
    page.wait_for_selector("text=Give exactly one of source_url and file.")
    page.screenshot(path=str(ARTIFACTS / "10-browsable-api-error.png"), full_page=True)

    upload = tmp_path / "budget.csv"
    upload.write_bytes(b"item,amount\nrent,100\n")
    form = page.locator("form[enctype='multipart/form-data']")
    form.locator("select[name=extractor]").select_option("sandbox")
    form.locator("input[name=file_id]").fill("from-the-browser")
    form.locator("input[name=file]").set_input_files(str(upload))
    form.locator("button:has-text('POST')").click()
    page.wait_for_selector("text=HTTP 201 Created")
    page.screenshot(path=str(ARTIFACTS / "11-browsable-api-created.png"), full_page=True)
    job = ExtractionJob.objects.get(file_id="from-the-browser")
    assert (job.file_name, job.content_type, job.metadata) == ("budget.csv", "text/csv", {})


CSP_WATCH = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(event.violatedDirective + " " + (event.blockedURI || "inline"));
});
"""


def test_admin_and_docs_pages_run_under_the_content_security_policy(live_server, staff_page):
    result = ExtractionResultFactory(payload={"pages": [{"number": 1, "text": "Rent: 100"}]})
    job = result.job
    page = staff_page
    violations, errors = [], []
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(CSP_WATCH)

    def visit(path: str, ready: str) -> None:
        answer = page.goto(f"{live_server.url}{path}")
        assert "default-src 'self'" in answer.headers["content-security-policy"], path
        page.wait_for_selector(ready)
        violations.extend(f"{path}: {v}" for v in page.evaluate("() => window.cspViolations"))

    visit("/admin/", "text=Open the jobs dashboard")
    visit("/admin/jobtracking/extractionjob/", "#result_list")
    # The status badge's colour is a style attribute (style-src-attr): still applied.
    badge = page.locator(".status-badge").first
    assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(25, 135, 84)"

    visit(f"/admin/jobtracking/extractionjob/{job.pk}/change/", "#timeline")
    # job.css, moved out of an inline <style>, is applied.
    summary = page.locator("#job-summary")
    assert summary.evaluate("e => getComputedStyle(e).display") == "grid"
    visit(reverse("admin:jobtracking_job_result", args=[job.pk, result.attempt]), "#key-values")
    assert "pre-wrap" in page.locator("#result-json").evaluate(
        "e => getComputedStyle(e).whiteSpace"
    )

    visit("/admin/dashboard/", "#throughput")
    legend = page.locator(".legend-succeeded").first
    assert legend.evaluate("e => getComputedStyle(e).color") == "rgb(25, 135, 84)"
    # dashboard.js, moved out of an inline <script>, swaps the body in place.
    page.evaluate("() => { window.notReloaded = true; }")
    page.evaluate("() => { document.querySelector('#liveness').dataset.old = 'yes'; }")
    page.wait_for_function("() => !document.querySelector('#liveness').dataset.old", timeout=15000)
    assert page.evaluate("() => window.notReloaded === true")
    violations.extend(f"dashboard: {v}" for v in page.evaluate("() => window.cspViolations"))

    visit("/api/docs/", "#swagger-ui")
    operation = page.locator(".opblock-summary-path", has_text="/api/v1/jobs/").first
    operation.wait_for(state="visible", timeout=15000)
    # Try it out: the call goes to this origin (connect-src 'self') with the session.
    operation.click()
    page.click("button.try-out__btn")
    page.click("button.execute")
    page.wait_for_selector(".live-responses-table .response-col_status >> text=200")
    page.screenshot(path=str(ARTIFACTS / "12-api-docs-under-csp.png"))
    violations.extend(f"docs: {v}" for v in page.evaluate("() => window.cspViolations"))

    visit("/api/v1/jobs/", "form[enctype='multipart/form-data']")

    assert violations == []
    assert errors == []
