"""`GET /api/v1/usage/`: scoped like jobs, validated like every query, answered from usage rows."""

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission

from jobtracking import states
from jobtracking.services import SYSTEM, Move, jobs_transition
from jobtracking.services.usage import usage_roll_up
from tests.factories import ExtractionJobFactory, ExtractorFactory
from tests.jobtracking.api.conftest import client_for, service_account

pytestmark = pytest.mark.django_db

URL = "/api/v1/usage/"


def used(client, extractor, pages: int) -> None:
    job = ExtractionJobFactory(extractor=extractor, processing=True, requested_by=client)
    jobs_transition([Move(job.pk, states.SUCCEEDED, billed_pages=pages)], actor=SYSTEM)


@pytest.fixture
def usage(owner):
    other = service_account("other")
    extractor = ExtractorFactory(slug="layout", model_id="prebuilt-layout")
    used(owner, extractor, 3)
    used(owner, extractor, 4)
    usage_roll_up()
    used(owner, extractor, 5)  # not rolled up yet: counted all the same
    used(other, extractor, 100)
    return other


def test_usage_shows_a_client_its_own_pages_only(api, usage):
    answer = api.get(URL, {"group_by": "client,extractor,model"})

    assert answer.status_code == 200
    today = datetime.now(UTC).date()
    assert answer.json() == {
        "from": f"{today:%Y-%m}-01",
        "to": f"{today}",
        "group_by": ["client", "extractor", "model"],
        "results": [
            {
                "group": {"client": "owner", "extractor": "layout", "model": "prebuilt-layout"},
                "pages": 12,
                "jobs": 3,
                "pages_saved": 0,
                "cost": None,
                "currency": None,
            }
        ],
    }


def test_usage_shows_view_all_staff_every_clients_pages(usage, django_assert_max_num_queries):
    staff = service_account("auditor")
    staff.user_permissions.add(Permission.objects.get(codename="view_all_extractionjobs"))
    with django_assert_max_num_queries(8):
        answer = client_for(staff).get(URL, {"group_by": "client,month"})

    month = f"{datetime.now(UTC):%Y-%m}"
    assert [(r["group"], r["pages"], r["jobs"]) for r in answer.json()["results"]] == [
        ({"client": "other", "month": month}, 100, 1),
        ({"client": "owner", "month": month}, 12, 3),
    ]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"group_by": "client,color"}, "group_by"),
        ({"group_by": "day,month"}, "group_by"),
        ({"from": "2026-11-31"}, "from"),
        ({"from": "2026-11-02", "to": "2026-11-01"}, "from"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, "to"),
        ({"client": "other"}, "client"),  # unknown parameters are refused by name
    ],
)
def test_usage_refuses_a_bad_query_with_a_problem_naming_the_field(api, query, field):
    answer = api.get(URL, query)

    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("application/problem+json")
    assert field in str(answer.json())


def test_usage_needs_authentication(client):
    assert client.get(URL).status_code in (401, 403)


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("group_by=client%00", 400),
        ("group_by=%ED%A0%80", 400),  # a lone surrogate, as UTF-8 would spell it
        ("from=0001-01-01&to=9999-12-31", 400),
        ("from=9999-12-31", 400),
        ("from=2026-11-01T00:00:00", 400),
        ("to=0001-01-01", 200),
        ("from=2026-1-1&to=2026-01-31", 200),
    ],
)
def test_usage_answers_hostile_queries_without_a_server_error(api, query, status):
    answer = api.get(f"{URL}?{query}")

    assert answer.status_code == status
    if status == 400:
        assert answer["Content-Type"].startswith("application/problem+json")
