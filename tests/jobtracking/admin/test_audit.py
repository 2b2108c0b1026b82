"""The results and events lists (their columns, filters and id search) and the events a job
page shows."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import (
    ExtractionJobFactory,
    ExtractionResultFactory,
    ExtractorFactory,
    JobEventFactory,
)
from tests.jobtracking.admin.conftest import JOBS, staff

pytestmark = pytest.mark.django_db

RESULTS = "/admin/jobtracking/extractionresult/"
EVENTS = "/admin/jobtracking/jobevent/"


def listed(response) -> list:
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


@pytest.fixture
def results():
    azure = ExtractorFactory(slug="azure")
    recent = ExtractionResultFactory(
        job__extractor=azure, page_count=3, size_bytes=2048, model_version="prebuilt-layout"
    )
    old = ExtractionResultFactory(received_at=timezone.now() - timedelta(days=10))
    return recent, old


def test_results_list_has_columns_people_read(root_client, results):
    recent, _ = results
    response = root_client.get(RESULTS)
    html = response.content.decode()
    headers = [str(header["text"]) for header in response.context["result_headers"]]
    assert headers == [
        "job", "attempt", "extractor", "pages", "size", "model", "received", "result",
    ]  # fmt: skip
    assert str(recent.job_id)[-12:] in html and "prebuilt-layout" in html and "2.0\xa0KB" in html
    assert f"{JOBS}{recent.job_id}/results/1/" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [("received=7", ["recent"]), ("job__extractor__id__exact={azure}", ["recent"]), ("", None)],
)
def test_results_list_filters(root_client, results, query, expected):
    recent, old = results
    names = {"recent": recent.pk, "old": old.pk}
    query = query.format(azure=recent.job.extractor_id)
    shown = {result.pk for result in listed(root_client.get(f"{RESULTS}?{query}"))}
    assert shown == {names[n] for n in (expected or names)}


def test_results_list_searches_by_whole_job_id(root_client, results):
    _, old = results
    assert [r.pk for r in listed(root_client.get(f"{RESULTS}?q={old.job_id}"))] == [old.pk]
    assert listed(root_client.get(f"{RESULTS}?q=not-an-id")) == []


@pytest.fixture
def events():
    job = ExtractionJobFactory()
    created = JobEventFactory(job=job)
    failed = JobEventFactory(job=job, type="job.failed")
    other = JobEventFactory(created_at=timezone.now() - timedelta(days=10))
    return created, failed, other


def test_events_list_has_columns_filters_and_id_search(root_client, events):
    created, failed, other = events
    response = root_client.get(EVENTS)
    headers = [str(header["text"]) for header in response.context["result_headers"]]
    assert headers == ["id", "type", "job or batch", "published", "event id"]
    assert [e.pk for e in listed(response)] == [other.pk, failed.pk, created.pk]
    assert [e.pk for e in listed(root_client.get(f"{EVENTS}?type__exact=job.failed"))] == [
        failed.pk
    ]
    recent = listed(root_client.get(f"{EVENTS}?published=7"))
    assert {e.pk for e in recent} == {created.pk, failed.pk}
    by_job = listed(root_client.get(f"{EVENTS}?q={created.job_id}"))
    assert {e.pk for e in by_job} == {created.pk, failed.pk}
    assert [e.pk for e in listed(root_client.get(f"{EVENTS}?q={other.event_id}"))] == [other.pk]


def test_job_page_lists_its_events_once_each_without_row_captions(root_client, events):
    created, _, _ = events
    html = root_client.get(f"{JOBS}{created.job_id}/change/").content.decode()
    section = html[html.index('id="events-module"') :]
    section = section[: section.index("</fieldset>")]
    assert "Events published (2)" in section
    assert section.count("job.created") == 1 and section.count("job.failed") == 1
    assert str(created.event_id) in section
    assert 'class="original"' not in html and str(created) not in html


def test_job_page_shows_events_only_to_those_who_may_view_them(client, events):
    created, _, _ = events
    client.force_login(staff("view_extractionjob", "view_all_extractionjobs"))
    html = client.get(f"{JOBS}{created.job_id}/change/").content.decode()
    assert "Status timeline" in html and 'id="events-module"' not in html


def test_result_and_event_pages_render_read_only(root_client, results, events):
    recent, _ = results
    html = root_client.get(f"{RESULTS}{recent.pk}/change/").content.decode()
    assert f"{JOBS}{recent.job_id}/results/1/" in html and "prebuilt-layout" in html
    assert 'name="_save"' not in html and "Total: 10" not in html  # the payload is a link away
    event = events[0]
    html = root_client.get(f"{EVENTS}{event.pk}/change/").content.decode()
    assert str(event.event_id) in html and 'name="_save"' not in html
