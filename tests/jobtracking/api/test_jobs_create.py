import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from rest_framework.test import APIClient

from jobtracking.models import ExtractionJob, JobStatusChange
from jobtracking.services import creation
from jobtracking.services.tokens import token_issue
from tests.factories import ExtractionJobFactory, ExtractorFactory
from tests.jobtracking.api.conftest import assert_problem

pytestmark = pytest.mark.django_db
SAMPLES = Path(__file__).resolve().parents[3] / "extraction" / "sandbox" / "samples"
URL = "/api/v1/jobs/"


def body(**overrides):
    return {
        "extractor": "sandbox",
        "file_id": "file-1",
        "file_name": "budget.pdf",
        "source_url": "https://files.example.org/budget.pdf",
        "options": {"pages": "1-2"},
        "metadata": {"grant": "G-7"},
    } | overrides


def test_create_json_returns_201_and_the_job(api, owner, extractor):
    response = api.post(URL, body(), format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    job = ExtractionJob.objects.get(pk=data["id"])
    assert (job.requested_by, job.status_id, job.file_id) == (owner, "pending", "file-1")
    assert data["status"] == "pending" and data["extractor"] == "sandbox"
    assert data["metadata"] == {"grant": "G-7"} and data["error"] is None
    assert data["links"]["history"] == f"http://testserver/api/v1/jobs/{job.pk}/history/"
    assert response["Location"] == data["links"]["self"] == f"http://testserver{URL}{job.pk}/"
    assert JobStatusChange.objects.get(job=job).actor_type == "api"


def test_create_multipart_upload_stores_the_file(api, extractor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    response = api.post(
        URL, {"extractor": "sandbox", "file_id": "f", "file": upload, "metadata": '{"a": 1}'}
    )
    assert response.status_code == 201, response.content
    job = ExtractionJob.objects.get(pk=response.json()["id"])
    assert (job.file_name, job.content_type, job.file_size) == ("report.txt", "text/plain", 9)
    assert job.metadata == {"a": 1}
    assert job.upload.read() == b"Total: 5\n"


def test_create_idempotent_replay_returns_the_original_job(api, extractor):
    first = api.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert "Idempotent-Replayed" not in first and again["Idempotent-Replayed"] == "true"
    assert ExtractionJob.objects.count() == 1


TWINS = 8


@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_of_one_key_all_get_the_original_job(
    owner, extractor, seeded_statuses, monkeypatch
):
    token = token_issue(user=owner)
    # Each request looks for the key, then waits until every twin has looked and found
    # nothing: they all insert at once, as a burst of retries from a client would.
    looked, first_look = threading.Barrier(TWINS, timeout=20), threading.local()
    real = creation._replayed_job

    def look_in_step(*args):
        found = real(*args)
        if not getattr(first_look, "done", False):
            first_look.done = True
            looked.wait()
        return found

    monkeypatch.setattr(creation, "_replayed_job", look_in_step)

    def post(_):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        try:
            return client.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="burst")
        finally:
            connection.close()  # this thread's own connection

    with ThreadPoolExecutor(TWINS) as pool:
        answers = list(pool.map(post, range(TWINS)))
    assert sorted(a.status_code for a in answers) == [200] * (TWINS - 1) + [201], [
        a.content for a in answers
    ]
    (job,) = ExtractionJob.objects.all()
    assert {a.json()["id"] for a in answers} == {str(job.pk)}
    assert [a.get("Idempotent-Replayed") for a in answers if a.status_code == 200] == ["true"] * (
        TWINS - 1
    )
    assert all("Idempotent-Replayed" not in a for a in answers if a.status_code == 201)


def test_create_same_key_with_a_different_body_is_refused(api, extractor):
    api.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    response = api.post(URL, body(file_id="other"), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert_problem(response, 422, "idempotency_key_reused")
    assert ExtractionJob.objects.count() == 1


def test_create_idempotency_keys_are_per_client(api, other_api, extractor):
    api.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    ExtractionJob.objects.update(status_id="failed")
    response = other_api.post(URL, body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 201


def test_create_conflict_with_an_active_job_names_it(api, owner, extractor):
    # (The caller's own; another client's is not named: test_active_job_disclosure.)
    active = ExtractionJobFactory(extractor=extractor, file_id="file-1", requested_by=owner)
    response = api.post(URL, body(), format="json")
    problem = assert_problem(response, 409, "active_job_exists")
    assert problem["job_id"] == str(active.pk)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"extractor": "nope"}, "extractor"),
        ({"file_id": ""}, "file_id"),
        ({"source_url": "ftp://files.example.org/a.pdf"}, "source_url"),
        ({"source_url": "http://127.0.0.1/a.pdf"}, "source_url"),
        ({"source_url": "http://10.1.2.3/a.pdf"}, "source_url"),
        ({"source_url": "http://169.254.169.254/latest/meta-data"}, "source_url"),
        ({"source_url": "http://[::1]/a.pdf"}, "source_url"),
        ({"source_url": "https://user:pw@files.example.org/a.pdf"}, "source_url"),
        ({"options": ["pages"]}, "options"),
        ({"metadata": {"blob": "x" * 9000}}, "metadata"),
        ({"file_sha256": "XYZ"}, "file_sha256"),
        ({"extractor": "sand\x00box"}, "extractor"),
        ({"file_id": "a\x00b"}, "file_id"),
        ({"metadata": {"k": "nul\x00here"}}, "metadata.k"),
    ],
)
def test_create_bad_input_gives_field_errors_and_creates_nothing(api, extractor, overrides, field):
    response = api.post(URL, body(**overrides), format="json")
    problem = assert_problem(response, 400, "validation_error")
    assert field in problem["errors"]
    assert not ExtractionJob.objects.exists()


def test_create_without_any_source_is_refused(api, extractor):
    payload = body()
    del payload["source_url"]
    problem = assert_problem(api.post(URL, payload, format="json"), 400, "validation_error")
    assert "source_url" in problem["errors"]


def test_create_on_a_disabled_extractor_is_refused(api):
    ExtractorFactory(slug="off", disabled=True)
    problem = assert_problem(
        api.post(URL, body(extractor="off"), format="json"), 400, "validation_error"
    )
    assert "disabled" in problem["errors"]["extractor"][0]


def test_create_upload_too_large_is_413(api, extractor, settings):
    settings.JOBS_UPLOAD_MAX_BYTES = 10
    upload = SimpleUploadedFile("a.txt", b"x" * 11, content_type="text/plain")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    assert_problem(response, 413, "payload_too_large")
    assert not ExtractionJob.objects.exists()


@pytest.mark.parametrize(
    ("name", "content", "declared"),
    [
        ("budget.pdf", b"MZ\x90\x00\x03\x00\x00\x00PE", "application/pdf"),  # an .exe
        ("scan.png", b"%PDF-1.7 not a picture", "image/png"),
        ("notes.txt", b"text\x00with a NUL", "text/plain"),
        ("rows.csv", b"\xff\xfe\x00\x00binary", "text/csv"),
    ],
)
def test_create_upload_whose_content_is_not_its_type_is_415(
    api, extractor, name, content, declared
):
    upload = SimpleUploadedFile(name, content, content_type=declared)
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    assert_problem(response, 415, "content_mismatch")
    assert not ExtractionJob.objects.exists()


def test_create_upload_of_a_real_pdf_is_accepted(api, extractor):
    pdf = (SAMPLES / "financial-statement.pdf").read_bytes()
    upload = SimpleUploadedFile("f.pdf", pdf, content_type="application/pdf")
    assert (
        api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload}).status_code == 201
    )


def test_create_upload_of_a_refused_type_is_415(api, extractor):
    upload = SimpleUploadedFile("a.exe", b"MZ\x90\x00", content_type="application/x-msdownload")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    assert_problem(response, 415, "unsupported_media_type")


def test_create_empty_upload_is_refused(api, extractor):
    upload = SimpleUploadedFile("a.txt", b"", content_type="text/plain")
    problem = assert_problem(
        api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload}),
        400,
        "validation_error",
    )
    assert "file" in problem["errors"]


def test_create_with_an_unsupported_body_type_is_415(api, extractor):
    response = api.post(URL, "<job/>", content_type="application/xml")
    assert_problem(response, 415, "unsupported_media_type")


def test_create_with_malformed_json_is_400(api, extractor):
    response = api.post(URL, '{"extractor": ', content_type="application/json")
    assert_problem(response, 400, "parse_error")


def test_create_needs_the_add_permission(viewer_api, extractor):
    assert_problem(viewer_api.post(URL, body(), format="json"), 403, "permission_denied")


def test_bulk_create_reports_each_item(api, extractor, django_assert_max_num_queries):
    ExtractionJobFactory(extractor=extractor, file_id="busy")
    items = [body(file_id=f"bulk-{n}") for n in range(50)]
    items += [body(file_id="busy"), body(file_id="bad", source_url="http://10.0.0.1/x")]
    items += [body(file_id="bulk-0")]  # a duplicate within the batch
    with django_assert_max_num_queries(20):
        response = api.post(URL + "bulk/", {"jobs": items}, format="json")
    assert response.status_code == 200, response.content
    data = response.json()
    assert (data["created"], data["failed"]) == (50, 3)
    outcomes = {item["index"]: item for item in data["results"]}
    assert outcomes[0]["status"] == "created" and outcomes[0]["job"]["file_id"] == "bulk-0"
    assert outcomes[50]["error"]["code"] == "active_job_exists"
    assert outcomes[51]["error"]["code"] == "validation_error"
    assert outcomes[52]["error"]["code"] == "active_job_exists"
    assert ExtractionJob.objects.filter(file_id__startswith="bulk-").count() == 50
    assert JobStatusChange.objects.filter(job__file_id__startswith="bulk-").count() == 50


def test_bulk_create_refuses_more_than_the_limit(api, extractor):
    items = [body(file_id=f"b{n}") for n in range(501)]
    problem = assert_problem(
        api.post(URL + "bulk/", {"jobs": items}, format="json"), 400, "validation_error"
    )
    assert problem["errors"]["jobs"] == ["At most 500 jobs a request: send the rest in another."]
    assert not ExtractionJob.objects.exists()


def test_an_empty_bulk_create_is_refused_in_plain_english(api):
    problem = assert_problem(
        api.post(URL + "bulk/", {"jobs": []}, format="json"), 400, "validation_error"
    )
    assert problem["errors"]["jobs"] == ["Send at least 1 job."]


@pytest.mark.parametrize("item", [1, "job", ["a"], None, True])
def test_a_bulk_item_that_is_not_an_object_fails_alone_under_its_index(api, extractor, item):
    response = api.post(URL + "bulk/", {"jobs": [body(), item]}, format="json")
    assert response.status_code == 200, response.content
    created, refused = response.json()["results"]
    assert created["status"] == "created"
    assert refused == {
        "index": 1,
        "status": "error",
        "job": None,
        "error": {
            "errors": {"non_field_errors": ["Must be a JSON object of a job's fields."]},
            "type": "/api/problems/validation_error",
            "title": "Bad request",
            "status": 400,
            "code": "validation_error",
            "detail": "The item is invalid.",
        },
    }
    assert ExtractionJob.objects.get().file_id == body()["file_id"]


# Priority


def test_priority_is_set_at_creation_and_defaults_to_normal(api, extractor):
    urgent = api.post(URL, body(priority="interactive"), format="json")
    assert urgent.status_code == 201 and urgent.json()["priority"] == "interactive"
    assert ExtractionJob.objects.get(pk=urgent.json()["id"]).priority == 0
    plain = api.post(URL, body(file_id="file-2"), format="json").json()
    assert plain["priority"] == "normal"


def test_an_unknown_priority_is_refused_naming_the_choices(api, extractor):
    problem = assert_problem(
        api.post(URL, body(priority="urgent"), format="json"), 400, "validation_error"
    )
    assert "interactive" in str(problem["errors"]["priority"])
    assert not ExtractionJob.objects.exists()


def test_bulk_creates_default_to_bulk_priority_unless_an_item_says(api, extractor):
    items = [body(file_id="b-1"), body(file_id="b-2", priority="interactive")]
    results = api.post(URL + "bulk/", {"jobs": items}, format="json").json()["results"]
    assert [item["job"]["priority"] for item in results] == ["bulk", "interactive"]


def test_jobs_filter_by_priority(api, owner, extractor):
    ExtractionJobFactory(requested_by=owner, priority=2, file_id="slow")
    ExtractionJobFactory(requested_by=owner, priority=0, file_id="fast")
    listed = api.get(URL, {"priority": "bulk"}).json()["results"]
    assert [job["file_id"] for job in listed] == ["slow"]
    assert_problem(api.get(URL, {"priority": "soon"}), 400, "validation_error")


# Friction


def test_unknown_fields_are_refused_by_name(api, extractor):
    problem = assert_problem(
        api.post(URL, body(colour="red", prority="bulk"), format="json"), 400, "validation_error"
    )
    assert set(problem["errors"]) == {"colour", "prority"}
    assert "priority" in problem["errors"]["prority"][0]  # the message lists what is accepted
    assert not ExtractionJob.objects.exists()


def test_an_unknown_extractor_names_the_available_ones(api, extractor):
    ExtractorFactory(slug="azure-west")
    ExtractorFactory(slug="old", enabled=False)
    problem = assert_problem(
        api.post(URL, body(extractor="nope"), format="json"), 400, "validation_error"
    )
    (message,) = problem["errors"]["extractor"]
    assert "'nope'" in message and "azure-west, sandbox" in message and "old" not in message


def test_curls_octet_stream_upload_takes_its_type_from_the_name_then_the_bytes(
    api, extractor, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    csv = SimpleUploadedFile("budget.csv", b"item,amount\nrent,5\n", "application/octet-stream")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "c-1", "file": csv})
    assert response.status_code == 201, response.content
    assert response.json()["content_type"] == "text/csv"
    fake = SimpleUploadedFile("scan.pdf", b"not a pdf at all", "application/octet-stream")
    assert_problem(
        api.post(URL, {"extractor": "sandbox", "file_id": "c-2", "file": fake}),
        415,
        "content_mismatch",
    )


def test_validation_errors_are_always_lists_per_field(api, extractor):
    problem = assert_problem(
        api.post(URL, body(file_id=" "), format="json"), 400, "validation_error"
    )
    assert all(isinstance(messages, list) for messages in problem["errors"].values())


def stored_uploads(root: Path) -> list[Path]:
    return [path for path in (root / "uploads").rglob("*") if path.is_file()]


def test_refused_uploads_leave_no_file_behind(api, extractor, settings, tmp_path):
    """A 409 must not leave its upload on disk: nothing would ever delete it."""
    settings.MEDIA_ROOT = tmp_path
    codes = [
        api.post(
            URL,
            {
                "extractor": "sandbox",
                "file_id": "same",
                "file": SimpleUploadedFile("a.txt", b"Total: 5\n", content_type="text/plain"),
            },
        ).status_code
        for _ in range(3)
    ]
    assert codes == [201, 409, 409]
    (kept,) = stored_uploads(tmp_path)
    assert ExtractionJob.objects.get().upload.path == str(kept)


def test_an_idempotent_twin_that_lost_the_race_leaves_no_file(
    api, extractor, settings, tmp_path, monkeypatch
):
    settings.MEDIA_ROOT = tmp_path

    def send():
        upload = SimpleUploadedFile("a.txt", b"Total: 5\n", content_type="text/plain")
        data = {"extractor": "sandbox", "file_id": "f", "file": upload}
        return api.post(URL, data, HTTP_IDEMPOTENCY_KEY="k-1")

    first = send()
    ExtractionJob.objects.update(status_id="cancelled")  # its file is free again
    # The twin looks for the key before the first request committed, then inserts.
    real, calls = creation._replayed_job, []

    def not_committed_yet(*args):
        calls.append(args)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(creation, "_replayed_job", not_committed_yet)
    again = send()
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert len(stored_uploads(tmp_path)) == 1


def test_an_upload_whose_name_is_too_long_for_a_file_system_is_stored(
    api, extractor, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path
    name = "é" * 148 + ".txt"  # 300 bytes in UTF-8, 152 characters
    assert len(name.encode()) == 300
    upload = SimpleUploadedFile(name, b"Total: 5\n", content_type="text/plain")
    response = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    assert response.status_code == 201, response.content
    job = ExtractionJob.objects.get()
    assert job.file_name == response.json()["file_name"] == name
    stored = Path(job.upload.name)
    assert stored.parts[0] == "uploads" and stored.suffix == ".txt"
    assert len(stored.name) == len("0123456789abcdef0123456789abcdef.txt")
    assert job.upload.read() == b"Total: 5\n"


@pytest.mark.parametrize(("extra", "accepted"), [(0, True), (1, False)])
def test_single_and_bulk_creates_measure_metadata_alike_in_utf8_bytes(
    api, extractor, settings, extra, accepted
):
    # Escaped as JSON ("\u00e9"), this metadata would be three times its UTF-8 size.
    cap = settings.JOBS_METADATA_MAX_BYTES
    wrapping = len('{"t":""}')
    metadata = {"t": "é" * ((cap - wrapping) // 2) + "x" * ((cap - wrapping) % 2 + extra)}
    single = api.post(URL, body(file_id="one", metadata=metadata), format="json")
    bulk = api.post(
        URL + "bulk/", {"jobs": [body(file_id="two", metadata=metadata)]}, format="json"
    )
    assert single.status_code == (201 if accepted else 400), single.content
    assert bulk.json()["created"] == (1 if accepted else 0)
    if not accepted:
        assert "metadata" in single.json()["errors"]


def test_create_reuses_results_unless_the_client_opts_out(api, extractor):
    default = api.post(URL, body(file_id="a"), format="json")
    opted_out = api.post(URL, body(file_id="b", reuse_result=False), format="json")

    assert default.status_code == opted_out.status_code == 201, opted_out.content
    assert (default.json()["reuse_result"], default.json()["reused_from"]) == (True, None)
    assert opted_out.json()["reuse_result"] is False
    assert not ExtractionJob.objects.get(pk=opted_out.json()["id"]).reuse_result


def test_create_multipart_without_the_opt_out_keeps_reuse_on(api, extractor, settings, tmp_path):
    """A form leaves a false checkbox out, and DRF reads a missing boolean there as false: an
    upload that does not name it must keep the default."""
    settings.MEDIA_ROOT = tmp_path
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    kept = api.post(URL, {"extractor": "sandbox", "file_id": "f", "file": upload})
    upload = SimpleUploadedFile("report.txt", b"Total: 5\n", content_type="text/plain")
    out = api.post(
        URL, {"extractor": "sandbox", "file_id": "g", "file": upload, "reuse_result": "false"}
    )

    assert kept.status_code == out.status_code == 201, out.content
    assert (kept.json()["reuse_result"], out.json()["reuse_result"]) == (True, False)
