"""The Content-Security-Policy of the HTML pages (config.csp): every admin page, the dashboard,
the job page, the API docs and the browsable API carry it, and nothing on them needs more than it
allows. tests/browser/test_admin_browser.py loads the pages in Chromium under it."""

import re

import pytest
from django.urls import reverse

from config.csp import POLICY, style_hash
from tests.factories import ExtractionResultFactory, UserFactory

pytestmark = pytest.mark.django_db

REQUIRED = [
    "default-src 'self'",
    "script-src 'self'",
    "img-src 'self' data:",
    "object-src 'none'",
    "base-uri 'self'",
    "frame-ancestors 'none'",
    "form-action 'self'",
]


@pytest.fixture
def root_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def html_pages(root_client):
    """Every kind of HTML page the site serves, by name: the path to ask for."""
    result = ExtractionResultFactory(payload={"pages": [{"number": 1, "text": "Rent: 100"}]})
    job = result.job
    return {
        "admin index": "/admin/",
        "jobs changelist": "/admin/jobtracking/extractionjob/",
        "job page": f"/admin/jobtracking/extractionjob/{job.pk}/change/",
        "job result": reverse("admin:jobtracking_job_result", args=[job.pk, result.attempt]),
        "job requeue form": reverse("admin:jobtracking_job_requeue", args=[job.pk]),
        "job history": f"/admin/jobtracking/extractionjob/{job.pk}/history/",
        "extractors changelist": "/admin/extraction/extractor/",
        "dashboard": "/admin/dashboard/",
        "api docs": "/api/docs/",
        "browsable api": "/api/v1/jobs/",
    }


def directives(policy: str) -> dict[str, list[str]]:
    return {
        name: values
        for name, *values in (part.split() for part in policy.split(";") if part.strip())
    }


def test_csp_policy_has_every_directive_the_review_asked_for():
    parsed = directives(POLICY)
    for required in REQUIRED:
        name, *values = required.split()
        assert parsed[name] == values, name
    assert parsed["style-src"][0] == "'self'"
    assert all(value.startswith("'sha256-") for value in parsed["style-src"][1:])
    # Inline style attributes are the only inline content allowed; no eval anywhere.
    assert "'unsafe-inline'" not in POLICY.replace("style-src-attr 'unsafe-inline'", "")
    assert "unsafe-eval" not in POLICY


def test_csp_admin_dashboard_job_page_and_docs_carry_the_header(root_client, html_pages):
    for name, path in html_pages.items():
        answer = root_client.get(path, HTTP_ACCEPT="text/html")
        assert answer.status_code == 200, name
        assert answer["Content-Type"].startswith("text/html"), name
        assert answer["Content-Security-Policy"] == POLICY, name


def test_csp_admin_login_page_carries_the_header(client):
    answer = client.get("/admin/login/")
    assert answer.status_code == 200
    assert answer["Content-Security-Policy"] == POLICY


def test_csp_pages_have_no_inline_script_and_only_allowed_style_blocks(root_client, html_pages):
    allowed_styles = set(directives(POLICY)["style-src"][1:])
    for name, path in html_pages.items():
        html = root_client.get(path, HTTP_ACCEPT="text/html").content.decode()
        for attributes, body in re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S):
            data_block = "application/json" in attributes
            assert "src=" in attributes or data_block, f"inline script on the {name}: {body}"
            assert "src=" not in attributes or not body.strip(), name
        for css in re.findall(r"<style\b[^>]*>(.*?)</style>", html, re.S):
            assert style_hash(css) in allowed_styles, f"unlisted <style> on the {name}"
        assert "javascript:" not in html.lower(), name
        assert not re.search(r"<[^>]+\son[a-z]+\s*=", html), f"event handler attribute: {name}"


def test_csp_swagger_ui_init_script_is_a_separate_javascript_request(root_client):
    html = root_client.get("/api/docs/").content.decode()
    script_url = re.search(r'<script src="(/api/docs/\?[^"]*script[^"]*)"', html).group(1)
    script = root_client.get(script_url.replace("&amp;", "&"))
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in script.content.decode()


def test_csp_json_answers_carry_no_policy(root_client):
    answer = root_client.get("/api/v1/jobs/", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    assert "Content-Security-Policy" not in answer


def test_csp_debug_error_pages_are_left_alone(root_client, settings):
    # Django's technical 404 page (DEBUG only) is built of inline styles and scripts.
    settings.DEBUG = True
    answer = root_client.get("/no-such-page/")
    assert answer.status_code == 404 and answer["Content-Type"].startswith("text/html")
    assert "Content-Security-Policy" not in answer
