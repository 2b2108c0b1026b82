"""The browsable API as a person uses it: a create form with the inputs a create takes, that
submits as it is filled in, and shows what was wrong next to the field."""

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from jobtracking.models import ExtractionJob
from tests.factories import ExtractorFactory, api_job
from tests.jobtracking.api.conftest import service_account

pytestmark = pytest.mark.django_db
JOBS = "/api/v1/jobs/"


@pytest.fixture
def person(client):
    client.force_login(service_account("person"))
    return client


def html(response) -> str:
    assert response["Content-Type"].startswith("text/html")
    return response.content.decode()


def form(page: str) -> str:
    """The HTML form tab's form (the one that posts multipart)."""
    start = page.index('enctype="multipart/form-data"')
    return page[start : page.index("</form>", start)]


def test_the_create_form_has_the_create_inputs_only(person, extractor):
    ExtractorFactory(slug="retired", enabled=False)
    create = form(html(person.get(JOBS, HTTP_ACCEPT="text/html")))
    assert '<select class="form-control" name="extractor"' in create
    assert '<option value="sandbox"' in create and "retired" not in create
    assert 'type="file"' in create and 'name="file"' in create
    for name in ("file_id", "file_name", "source_url", "options", "metadata"):
        assert f'name="{name}"' in create
    for output_only in ("poll_count", "attempt", "status", "created_at", "links"):
        assert f'name="{output_only}"' not in create
    assert ">{}</textarea>" in create  # options and metadata start as {}, not null
    assert 'value="normal" selected' in create  # the default, not the first choice


def test_the_form_submits_as_filled_in(person, extractor):
    upload = SimpleUploadedFile("budget.csv", b"item,amount\nrent,100\n", "text/csv")
    response = person.post(
        JOBS,
        {
            "extractor": "sandbox",
            "file_id": "from-the-form",
            "file_name": "",
            "source_url": "",
            "file_sha256": "",
            "content_type": "",
            "priority": "",
            "file": upload,
            "options": "{}",
            "metadata": "{}",
        },
        HTTP_ACCEPT="text/html",
    )
    assert response.status_code == 201
    job = ExtractionJob.objects.get(file_id="from-the-form")
    assert (job.file_name, job.content_type, job.options) == ("budget.csv", "text/csv", {})


def test_errors_show_in_the_page_next_to_the_field(person, extractor):
    response = person.post(
        JOBS,
        {"extractor": "sandbox", "file_id": "x", "source_url": "", "options": "[1]"},
        HTTP_ACCEPT="text/html",
    )
    assert response.status_code == 400
    page = html(response)
    assert "validation_error" in page  # the problem, in the response pane
    assert "Must be a JSON object." in form(page)
    neither = person.post(
        JOBS, {"extractor": "sandbox", "file_id": "x", "source_url": ""}, HTTP_ACCEPT="text/html"
    )
    assert "Give exactly one of source_url and file." in form(html(neither))
    assert not ExtractionJob.objects.exists()


def test_an_empty_file_input_is_no_file(person, extractor):
    # What a browser sends for a file input left empty: the part, with no file in it.
    response = person.post(
        JOBS,
        {"extractor": "sandbox", "file_id": "x", "source_url": "", "file": ""},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 400
    assert "Give exactly one of source_url and file." in str(response.json()["errors"])


def test_clients_asking_for_json_still_get_problem_json(person, extractor):
    response = person.post(JOBS, {"extractor": "sandbox"}, HTTP_ACCEPT="application/json")
    assert response["Content-Type"].startswith("application/problem+json")


def test_the_filter_form_is_labelled(person, extractor):
    page = html(person.get(JOBS, HTTP_ACCEPT="text/html"))
    assert "[invalid name]" not in page
    assert "Search" in page and "Priority" in page


def test_an_action_form_takes_the_actions_fields(person, extractor):
    job = api_job(extractor, user=get_user_model().objects.get(username="person"))
    page = html(person.get(f"{JOBS}{job.pk}/requeue/", HTTP_ACCEPT="text/html"))
    assert 'name="force"' in page and 'name="reason"' in page and 'name="poll_count"' not in page
    kept = person.post(
        f"{JOBS}{job.pk}/requeue/", {"reason": "", "priority": ""}, HTTP_ACCEPT="application/json"
    )
    # The empty choice keeps the job's priority: the form is valid, and the job, still
    # pending, cannot be requeued.
    assert kept.status_code == 409 and kept.json()["code"] == "invalid_transition"


def test_the_api_root_describes_the_service_and_links_its_docs(person):
    page = html(person.get("/api/v1/", HTTP_ACCEPT="text/html"))
    assert "default basic root view" not in page and "Django REST framework" not in page
    assert "<h1>Extraction job tracking API</h1>" in page
    assert "system of record for document-extraction jobs" in page
    for path in ("/api/docs/", "/api/schema/", "/api/problems/"):
        assert f'<a href="{path}">' in page
    assert "<code>Authorization: Token &lt;key&gt;</code>" in page
    links = person.get("/api/v1/", HTTP_ACCEPT="application/json").json()
    assert links["docs"] == "http://testserver/api/docs/"
    assert links["jobs"] == "http://testserver/api/v1/jobs/" and "problems" in links


def test_the_browsable_jobs_list_pages_by_20_while_json_keeps_its_default(person, extractor):
    owner = get_user_model().objects.get(username="person")
    for n in range(21):
        api_job(extractor, user=owner, file_id=f"page-{n}")
    browsable = person.get(JOBS, HTTP_ACCEPT="text/html")
    assert len(browsable.data["results"]) == 20 and browsable.data["next"]
    assert len(person.get(JOBS, HTTP_ACCEPT="application/json").json()["results"]) == 21
    asked = person.get(f"{JOBS}?page_size=3", HTTP_ACCEPT="text/html")
    assert len(asked.data["results"]) == 3
    # The browsable page links the stylesheet that wraps its long cursor links.
    assert "/static/jobtracking/api/browsable.css" in html(browsable)
