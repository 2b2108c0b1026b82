"""Every /api/ error is problem+json whose `type` is a page of this service; and the lookups
every request makes are remembered briefly."""

import time
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobtracking import errors
from jobtracking.api.errors import problem_body
from jobtracking.api.pagination import InvalidCursorError
from jobtracking.api.problems import PROBLEMS
from jobtracking.models import ApiToken, ExtractionJob
from tests.factories import ExtractionJobFactory
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/nope/", "/api/v1/jobs/xyz/", "/api/nothing"])
def test_unknown_routes_and_ids_are_problems_in_every_mode(api, settings, debug, path):
    settings.DEBUG = debug
    assert_problem(api.get(path), 404, "not_found")


def test_a_body_over_the_memory_limit_is_a_413_problem(api, settings, extractor):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = {"extractor": "sandbox", "file_id": "f", "metadata": {"note": "x" * 5000}}
    problem = assert_problem(api.post(URL, body, format="json"), 413, "payload_too_large")
    assert problem["limit"] == 1000
    assert not ExtractionJob.objects.exists()


def test_a_problem_type_is_a_page_of_this_service(api, anonymous):
    problem = assert_problem(api.get("/api/v1/nope/"), 404, "not_found")
    assert problem["type"] == "/api/problems/not_found"
    page = anonymous.get(problem["type"])
    assert page.status_code == 200 and page.json()["status"] == 404
    html = anonymous.get(problem["type"], HTTP_ACCEPT="text/html").content.decode()
    assert "No such resource" in html
    assert anonymous.get("/api/problems/").json()["force_required"]["status"] == 409
    assert anonymous.get("/api/problems/made-up").status_code == 404


def test_every_application_error_code_is_documented():
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    codes = {cls.code for cls in subclasses(errors.ApplicationError)} | {InvalidCursorError.code}
    assert codes <= set(PROBLEMS)


def test_force_required_says_how_to_force(api, owner):
    job = ExtractionJobFactory(requested_by=owner, succeeded=True)
    problem = assert_problem(api.post(f"{URL}{job.pk}/requeue/"), 409, "force_required")
    assert '"force": true' in problem["detail"]


def test_service_validation_errors_are_lists_too(api, extractor):
    body = {"extractor": "sandbox", "file_id": "f", "source_url": "https://files.example.org/a"}
    response = api.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 300)
    problem = assert_problem(response, 400, "validation_error")
    assert problem["errors"] == {"Idempotency-Key": ["At most 255 characters."]}


def test_a_problem_body_writes_the_client_text_it_echoes_as_unicode():
    body = problem_body(
        400, "validation_error", "No '\ud800'.", errors={"k\ud800": ["a\x00"]}, limit=5
    )
    assert body["detail"] == "No '\ufffd'."
    assert (body["errors"], body["limit"]) == ({"k\ufffd": ["a\ufffd"]}, 5)


def test_a_known_token_costs_no_query_and_a_revoked_one_stops_within_the_cache_time(
    api, owner, settings
):
    settings.API_LOOKUP_CACHE_SECONDS = 0.5
    assert api.get("/api/v1/statuses/").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/v1/statuses/").status_code == 200
    assert not [q for q in queries if "apitoken" in q["sql"] or "permission" in q["sql"]]
    ApiToken.objects.filter(user=owner).delete()
    time.sleep(0.6)
    assert_problem(api.get("/api/v1/statuses/"), 401, "authentication_failed")


def test_problem_pages_render_their_markdown_with_the_services_stylesheet(anonymous):
    page = anonymous.get("/api/problems/force_required", HTTP_ACCEPT="text/html")
    html = page.content.decode()
    assert "<code>&quot;force&quot;: true</code>" in html and "`" not in html
    assert "HTTP 409 Conflict" in html
    index = anonymous.get("/api/problems/", HTTP_ACCEPT="text/html").content.decode()
    assert "`" not in index
    assert '<a href="/api/problems/throttled"><code>throttled</code></a>' in index
    assert "wait for <code>Retry-After</code> seconds" in index
    for response in (page, anonymous.get("/api/problems/", HTTP_ACCEPT="text/html")):
        text = response.content.decode()
        assert "style-src 'self'" in response["Content-Security-Policy"]
        # CSP-compatible: one stylesheet of this origin, no inline style.
        assert '<link rel="stylesheet" href="/static/jobtracking/api/problems.css">' in text
        assert "<style" not in text and " style=" not in text


def test_the_problem_stylesheet_loads_nothing_from_elsewhere():
    from django.contrib.staticfiles import finders

    css = Path(finders.find("jobtracking/api/problems.css")).read_text()
    assert "@import" not in css and "url(" not in css and "header" in css
