"""Tailing the event feed from now: `GET /api/v1/events/latest/` gives the position to read
`after`, so a client gets what is published from then on without walking the past."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobtracking.models import JobEvent
from jobtracking.services import Actor, NewJob, job_cancel, job_create
from tests.factories import UserFactory
from tests.jobtracking.api.conftest import assert_problem, client_for

pytestmark = pytest.mark.django_db
LATEST = "/api/v1/events/latest/"


@pytest.fixture
def publish(owner, extractor):
    """Create a job as the owner (one `job.created` event); returns the job."""
    counter = iter(range(1000))

    def create():
        new = NewJob(
            extractor=extractor,
            file_id=f"tail-{next(counter)}",
            source_url="https://files.example.org/e.pdf",
        )
        return job_create(new, actor=Actor("api", owner))

    return create


def feed(api, url: str) -> list[tuple[int, str, str]]:
    """Every event from `url` on, following `next` links."""
    seen = []
    while url:
        page = api.get(url).json()
        seen += [(event["id"], event["type"], event["job"]) for event in page["results"]]
        url = page["next"]
    return seen


def test_events_latest_tails_only_what_is_published_afterwards(api, owner, publish):
    before = [publish() for _ in range(3)]
    position = api.get(LATEST).json()

    assert position["after"] == JobEvent.objects.order_by("id").last().id
    assert feed(api, position["next"]) == []
    later = publish()
    job_cancel(job_id=before[0].pk, actor=Actor("api", owner))
    last = publish()

    tail = feed(api, position["next"])
    assert [(kind, job) for _, kind, job in tail] == [
        ("job.created", str(later.pk)),
        ("job.cancelled", str(before[0].pk)),
        ("job.created", str(last.pk)),
    ]
    assert [event_id for event_id, *_ in tail] == sorted(event_id for event_id, *_ in tail)
    # Polling on from the last id processed, with a filter, as docs/api.md shows.
    after_later = api.get(f"/api/v1/events/?after={tail[0][0]}&type=job.created").json()
    assert [event["job"] for event in after_later["results"]] == [str(last.pk)]


def test_events_latest_is_absolute_and_zero_on_an_empty_feed(api):
    position = api.get(LATEST).json()
    assert position == {"after": 0, "next": "http://testserver/api/v1/events/?after=0"}


def test_events_latest_leaves_settling_events_to_the_tail(api, publish, settings):
    # An event still settling when the position is taken may still commit below a newer id;
    # so the position stops at the newest settled one, and the tail brings the rest once
    # they settle.
    settings.JOBS_EVENT_FEED_SETTLE_SECONDS = 60
    settled, settling = publish(), publish()
    JobEvent.objects.filter(job=settled).update(created_at=timezone.now() - timedelta(minutes=5))
    position = api.get(LATEST).json()
    assert position["after"] == JobEvent.objects.get(job=settled).id

    JobEvent.objects.filter(job=settling).update(created_at=timezone.now() - timedelta(minutes=2))
    assert [job for _, _, job in feed(api, position["next"])] == [str(settling.pk)]


def test_events_latest_needs_the_feeds_permission_and_takes_no_parameters(api, anonymous, publish):
    publish()
    assert_problem(anonymous.get(LATEST), 401, "not_authenticated")
    assert_problem(client_for(UserFactory()).get(LATEST), 403, "permission_denied")
    refused = assert_problem(api.get(f"{LATEST}?type=job.created"), 400, "validation_error")
    assert "type" in refused["errors"]


def test_events_latest_is_in_the_openapi_document(api):
    schema = api.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/events/latest/"]["get"]
    response = operation["responses"]["200"]["content"]["application/json"]
    assert operation["summary"] == "Where the event feed is now"
    properties = schema["components"]["schemas"]["EventFeedPosition"]["properties"]
    assert set(properties) == {"after", "next"}
    assert response["examples"]["Now"]["value"]["after"] == 48213
