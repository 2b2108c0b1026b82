"""What every console page shares: the service's name, where "View site" leads, breadcrumbs and
titles that read well, and times that name their zone."""

import html as entities
import re

import pytest
from django.contrib.staticfiles import finders
from django.utils import timezone
from django.utils.html import strip_tags

from jobtracking.services import Actor, job_transition
from tests.factories import ExtractionResultFactory, ExtractorFactory, api_job
from tests.jobtracking.admin.conftest import JOBS

pytestmark = pytest.mark.django_db


def text(html: str, start: str, end: str) -> str:
    part = html[html.index(start) :]
    return re.sub(r"\s+", " ", entities.unescape(strip_tags(part[: part.index(end)]))).strip()


@pytest.fixture
def job():
    job = api_job(ExtractorFactory(slug="sandbox"), "ledger", source_url="https://f.example.org/l")
    job_transition(job_id=job.pk, to_status="submitting", actor=Actor.system())
    return job


def test_console_names_the_service_and_view_site_opens_the_api_docs(root_client):
    html = root_client.get("/admin/").content.decode()
    assert "<title>Staff console | Extraction job tracking</title>" in html
    assert text(html, '<div id="site-name">', "</div>") == "Extraction job tracking"
    assert "Django administration" not in html and "Django site admin" not in html
    (view_site,) = re.findall(r'<a href="([^"]*)">View site</a>', html)
    assert view_site == "/api/docs/"
    assert root_client.get(view_site).status_code == 200


@pytest.mark.parametrize(
    ("path", "title", "crumbs"),
    [
        (JOBS, "Extraction jobs", ["Home", "Job tracking", "Extraction jobs"]),
        ("/admin/jobtracking/jobevent/", "Job events", ["Home", "Job tracking", "Job events"]),
        (
            "/admin/jobtracking/extractionresult/",
            "Extraction results",
            ["Home", "Job tracking", "Extraction results"],
        ),
    ],
)
def test_lists_are_titled_by_what_they_hold(root_client, path, title, crumbs):
    html = root_client.get(path).content.decode()
    assert f"<h1>{title}</h1>" in html and f"<title>{title} | " in html
    assert "Select " not in text(html, "<title>", "</title>")
    # Once each: the app and its jobs model no longer share a name.
    assert (
        text(html, '<div class="breadcrumbs">', "</div>").split(
            " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "
        )
        == crumbs
    )


def test_every_time_names_its_zone(root_client, job, settings):
    assert settings.TIME_ZONE == "UTC"
    result = ExtractionResultFactory(job=job)
    created = timezone.localtime(job.created_at).strftime("%Y-%m-%d %H:%M:%S")
    listing = root_client.get(JOBS).content.decode()
    assert f"{created} UTC" in listing
    page = root_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    summary = text(page, 'id="job-summary"', "</dl>")
    timeline = text(page, 'id="timeline"', "</table>")
    results = text(page, 'id="results-module"', "</table>")
    fields = text(page, 'fieldset-heading">Times', "</fieldset>")
    assert f"{created} UTC" in summary and f"{created} UTC" in fields
    assert timeline.count(" UTC") == job.status_changes.count()
    assert results.count(" UTC") == 1
    full = root_client.get(f"{JOBS}{job.pk}/results/{result.attempt}/").content.decode()
    received = timezone.localtime(result.received_at).strftime("%Y-%m-%d %H:%M:%S")
    assert f"received {received} UTC" in full


def test_the_index_names_sections_as_staff_know_them(root_client):
    html = root_client.get("/admin/").content.decode()
    names = [
        entities.unescape(name).strip()
        for name in re.findall(r'<th scope="row"[^>]*>\s*<a href="[^"]*"[^>]*>([^<]+)</a>', html)
    ]
    assert "API tokens" in names and "Api tokens" not in names
    assert "Login lockouts" in html and ">Axes<" not in html
    # Reference data stays off the index, its page still there.
    assert "Job statuses" not in names
    assert root_client.get("/admin/jobtracking/jobstatus/").status_code == 200


def test_the_favicon_is_found(client):
    response = client.get("/favicon.ico")
    assert (response.status_code, response["Location"]) == (302, "/static/jobtracking/favicon.svg")
    assert finders.find("jobtracking/favicon.svg")
