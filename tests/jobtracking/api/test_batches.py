"""`/api/v1/batches/`: create (with its items' outcomes, idempotent), read the aggregate, add
jobs, close, cancel, requeue; scoped and permitted as jobs are; and `POST /jobs/bulk/` with a
`batch`."""

from urllib.parse import urlsplit

import pytest

from jobtracking.models import Batch, ExtractionJob, JobEvent
from jobtracking.services import SYSTEM, job_transition
from tests.factories import BatchFactory, ExtractionJobFactory
from tests.jobtracking.api.conftest import assert_problem, client_for, service_account

pytestmark = pytest.mark.django_db
URL = "/api/v1/batches/"


def item(file_id: str, **fields) -> dict:
    return {
        "extractor": "sandbox",
        "file_id": file_id,
        "source_url": f"https://files.example.org/{file_id}.pdf",
        **fields,
    }


def create(api, **body) -> dict:
    response = api.post(URL, {"jobs": [item("a"), item("b")], **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_create_makes_the_batch_with_its_jobs_and_each_items_outcome(api, owner, extractor):
    body = {
        "client_reference": "grant-4711",
        "metadata": {"grant": 4711},
        "jobs": [item("a"), item("b"), {"extractor": "nope", "file_id": "c"}],
    }
    response = api.post(URL, body, format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    batch = data["batch"]
    assert response["Location"] == batch["links"]["self"]
    assert (data["created"], data["failed"]) == (2, 1)
    assert [r["status"] for r in data["results"]] == ["created", "created", "error"]
    assert data["results"][2]["error"]["code"] == "validation_error"
    assert data["results"][0]["job"]["batch"] == batch["id"]
    assert data["results"][0]["job"]["links"]["batch"] == batch["links"]["self"]
    assert (batch["status"], batch["total"], batch["client_reference"]) == ("open", 2, "grant-4711")
    assert batch["requested_by"] == owner.username
    assert ExtractionJob.objects.filter(batch_id=batch["id"]).count() == 2


def test_create_with_a_reference_the_client_used_is_a_409_naming_the_batch(api, extractor):
    first = create(api, client_reference="r-1")["batch"]
    response = api.post(URL, {"client_reference": "r-1", "jobs": []}, format="json")
    assert assert_problem(response, 409, "batch_reference_exists")["batch_id"] == first["id"]
    assert Batch.objects.count() == 1


def test_create_replays_an_idempotency_key(api, extractor):
    body = {"jobs": [item("a")], "client_reference": "r"}
    first = api.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    replay = api.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["batch"]["id"] == first.json()["batch"]["id"]
    assert ExtractionJob.objects.count() == 1
    other = {"jobs": [item("b")], "client_reference": "r"}
    reused = api.post(URL, other, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert_problem(reused, 422, "idempotency_key_reused")


def test_create_refuses_unknown_fields_and_too_many_jobs(api, settings, extractor):
    assert_problem(api.post(URL, {"colour": "red"}, format="json"), 400, "validation_error")
    too_many = {"jobs": [item(f"f{n}") for n in range(settings.JOBS_BULK_MAX + 1)]}
    assert_problem(api.post(URL, too_many, format="json"), 400, "validation_error")
    assert not Batch.objects.exists()


def test_get_shows_the_aggregate_with_its_failed_jobs(api, owner, django_assert_max_num_queries):
    batch = BatchFactory(requested_by=owner, closed=True)
    ExtractionJobFactory(batch=batch, requested_by=owner, succeeded=True)
    failed = ExtractionJobFactory(batch=batch, requested_by=owner, failed=True)
    # The token and permissions (4), then the batch, its aggregate, its failed jobs.
    with django_assert_max_num_queries(7):
        data = api.get(f"{URL}{batch.pk}/").json()
    assert data["status"] == "completed_with_failures"
    assert data["by_status"]["succeeded"] == data["by_status"]["failed"] == 1
    assert data["progress"] == 100.0
    (shown,) = data["failures"]["jobs"]
    assert shown["id"] == str(failed.pk) and shown["error"]["code"] == "extraction_failed"
    assert data["failures"]["by_error_code"] == {"extraction_failed": 1}
    assert data["failures"]["jobs_truncated"] is False
    jobs = api.get(data["links"]["jobs"]).json()["results"]
    assert {job["batch"] for job in jobs} == {str(batch.pk)} and len(jobs) == 2


def test_list_filters_by_status_and_reference_in_a_bounded_number_of_queries(
    api, owner, django_assert_max_num_queries
):
    running = BatchFactory(requested_by=owner, closed=True, client_reference="r-1")
    ExtractionJobFactory.create_batch(3, batch=running, requested_by=owner)
    BatchFactory.create_batch(3, requested_by=owner)
    # The token and permissions (4), then the page and every batch's aggregate in one.
    with django_assert_max_num_queries(6):
        listed = api.get(URL).json()["results"]
    assert len(listed) == 4
    (only,) = api.get(URL, {"status": "running"}).json()["results"]
    assert only["id"] == str(running.pk) and only["by_status"]["pending"] == 3
    assert "jobs" not in only["failures"]
    assert [b["id"] for b in api.get(URL, {"client_reference": "r-1"}).json()["results"]] == [
        str(running.pk)
    ]
    assert_problem(api.get(URL, {"status": "done"}), 400, "validation_error")


def test_a_client_sees_and_touches_only_its_own_batches(api, other_api, auditor_api, owner):
    batch = BatchFactory(requested_by=owner)
    for path in ("", "jobs/", "close/", "cancel/", "requeue/"):
        method = other_api.get if not path else other_api.post
        assert_problem(method(f"{URL}{batch.pk}/{path}", {}, format="json"), 404, "batch_not_found")
    assert other_api.get(URL).json()["results"] == []
    assert [b["id"] for b in auditor_api.get(URL).json()["results"]] == [str(batch.pk)]
    assert auditor_api.get(f"{URL}{batch.pk}/").status_code == 200
    # Seeing every batch is not acting on them.
    assert_problem(auditor_api.post(f"{URL}{batch.pk}/close/"), 403, "permission_denied")
    assert Batch.objects.get(pk=batch.pk).closed_at is None


def test_manage_all_acts_on_another_clients_batch_but_adds_no_jobs(owner, extractor):
    batch = BatchFactory(requested_by=owner)
    staff = client_for(
        service_account("staff", "view_all_extractionjobs", "manage_all_extractionjobs")
    )
    added = staff.post(f"{URL}{batch.pk}/jobs/", {"jobs": [item("a")]}, format="json")
    assert_problem(added, 403, "permission_denied")
    assert staff.post(f"{URL}{batch.pk}/close/").status_code == 200
    assert Batch.objects.get(pk=batch.pk).closed_at is not None


def test_a_viewer_may_read_batches_but_not_create_them(viewer_api):
    assert viewer_api.get(URL).status_code == 200
    assert_problem(viewer_api.post(URL, {"jobs": []}, format="json"), 403, "permission_denied")


def test_an_unknown_batch_is_batch_not_found(api):
    response = api.get(f"{URL}01939f4c-7a2e-7d4b-9a61-3f2b8c9d0e1f/")
    assert_problem(response, 404, "batch_not_found")


def test_jobs_are_added_to_an_open_batch_and_a_closed_one_is_a_409(api, extractor):
    batch = create(api)["batch"]
    added = api.post(batch["links"]["add_jobs"], {"jobs": [item("c")]}, format="json")
    assert added.status_code == 200 and added.json()["results"][0]["job"]["batch"] == batch["id"]
    closed = api.post(batch["links"]["close"]).json()
    assert closed["status"] == "running" and closed["total"] == 3
    refused = api.post(batch["links"]["add_jobs"], {"jobs": [item("d")]}, format="json")
    assert_problem(refused, 409, "batch_closed")
    invalid = api.post(batch["links"]["add_jobs"], {"jobs": [{"file_id": "e"}]}, format="json")
    assert_problem(invalid, 409, "batch_closed")
    assert not ExtractionJob.objects.filter(file_id="d").exists()


def test_cancel_cancels_the_active_jobs_and_reports_the_counts(api, extractor):
    batch = create(api)["batch"]
    response = api.post(batch["links"]["cancel"], {"reason": "withdrawn"}, format="json")
    data = response.json()
    assert (data["moved"], data["refused"]) == (2, 0)
    assert data["batch"]["status"] == "cancelled" and data["batch"]["by_status"]["cancelled"] == 2
    assert JobEvent.objects.filter(batch_id=batch["id"], type="batch.cancelled").count() == 1


def test_a_completed_batch_is_not_cancelled_a_409_says_nothing_is_left(api, extractor):
    batch = create(api, close=True)["batch"]
    for job in ExtractionJob.objects.filter(batch_id=batch["id"]):
        job_transition(job_id=job.pk, to_status="cancelled", actor=SYSTEM)
    assert api.get(batch["links"]["self"]).json()["status"] == "completed_with_failures"
    response = api.post(batch["links"]["cancel"], {"reason": "late"}, format="json")
    problem = assert_problem(response, 409, "batch_finished")
    assert "nothing to cancel" in problem["detail"]
    assert api.get(batch["links"]["self"]).json()["status"] == "completed_with_failures"
    assert not JobEvent.objects.filter(batch_id=batch["id"], type="batch.cancelled").exists()


def test_requeue_requeues_the_failures_with_a_priority(api, extractor):
    batch = create(api, close=True)["batch"]
    for job in ExtractionJob.objects.filter(batch_id=batch["id"]):
        job_transition(job_id=job.pk, to_status="cancelled", actor=SYSTEM)
    body = {"reason": "retry", "priority": "normal"}
    data = api.post(batch["links"]["requeue"], body, format="json").json()
    assert data["moved"] == 2 and data["batch"]["by_status"]["pending"] == 2
    assert set(ExtractionJob.objects.values_list("attempt", "priority")) == {(2, 1)}


def test_bulk_with_a_batch_creates_it_holding_the_jobs(api, extractor):
    body = {"jobs": [item("a"), item("b")], "batch": {"client_reference": "r-9", "close": True}}
    data = api.post("/api/v1/jobs/bulk/", body, format="json").json()
    assert data["created"] == 2 and data["batch"]["client_reference"] == "r-9"
    assert data["batch"]["status"] == "running" and data["batch"]["total"] == 2
    assert {r["job"]["batch"] for r in data["results"]} == {data["batch"]["id"]}
    plain = api.post("/api/v1/jobs/bulk/", {"jobs": [item("c")]}, format="json").json()
    assert plain["batch"] is None and plain["results"][0]["job"]["batch"] is None


def test_batch_events_appear_in_the_feed_of_the_batchs_client_only(api, other_api, extractor):
    batch = create(api)["batch"]
    mine = api.get("/api/v1/events/", {"type": "batch.created"}).json()["results"]
    assert [(e["batch"], e["job"]) for e in mine] == [(batch["id"], None)]
    assert mine[0]["payload"]["links"]["self"] == f"{URL}{batch['id']}/"
    assert other_api.get("/api/v1/events/", {"type": "batch.created"}).json()["results"] == []


def test_the_openapi_document_has_a_json_component_for_every_batch_body(api):
    schema = api.get("/api/schema/?format=json").json()
    bodies = {
        path: schema["paths"][f"/api/v1/batches/{path}"]["post"]["requestBody"]["content"]
        for path in ("", "{id}/jobs/", "{id}/cancel/", "{id}/requeue/")
    }
    names = {
        path: content["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        for path, content in bodies.items()
    }
    assert len(set(names.values())) == 4, names
    assert "batch" in schema["components"]["schemas"]["BulkCreateRequest"]["properties"]


def as_path(url: str) -> str:
    """An absolute link as an event writes it: the API's path (and query)."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_a_batch_events_payload_is_the_batch_as_get_shows_it(api, extractor):
    batch = create(api, client_reference="r-1")["batch"]
    (event,) = JobEvent.objects.filter(batch_id=batch["id"], type="batch.created")
    shown = api.get(batch["links"]["self"]).json()
    # Its links are paths, and it leaves out the failed jobs' list (events stay small).
    shown["links"] = {name: as_path(url) for name, url in shown["links"].items()}
    del shown["failures"]["jobs"], shown["failures"]["jobs_truncated"]
    assert event.payload == shown
