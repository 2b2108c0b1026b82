"""Cursor lists never skip or repeat a row, whatever ties the ordering field has."""

import base64
import json

import pytest

from jobtracking.models import ExtractionJob
from jobtracking.services import Actor, NewJob, job_create_many
from tests.factories import ExtractionJobFactory
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


@pytest.fixture
def tied_jobs(owner, extractor) -> set[str]:
    """600 jobs of one bulk request: they share `created_at` and `updated_at`."""
    outcomes = job_create_many(
        [
            NewJob(
                extractor=extractor,
                file_id=f"tie-{n}",
                file_name="tie.pdf",
                source_url="https://files.example.org/tie.pdf",
            )
            for n in range(600)
        ],
        actor=Actor("api", owner),
    )
    assert ExtractionJob.objects.values("created_at").distinct().count() == 1
    return {str(outcome.job.pk) for outcome in outcomes}


def walk(api, url: str, link: str) -> tuple[list[str], str | None]:
    """Follow `link` (next or previous) from `url` to the end; the ids in the order seen and the
    last page's opposite link."""
    seen, page = [], None
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.content
        page = response.json()
        results = [job["id"] for job in page["results"]]
        seen += results if link == "next" else list(reversed(results))
        url = page[link]
    return seen, page


# Page size 1 (1,200 requests) only in the default ordering, to keep the suite quick.
@pytest.mark.parametrize(
    ("page_size", "ordering"),
    [(size, "") for size in (1, 7, 50, 500)]
    + [(size, "&ordering=updated_at") for size in (7, 50, 500)],
)
def test_list_pages_every_tied_job_exactly_once_both_ways(api, tied_jobs, page_size, ordering):
    forward, last_page = walk(api, f"{URL}?page_size={page_size}{ordering}", "next")
    assert len(forward) == len(tied_jobs) and set(forward) == tied_jobs
    # Back from the last page's own `previous` link: the rest, each once, in reverse order.
    start = last_page["previous"]
    last = [job["id"] for job in last_page["results"]]
    backward, first_page = walk(api, start, "previous") if start else ([], None)
    assert list(reversed(backward)) + last == forward
    assert first_page is None or first_page["previous"] is None


def test_list_order_ties_break_by_id(api, tied_jobs):
    ids = [job["id"] for job in api.get(URL + "?page_size=500").json()["results"]]
    assert ids == sorted(ids, reverse=True)
    oldest = api.get(URL + "?ordering=created_at&page_size=20").json()["results"]
    ids = [job["id"] for job in oldest]
    assert ids == sorted(ids)


def cursor_of(link: str) -> str:
    return link.split("cursor=")[1].split("&")[0]


@pytest.mark.parametrize(
    "cursor",
    [
        "cD0yMDI2",  # DRF's earlier format: "p=2026"
        "cD0lMDA=",  # "p=%00"
        "bm90IGpzb24",  # not JSON
        "%%%",
        base64.urlsafe_b64encode(b'{"v":2,"o":["-created_at","-id"],"k":["x","y"],"b":false}'),
        base64.urlsafe_b64encode(b'{"v":1,"o":["-created_at","-id"],"k":[],"b":false}'),
        base64.urlsafe_b64encode(b"[]"),
    ],
)
def test_list_refuses_a_malformed_or_earlier_cursor_with_a_problem(api, owner, extractor, cursor):
    ExtractionJobFactory(requested_by=owner, extractor=extractor)
    if isinstance(cursor, bytes):
        cursor = cursor.decode()
    assert_problem(api.get(f"{URL}?cursor={cursor}"), 400, "invalid_cursor")


def test_list_refuses_a_cursor_made_for_another_ordering(api, owner, extractor):
    ExtractionJobFactory.create_batch(3, requested_by=owner, extractor=extractor)
    link = api.get(URL + "?page_size=1").json()["next"]
    assert api.get(link).status_code == 200
    assert_problem(
        api.get(f"{URL}?ordering=updated_at&cursor={cursor_of(link)}"), 400, "invalid_cursor"
    )


def test_list_cursor_is_opaque_but_keeps_the_full_key(api, owner, extractor):
    made = ExtractionJobFactory.create_batch(2, requested_by=owner, extractor=extractor)
    link = api.get(URL + "?page_size=1").json()["next"]
    token = cursor_of(link)
    document = json.loads(base64.urlsafe_b64decode(token + "=="))
    newest = max(made, key=lambda job: (job.created_at, job.pk))
    assert document["k"] == [newest.created_at.isoformat(), str(newest.pk)]


def test_events_feed_pages_every_event_once_both_ways(api, tied_jobs):
    forward, last_page = walk(api, "/api/v1/events/?page_size=7", "next")
    assert len(forward) == len(set(forward)) == len(tied_jobs)
    last = [event["id"] for event in last_page["results"]]
    backward, _ = walk(api, last_page["previous"], "previous")
    assert list(reversed(backward)) + last == forward


def test_admin_changelist_pages_every_tied_job_exactly_once(admin_client, tied_jobs):
    # Django appends -pk to the changelist ordering; this pins that it keeps doing so.
    seen, page = [], 1
    while True:
        response = admin_client.get(f"/admin/jobtracking/extractionjob/?p={page}")
        assert response.status_code == 200
        results = list(response.context["cl"].result_list)
        seen += [str(job.pk) for job in results]
        if not response.context["cl"].paginator.page(page).has_next():
            break
        page += 1
    assert len(seen) == len(tied_jobs) and set(seen) == tied_jobs
