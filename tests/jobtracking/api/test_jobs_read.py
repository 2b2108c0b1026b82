import uuid
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from rest_framework import serializers

from jobtracking.api.serializers import ExtractionJobSerializer
from jobtracking.models import ExtractionJob, JobEvent, ServiceHeartbeat
from jobtracking.representation import JobRepresentation
from jobtracking.services import Actor, NewJob, job_cancel, job_create
from tests.factories import (
    ExtractionJobFactory,
    ExtractionResultFactory,
    ExtractorFactory,
    UserFactory,
)
from tests.jobtracking.api.conftest import assert_problem, client_for, service_account

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/"


def ids(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {job["id"] for job in response.json()["results"]}


@pytest.fixture
def jobs(owner, extractor):
    """A small fleet of the owner's jobs and one of somebody else's."""
    now = timezone.now()
    return {
        "pending": ExtractionJobFactory(requested_by=owner, extractor=extractor, file_id="a-1"),
        "failed": ExtractionJobFactory(
            requested_by=owner,
            extractor=extractor,
            failed=True,
            file_id="b-2",
            file_name="budget-2024.pdf",
            external_job_id="ext-77",
            created_at=now - timedelta(days=3),
            completed_at=now - timedelta(days=2),
        ),
        "succeeded": ExtractionJobFactory(
            requested_by=owner,
            extractor=ExtractorFactory(slug="azure", azure=True),
            succeeded=True,
            file_id="c-3",
            created_at=now - timedelta(hours=2),
            completed_at=now - timedelta(hours=1),
        ),
        "foreign": ExtractionJobFactory(requested_by=UserFactory(), extractor=extractor),
    }


# Permissions


@pytest.mark.parametrize(
    "path",
    [
        URL,
        URL + "bulk/",
        "/api/v1/extractors/",
        "/api/v1/statuses/",
        "/api/v1/events/",
        "/api/v1/stats/",
        "/readyz",
        "/api/schema/",
    ],
)
def test_nothing_is_anonymous(anonymous, path):
    response = anonymous.get(path)
    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


def test_healthz_is_the_one_anonymous_endpoint(anonymous):
    assert anonymous.get("/healthz").json() == {"status": "ok"}


def test_a_wrong_token_is_refused(anonymous):
    anonymous.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert_problem(anonymous.get(URL), 401, "authentication_failed")


def test_list_shows_a_client_only_its_own_jobs(api, jobs):
    assert ids(api.get(URL)) == {str(jobs[k].pk) for k in ("pending", "failed", "succeeded")}


def test_list_shows_everything_to_a_view_all_client(auditor_api, jobs):
    assert ids(auditor_api.get(URL)) == {str(job.pk) for job in jobs.values()}


def test_staff_without_permissions_sees_nothing(jobs):
    staff = client_for(UserFactory(username="staff", is_staff=True))
    assert_problem(staff.get(URL), 403, "permission_denied")


def test_superuser_sees_everything(jobs):
    root = client_for(UserFactory(username="root", is_superuser=True))
    assert len(ids(root.get(URL))) == 4


def test_another_clients_job_is_not_found(other_api, jobs):
    assert_problem(other_api.get(f"{URL}{jobs['pending'].pk}/"), 404, "job_not_found")


def test_another_clients_job_and_no_job_at_all_answer_alike(other_api, jobs):
    theirs = other_api.get(f"{URL}{jobs['pending'].pk}/result/").json()
    missing = other_api.get(f"{URL}{uuid.uuid4()}/result/").json()
    assert theirs["code"] == missing["code"] == "job_not_found"
    assert str(jobs["pending"].pk) not in str(missing)


def test_retrieve_returns_durations_and_error(api, jobs):
    data = api.get(f"{URL}{jobs['failed'].pk}/").json()
    assert data["error"] == {
        "code": "extraction_failed",
        "message": "The document is corrupt.",
        "requeue_may_help": False,
    }
    assert data["durations"]["turnaround_seconds"] == pytest.approx(86400, abs=1)


def test_retrieve_with_a_malformed_id_is_a_json_404(api):
    response = api.get(URL + "not-a-uuid/")
    assert_problem(response, 404, "not_found")


# Filters, search, ordering, pagination


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=pending", {"pending"}),
        ("status=pending&status=failed", {"pending", "failed"}),
        ("extractor=azure", {"succeeded"}),
        ("file_id=b-2", {"failed"}),
        ("external_job_id=ext-77", {"failed"}),
        ("error_code=extraction_failed", {"failed"}),
        ("requested_by=owner", {"pending", "failed", "succeeded"}),
        ("created_before={days_ago_1}", {"failed"}),
        ("created_after={days_ago_1}", {"pending", "succeeded"}),
        ("completed_after={days_ago_1}", {"succeeded"}),
        ("completed_before={days_ago_1}", {"failed"}),
        ("search=b-2", {"failed"}),
        ("search=budget-20", {"failed"}),
        ("search=ext-77", {"failed"}),
    ],
)
def test_list_filters(api, jobs, query, expected):
    days_ago_1 = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    response = api.get(URL + "?" + query.format(days_ago_1=days_ago_1))
    assert ids(response) == {str(jobs[name].pk) for name in expected}


def test_list_search_by_job_id(api, jobs):
    assert ids(api.get(f"{URL}?search={jobs['pending'].pk}")) == {str(jobs["pending"].pk)}


def test_list_refuses_an_unknown_status(api, jobs):
    problem = assert_problem(api.get(URL + "?status=nope"), 400, "validation_error")
    assert "status" in problem["errors"]


def test_list_pages_by_cursor_newest_first(api, owner, extractor):
    made = ExtractionJobFactory.create_batch(7, requested_by=owner, extractor=extractor)
    seen, url = [], URL + "?page_size=3"
    while url:
        page = api.get(url).json()
        seen += [job["id"] for job in page["results"]]
        url = page["next"]
    expected = sorted(made, key=lambda job: job.created_at, reverse=True)
    assert seen == [str(job.pk) for job in expected]


def test_list_orders_by_an_allowed_field_only(api, owner, extractor):
    ExtractionJobFactory.create_batch(3, requested_by=owner, extractor=extractor)
    oldest_first = api.get(URL + "?ordering=created_at").json()["results"]
    assert [j["created_at"] for j in oldest_first] == sorted(j["created_at"] for j in oldest_first)
    problem = assert_problem(api.get(URL + "?ordering=status"), 400, "validation_error")
    assert problem["errors"]["ordering"][0].startswith("Cannot order by 'status': use created_at")


@pytest.mark.parametrize("size", ["-5", "0", "x", "100000"])
def test_list_refuses_a_page_size_it_would_not_honour(api, size):
    problem = assert_problem(api.get(f"{URL}?page_size={size}"), 400, "validation_error")
    assert problem["errors"]["page_size"] == ["Must be an integer from 1 to 500."]


@pytest.mark.parametrize(
    "path",
    [URL, f"{URL}?status=failed", "/api/v1/events/", "/api/v1/extractors/", "/api/v1/stats/"],
)
def test_unknown_query_parameters_are_refused_by_name(api, path):
    joiner = "&" if "?" in path else "?"
    problem = assert_problem(api.get(f"{path}{joiner}colour=red"), 400, "validation_error")
    assert list(problem["errors"]) == ["colour"]
    assert problem["errors"]["colour"][0].startswith("Unknown query parameter.")


def test_each_endpoint_takes_the_parameters_it_reads(api, owner, jobs):
    job = jobs["pending"]
    for path in (
        f"{URL}?status=failed&extractor=x&ordering=-created_at&page_size=5&search=f",
        "/api/v1/events/?after=0&type=job.created&page_size=5",
        "/api/v1/stats/?window_hours=24",
        f"{URL}{job.pk}/result/?attempt=1",
    ):
        assert api.get(path).status_code != 400, path


def test_list_query_count_does_not_grow_with_the_page(
    api, owner, extractor, django_assert_max_num_queries
):
    ExtractionJobFactory.create_batch(40, requested_by=owner, extractor=extractor)
    with django_assert_max_num_queries(6):
        response = api.get(URL + "?page_size=40")
    assert len(response.json()["results"]) == 40


# History, result, cancel, requeue


def test_history_lists_the_status_changes_in_order(api, owner, extractor):
    job = job_create(
        NewJob(extractor=extractor, file_id="h", source_url="https://files.example.org/h.pdf"),
        actor=Actor("api", owner),
    )
    job_cancel(job_id=job.pk, actor=Actor("api", owner), reason="changed my mind")
    history = api.get(f"{URL}{job.pk}/history/").json()
    assert [(h["from_status"], h["to_status"]) for h in history] == [
        (None, "pending"),
        ("pending", "cancelled"),
    ]
    assert history[1]["reason"] == "changed my mind" and history[1]["actor"] == "owner"


def test_result_returns_the_latest_attempt_or_the_one_asked(api, owner):
    job = ExtractionJobFactory(requested_by=owner, succeeded=True, attempt=2)
    ExtractionResultFactory(job=job, attempt=1, payload={"n": 1})
    ExtractionResultFactory(job=job, attempt=2, payload={"n": 2})
    assert api.get(f"{URL}{job.pk}/result/").json()["payload"] == {"n": 2}
    assert api.get(f"{URL}{job.pk}/result/?attempt=1").json()["payload"] == {"n": 1}
    assert_problem(api.get(f"{URL}{job.pk}/result/?attempt=9"), 404, "not_found")
    assert_problem(api.get(f"{URL}{job.pk}/result/?attempt=x"), 400, "validation_error")


@pytest.mark.parametrize("azure", [False, True])
def test_result_gives_the_extractor_s_payload_and_the_one_document_shape(api, owner, azure):
    payloads = {
        False: {
            "pages": [{"number": 1, "text": "Total: 10"}],
            "key_values": [{"key": "Total", "value": "10", "page": 1}],
            "tables": [{"page": 1, "rows": [["a", "b"]]}],
        },
        True: {
            "content": "Total: 10",
            "pages": [{"pageNumber": 1, "spans": [{"offset": 0, "length": 9}]}],
            "keyValuePairs": [
                {
                    "key": {"content": "Total"},
                    "value": {"content": "10"},
                    "confidence": 0.5,
                    "boundingRegions": [{"pageNumber": 1}],
                }
            ],
            "tables": [
                {
                    "rowCount": 1,
                    "columnCount": 2,
                    "boundingRegions": [{"pageNumber": 1}],
                    "cells": [
                        {"rowIndex": 0, "columnIndex": 0, "content": "a"},
                        {"rowIndex": 0, "columnIndex": 1, "content": "b"},
                    ],
                }
            ],
        },
    }
    job = ExtractionJobFactory(requested_by=owner, succeeded=True, extractor__azure=azure)
    ExtractionResultFactory(job=job, payload=payloads[azure])
    body = api.get(f"{URL}{job.pk}/result/").json()
    assert body["payload"] == payloads[azure]
    cell = {"header": False, "row_span": 1, "column_span": 1}
    assert body["document"] == {
        "pages": [{"number": 1, "text": "Total: 10"}],
        "key_values": [
            {"key": "Total", "value": "10", "page": 1, "confidence": 0.5 if azure else None}
        ],
        "tables": [
            {
                "page": 1,
                "caption": "",
                "rows": [[{"text": "a", **cell}, {"text": "b", **cell}]],
                "truncated": False,
            }
        ],
        "more_pairs": 0,
        "more_tables": 0,
    }


def test_result_of_a_job_without_one_yet_is_409_with_its_status(api, jobs):
    problem = assert_problem(api.get(f"{URL}{jobs['pending'].pk}/result/"), 409, "result_not_ready")
    assert problem["job_status"] == "pending"
    assert problem["type"] == "/api/problems/result_not_ready"


@pytest.mark.parametrize("status", ["failed", "timed_out", "cancelled"])
def test_result_of_a_job_that_ended_without_one_says_none_will_come(api, owner, status):
    job = ExtractionJobFactory(requested_by=owner, **{status: True})
    problem = assert_problem(api.get(f"{URL}{job.pk}/result/"), 409, "job_ended_without_result")
    assert problem["job_status"] == status
    assert problem["detail"].startswith(f"The job ended without a result: it is {status}.")
    assert problem["type"] == "/api/problems/job_ended_without_result"


@pytest.mark.parametrize(("trait", "may_help"), [("failed", False), ("timed_out", True)])
def test_a_jobs_error_says_whether_a_requeue_may_help(api, owner, trait, may_help):
    job = ExtractionJobFactory(requested_by=owner, **{trait: True})
    error = api.get(f"{URL}{job.pk}/").json()["error"]
    assert set(error) == {"code", "message", "requeue_may_help"}
    assert error["requeue_may_help"] is may_help


def test_cancel_records_the_client_and_reason(api, owner, jobs):
    response = api.post(f"{URL}{jobs['pending'].pk}/cancel/", {"reason": "dup"}, format="json")
    assert response.json()["status"] == "cancelled"
    change = jobs["pending"].status_changes.get()
    assert (change.actor, change.actor_type, change.reason) == (owner, "api", "dup")


def test_cancel_of_a_terminal_job_is_409(api, jobs):
    assert_problem(api.post(f"{URL}{jobs['failed'].pk}/cancel/"), 409, "invalid_transition")


def test_cancel_and_requeue_need_their_permissions(viewer_api, jobs):
    viewer = viewer_api
    viewer_user = UserFactory(username="viewer")
    viewer_user.user_permissions.add(Permission.objects.get(codename="view_all_extractionjobs"))
    assert_problem(viewer.post(f"{URL}{jobs['pending'].pk}/cancel/"), 403, "permission_denied")
    assert_problem(viewer.post(f"{URL}{jobs['failed'].pk}/requeue/"), 403, "permission_denied")
    assert ExtractionJob.objects.get(pk=jobs["pending"].pk).status_id == "pending"


def test_requeue_of_a_failed_job_starts_attempt_two(api, jobs):
    data = api.post(f"{URL}{jobs['failed'].pk}/requeue/", {"reason": "fixed"}, format="json")
    assert (data.json()["status"], data.json()["attempt"]) == ("pending", 2)


def test_requeue_of_a_succeeded_job_needs_force(api, jobs):
    url = f"{URL}{jobs['succeeded'].pk}/requeue/"
    assert_problem(api.post(url, {}, format="json"), 409, "force_required")
    assert api.post(url, {"force": True}, format="json").json()["attempt"] == 2


# Reference data, events, stats, readiness


def test_extractors_never_show_keys_or_their_variables(api, extractor):
    data = api.get("/api/v1/extractors/").json()
    assert data[0]["slug"] == "sandbox"
    assert "api_key_env" not in data[0] and "base_url" not in data[0]


def test_extractors_show_the_rate_limits_in_force(api, extractor):
    ExtractorFactory(slug="azure", azure=True, poll_rate=20)
    data = {e["slug"]: e for e in api.get("/api/v1/extractors/").json()}
    assert (data["azure"]["submit_rate_limit"], data["azure"]["poll_rate_limit"]) == (15, 20)
    assert (data["sandbox"]["submit_rate_limit"], data["sandbox"]["poll_rate_limit"]) == (0, 0)


def test_statuses_lists_the_nine_statuses(api):
    data = api.get("/api/v1/statuses/").json()
    assert [s["code"] for s in data][:3] == ["pending", "held", "submitting"] and len(data) == 9


def test_events_feed_pages_by_cursor_and_after(api, owner, other_api, extractor):
    actor = Actor("api", owner)
    made = [
        job_create(
            NewJob(
                extractor=extractor, file_id=f"e{n}", source_url="https://files.example.org/e.pdf"
            ),
            actor=actor,
        )
        for n in range(5)
    ]
    job_cancel(job_id=made[0].pk, actor=actor)
    seen, url = [], "/api/v1/events/?page_size=2"
    while url:
        page = api.get(url).json()
        seen += [(e["type"], e["job"]) for e in page["results"]]
        url = page["next"]
    assert len(seen) == 6 and seen[-1] == ("job.cancelled", str(made[0].pk))
    last_created = JobEvent.objects.filter(type="job.created").order_by("id").last().id
    after = api.get(f"/api/v1/events/?after={last_created}").json()["results"]
    assert [e["type"] for e in after] == ["job.cancelled"]
    only_type = api.get("/api/v1/events/?type=job.cancelled").json()["results"]
    assert len(only_type) == 1
    assert other_api.get("/api/v1/events/").json()["results"] == []


def test_events_feed_hides_events_younger_than_the_settle_window(api, owner, extractor, settings):
    settings.JOBS_EVENT_FEED_SETTLE_SECONDS = 60
    job_create(
        NewJob(extractor=extractor, file_id="new", source_url="https://files.example.org/e.pdf"),
        actor=Actor("api", owner),
    )
    assert api.get("/api/v1/events/").json()["results"] == []


def test_stats_counts_rates_and_percentiles(api, jobs):
    data = api.get("/api/v1/stats/?window_hours=24").json()
    assert data["created_by_status"]["pending"] == 1
    assert data["created_by_status"]["succeeded"] == 1
    assert data["created_by_extractor"] == {"sandbox": {"pending": 1}, "azure": {"succeeded": 1}}
    assert data["completed"] == 1 and data["success_rate"] == 1.0
    assert data["turnaround_seconds"]["p50"] == pytest.approx(3600, abs=1)
    assert_problem(api.get("/api/v1/stats/?window_hours=0"), 400, "validation_error")


def test_readyz_needs_recent_heartbeats(api, caplog):
    response = api.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"]["ok"] is True
    # A failing probe is a warning naming what is missing, never an error line.
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= 30] == [
        ("WARNING", "not ready: cluster, dispatcher")
    ]
    for kind in ("cluster", "dispatcher"):
        ServiceHeartbeat.objects.create(name=f"{kind}@test", kind=kind, beat_at=timezone.now())
    ready = api.get("/readyz").json()
    assert ready["ready"] is True
    # A client learns how many are alive, not the hosts they run on; staff see the names.
    assert ready["checks"]["cluster"]["alive"] == 1
    operator = client_for(UserFactory(username="operator", is_staff=True))
    assert operator.get("/readyz").json()["checks"]["cluster"]["alive"] == ["cluster@test"]


# One error shape


def test_unknown_route_is_a_problem(api):
    response = api.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_wrong_method_is_405(api, jobs):
    assert_problem(api.delete(f"{URL}{jobs['pending'].pk}/"), 405, "method_not_allowed")


def test_throttling_is_429_with_retry_after(api, settings):
    from rest_framework.throttling import UserRateThrottle

    original = UserRateThrottle.THROTTLE_RATES
    UserRateThrottle.THROTTLE_RATES = {"user": "2/min"}
    try:
        api.get("/api/v1/statuses/")
        api.get("/api/v1/statuses/")
        response = api.get("/api/v1/statuses/")
    finally:
        UserRateThrottle.THROTTLE_RATES = original
    assert_problem(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0


@pytest.mark.parametrize(
    "value", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "soon"]
)
def test_date_filters_refuse_unstorable_date_times(api, value):
    response = api.get(f"{URL}?completed_before={quote(value)}")
    assert_problem(response, 400, "validation_error")


def test_date_filters_accept_offsets_postgresql_would_refuse(api, jobs):
    # Found by schemathesis: an offset beyond ±15:59 reached PostgreSQL and failed there.
    response = api.get(f"{URL}?completed_before={quote('0802-11-15T00:53:31+20:33')}")
    assert response.status_code == 200 and response.json()["results"] == []


# Reach of the permissions: seeing every job is not acting on every job


@pytest.mark.parametrize("action", ["cancel", "requeue"])
def test_view_all_does_not_let_a_client_act_on_another_clients_job(owner, action):
    other = service_account("other-client")
    job = ExtractionJobFactory(
        requested_by=other, **({"failed": True} if action == "requeue" else {})
    )
    auditor = client_for(service_account("auditor-acts", "view_all_extractionjobs"))
    assert auditor.get(f"{URL}{job.pk}/").status_code == 200  # may see it
    refused = assert_problem(auditor.post(f"{URL}{job.pk}/{action}/", {}), 403, "permission_denied")
    assert "manage_all_extractionjobs" in refused["detail"]
    manager = client_for(
        service_account("manager", "view_all_extractionjobs", "manage_all_extractionjobs")
    )
    assert manager.post(f"{URL}{job.pk}/{action}/", {}, format="json").status_code == 200


def test_requeue_may_set_the_new_attempts_priority(api, jobs):
    url = f"{URL}{jobs['failed'].pk}/requeue/"
    data = api.post(url, {"priority": "interactive"}, format="json").json()
    assert (data["attempt"], data["priority"]) == (2, "interactive")


def test_stats_report_the_queue_by_priority(api, jobs):
    queue = api.get("/api/v1/stats/").json()["queue_by_priority"]
    assert set(queue) == {"interactive", "normal", "bulk"}
    assert queue["normal"]["active"] >= 1 and "oldest_due_seconds" in queue["bulk"]


def drfs_own(serializer: ExtractionJobSerializer, job: ExtractionJob) -> dict:
    """The job as DRF writes the serializer's declared fields, field by field."""
    return serializers.ModelSerializer.to_representation(serializer, job)


def test_the_fast_representation_is_drfs_own(jobs, rf):
    request = rf.get("/api/v1/jobs/")
    for job in ExtractionJob.objects.select_related("extractor", "requested_by"):
        serializer = ExtractionJobSerializer(job, context={"request": request})
        assert serializer.data == drfs_own(serializer, job)


def test_the_fast_representation_check_fails_on_a_field_declared_on_one_side(jobs, rf):
    class WithAField(ExtractionJobSerializer):
        shiny = serializers.CharField(source="file_id")

        class Meta(ExtractionJobSerializer.Meta):
            fields = [*ExtractionJobSerializer.Meta.fields, "shiny"]

    job = ExtractionJob.objects.select_related("extractor", "requested_by").first()
    serializer = WithAField(job, context={"request": rf.get("/api/v1/jobs/")})
    assert serializer.data != drfs_own(serializer, job)


def test_the_fast_representation_check_fails_on_a_field_written_on_one_side(jobs, rf, monkeypatch):
    written = JobRepresentation.__call__
    monkeypatch.setattr(
        JobRepresentation, "__call__", lambda self, job: {**written(self, job), "shiny": "x"}
    )
    job = ExtractionJob.objects.select_related("extractor", "requested_by").first()
    serializer = ExtractionJobSerializer(job, context={"request": rf.get("/api/v1/jobs/")})
    assert serializer.data != drfs_own(serializer, job)


def test_a_list_shares_its_moments_and_writes_them_in_utc_whatever_the_zone(jobs, rf):
    request = rf.get("/api/v1/jobs/")
    moment = timezone.now()
    ExtractionJob.objects.update(created_at=moment, updated_at=moment)
    listed = list(ExtractionJob.objects.select_related("extractor", "requested_by"))
    with timezone.override("America/Sao_Paulo"):
        serializer = ExtractionJobSerializer(listed, many=True, context={"request": request})
        generic = [drfs_own(serializer.child, job) for job in listed]
        assert serializer.data == generic
    assert generic[0]["created_at"] == moment.isoformat().replace("+00:00", "Z")


def test_turnaround_percentiles_without_postgresql_match_postgresqls():
    from jobtracking.selectors import _percentiles_in_python, _turnaround_percentiles

    now = timezone.now()
    for minutes in (1, 2, 3, 5, 8, 13, 21):
        ExtractionJobFactory(
            succeeded=True,
            created_at=now - timedelta(minutes=minutes),
            completed_at=now,
        )
    ExtractionJobFactory(failed=True, created_at=now - timedelta(hours=5), completed_at=now)
    completed = ExtractionJob.objects.filter(completed_at__gte=now - timedelta(hours=1))
    in_python = _percentiles_in_python(completed.filter(status="succeeded"))
    assert in_python == pytest.approx(_turnaround_percentiles(completed))
    assert in_python["p50"] == pytest.approx(300)
    assert _percentiles_in_python(completed.none()) == dict.fromkeys(["p50", "p90", "p95", "p99"])
