"""The API's pages for a person, in a real browser under the site's CSP: the problem pages get
their stylesheet, and the browsable API's long cursor links wrap instead of widening the page."""

from django.contrib.auth import get_user_model

from tests.browser.chromium import ARTIFACTS, MARKS
from tests.factories import ExtractorFactory, api_job

# Apart from the admin's screenshots, which that module counts.
API_ARTIFACTS = ARTIFACTS / "api"

pytestmark = MARKS


def test_problem_pages_are_styled_under_the_csp(live_server, browser_page):
    page = browser_page
    API_ARTIFACTS.mkdir(exist_ok=True)
    refused = []
    page.on("console", lambda message: refused.append(message.text))
    page.goto(f"{live_server.url}/api/problems/force_required")
    header = page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor")
    code = page.evaluate("getComputedStyle(document.querySelector('main p code')).fontFamily")
    page.screenshot(path=API_ARTIFACTS / "problem.png", full_page=True)
    assert header == "rgb(65, 118, 144)"  # the admin's header colour: the stylesheet applied
    assert "monospace" in code
    assert not [text for text in refused if "Content Security Policy" in text]


def test_the_browsable_lists_long_cursor_links_wrap(live_server, staff_page):
    reader = get_user_model().objects.get(username="root")
    extractor = ExtractorFactory(slug="sandbox")
    for n in range(3):
        api_job(extractor, file_id=f"wrap-{n}", user=reader)
    page = staff_page
    API_ARTIFACTS.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto(f"{live_server.url}/api/v1/jobs/?page_size=1&ordering=-updated_at")
    assert "cursor=" in page.inner_text(".response-info")
    page.screenshot(path=API_ARTIFACTS / "browsable-jobs.png", full_page=True)
    fits = page.evaluate(
        "() => { const pre = document.querySelector('.response-info pre');"
        " return [document.documentElement.scrollWidth <= window.innerWidth,"
        " pre.scrollWidth <= pre.clientWidth]; }"
    )
    assert fits == [True, True]
