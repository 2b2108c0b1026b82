"""A logged-in browser page for every browser test module."""

import pytest
from django.contrib.auth import get_user_model

from tests.browser.chromium import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS


@pytest.fixture
def browser_page(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # around it are still synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # The narrowest common laptop screen: every column must be readable at this width.
        page = browser.new_page(viewport={"width": 1366, "height": 900}, accept_downloads=True)
        yield page
        browser.close()


PASSWORD = "browser-pass-1"


@pytest.fixture
def staff_page(live_server, browser_page):
    get_user_model().objects.create_superuser("root", "root@example.org", PASSWORD)
    page = browser_page
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("text=Open the jobs dashboard")
    return page
