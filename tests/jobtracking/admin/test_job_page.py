"""The job page as staff use it: summary, timeline, results, upload, and the Requeue and Cancel
buttons with their permissions and their LogEntry."""

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.core.files.base import ContentFile
from django.db import connection
from django.utils import timezone

from jobtracking.admin.common import span
from jobtracking.models import ExtractionJob, JobStatusChange
from jobtracking.services import Actor, job_transition
from tests.factories import ExtractionJobFactory, ExtractionResultFactory, ExtractorFactory, api_job
from tests.jobtracking.admin.conftest import JOBS, OPERATOR, staff

AZURE_RESULT = (
    Path(__file__).resolve().parents[2] / "extraction/fixtures/azure_di/result_succeeded.json"
)

pytestmark = pytest.mark.django_db


def page(client, job) -> str:
    response = client.get(f"{JOBS}{job.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def operator(client):
    user = staff(*OPERATOR, "requeue_extractionjob", "cancel_extractionjob")
    client.force_login(user)
    return user


def record_error(job) -> None:
    job.error_code, job.error_message = "extraction_failed", "Page 3 is unreadable"


@pytest.fixture
def failed_job():
    job = api_job(
        ExtractorFactory(slug="sandbox"),
        "ledger",
        file_name="ledger.pdf",
        source_url="https://files.example.org/ledger.pdf",
    )
    job_transition(
        job_id=job.pk,
        to_status="submitting",
        actor=Actor.system(),
        details={"http_status": 202, "external_job_id": "ext-77"},
    )
    job_transition(
        job_id=job.pk,
        to_status="failed",
        actor=Actor.system(),
        reason="the extractor said: corrupt",
        prepare=record_error,
    )
    return ExtractionJob.objects.get(pk=job.pk)


def test_summary_comes_first_with_the_error(operator, client, failed_job):
    html = page(client, failed_job)
    summary = html[html.index('id="job-summary"') : html.index('id="timeline-module"')]
    for expected in ("Failed", "extraction_failed", "Page 3 is unreadable", "Attempt", "sandbox"):
        assert expected in summary
    # The summary and timeline sit above the field groups; engine internals are collapsed.
    assert html.index('id="job-summary"') < html.index('class="fieldset-heading">File</h2>')
    assert 'class="module aligned collapse"' in html or "<details" in html


def test_timeline_has_seconds_durations_details_and_attempts(operator, client, failed_job):
    changes = list(JobStatusChange.objects.filter(job=failed_job).order_by("changed_at"))
    html = page(client, failed_job)
    timeline = html[html.index('id="timeline"') : html.index('id="results-module"')]
    assert changes[0].changed_at.strftime("%H:%M:%S") in timeline
    assert "http_status: 202" in timeline and "external_job_id: ext-77" in timeline
    assert "the extractor said: corrupt" in timeline
    assert timeline.count("Attempt 1") == 1 and "final" in timeline
    assert span(changes[2].changed_at - changes[1].changed_at) in timeline


def test_a_requeue_without_a_reason_is_asked_for_one(operator, client, failed_job):
    form = client.post(f"{JOBS}{failed_job.pk}/requeue/", {"reason": ""}).content.decode()
    assert "This field is required" in form
    failed_job.refresh_from_db()
    assert (failed_job.status_id, failed_job.attempt) == ("failed", 1)


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        ("extraction_failed", "it will fail again unless the document changes"),
        ("source_unavailable", "(it timed out, failed to connect or answered with a server"),
        ("source_unusable", "the same URL will fail again"),
        ("extractor_unavailable", "once it is back, a requeue may succeed"),
    ],
)
def test_a_failed_jobs_page_says_whether_a_requeue_may_help(operator, client, code, advice):
    job = ExtractionJobFactory(failed=True, error_code=code)
    html = page(client, job)
    assert "Will a requeue help?" in html and advice in html


NOTHING = {"content_type": ""}  # the factory's jobs declare a type: these declare nothing
AZURE = {"extractor__azure": True, **NOTHING}
FACTS = {"file_sha256": "a" * 64, "file_size": 9, "content_type": "application/pdf"}


@pytest.mark.parametrize(
    ("trait", "fields", "said"),
    [
        ("succeeded", {**FACTS, "file_facts_origin": "extractor"}, "As the extractor reported"),
        ("succeeded", NOTHING, "Not known: the extractor did not report the document it fetched."),
        ("submitted", NOTHING, "Not known yet: they are learnt from the extractor when the job"),
        ("cancelled", NOTHING, "Not known: the job ended before the extractor reported"),
        ("succeeded", {**AZURE, **FACTS, "file_facts_origin": "service"}, "as it fetched the URL"),
        ("submitting", AZURE, "Not known yet: the service measures them as it fetches the URL"),
        ("failed", {**AZURE, "error_code": "source_unusable"}, "could not fetch the URL"),
        ("succeeded", AZURE, "Not known: the extractor fetched the URL itself and does not"),
        ("submitted", FACTS, "As the client declared them, not checked: they are learnt from"),
    ],
)
def test_a_url_jobs_page_says_where_its_type_size_and_digest_come_from(
    operator, client, trait, fields, said
):
    job = ExtractionJobFactory(
        source_url="https://files.example.org/a.pdf", **fields, **{trait: True}
    )
    assert said in page(client, job)


def test_an_uploads_page_says_the_service_measured_it(operator, client, failed_job):
    job = ExtractionJobFactory(source_url="", upload="uploads/a.pdf", **FACTS)
    assert "Measured by the service as the upload was stored." in page(client, job)


def test_a_requeued_job_shows_each_attempt_apart(operator, client, failed_job):
    client.post(f"{JOBS}{failed_job.pk}/requeue/", {"reason": "fixed"})
    timeline = page(client, failed_job).split('id="timeline"')[1]
    assert "Attempt 1" in timeline and "Attempt 2" in timeline and "so far" in timeline


def test_requeue_button_asks_for_a_reason_and_records_it(operator, client, failed_job):
    assert 'id="requeue-button"' in page(client, failed_job)
    assert 'id="cancel-button"' not in page(client, failed_job)  # terminal: nothing to cancel
    form = client.get(f"{JOBS}{failed_job.pk}/requeue/").content.decode()
    assert 'name="reason"' in form and "attempt 2" in form

    response = client.post(
        f"{JOBS}{failed_job.pk}/requeue/", {"reason": "extractor fixed", "priority": "0"}
    )
    assert response.status_code == 302
    job = ExtractionJob.objects.get(pk=failed_job.pk)
    assert (job.status_id, job.attempt, job.priority) == ("pending", 2, 0)
    change = JobStatusChange.objects.filter(job=job).latest("changed_at")
    assert (change.actor_type, change.actor) == ("admin", operator)
    assert change.reason == "extractor fixed"
    entry = LogEntry.objects.get(object_id=str(job.pk))
    assert entry.user == operator and "extractor fixed" in entry.change_message
    history = client.get(f"{JOBS}{job.pk}/history/").content.decode()
    assert "extractor fixed" in history


def test_requeueing_a_succeeded_job_needs_force(operator, client):
    job = ExtractionJobFactory(succeeded=True)
    form = client.get(f"{JOBS}{job.pk}/requeue/").content.decode()
    assert "tick Force" in form
    refused = client.post(f"{JOBS}{job.pk}/requeue/", {"reason": "again"}, follow=True)
    assert "Not requeued" in refused.content.decode()
    assert ExtractionJob.objects.get(pk=job.pk).status_id == "succeeded"
    assert not LogEntry.objects.exists()
    client.post(f"{JOBS}{job.pk}/requeue/", {"reason": "again", "force": "on"})
    assert ExtractionJob.objects.get(pk=job.pk).status_id == "pending"


def test_cancel_button_cancels_an_active_job(operator, client):
    job = api_job()
    assert 'id="cancel-button"' in page(client, job)
    client.post(f"{JOBS}{job.pk}/cancel/", {"reason": "duplicate upload"})
    job.refresh_from_db()
    assert job.status_id == "cancelled"
    assert "duplicate upload" in LogEntry.objects.get(object_id=str(job.pk)).change_message


def test_buttons_check_the_action_permissions(client, failed_job):
    viewer = staff(*OPERATOR)
    client.force_login(viewer)
    assert 'id="requeue-button"' not in page(client, failed_job)
    assert client.get(f"{JOBS}{failed_job.pk}/requeue/").status_code == 403
    assert client.post(f"{JOBS}{failed_job.pk}/requeue/", {"reason": "x"}).status_code == 403
    assert ExtractionJob.objects.get(pk=failed_job.pk).status_id == "failed"


def test_staff_without_view_all_do_not_reach_other_clients_jobs(client, failed_job):
    client.force_login(staff("view_extractionjob", "requeue_extractionjob"))
    assert client.get(f"{JOBS}{failed_job.pk}/requeue/").status_code == 404
    assert client.get(f"{JOBS}{failed_job.pk}/upload/").status_code == 404


def test_list_actions_write_log_entries(operator, client, failed_job):
    client.post(
        JOBS,
        {"action": "requeue_selected", "_selected_action": [failed_job.pk], "reason": "batch"},
    )
    entry = LogEntry.objects.get(object_id=str(failed_job.pk))
    assert "batch" in entry.change_message
    assert str(failed_job.pk) in client.get("/admin/").content.decode()  # Recent actions


def test_the_upload_is_downloadable(operator, client):
    job = api_job(
        file_id="csv-1",
        file_name="budget.csv",
        content_type="text/csv",
        upload=ContentFile(b"item,amount\nrent,100\n", name="budget.csv"),
    )
    assert "Download budget.csv" in page(client, job)
    response = client.get(f"{JOBS}{job.pk}/upload/")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"item,amount\nrent,100\n"
    assert response["Content-Disposition"].startswith("attachment")


def test_a_url_job_has_no_upload_to_download(operator, client, failed_job):
    assert "sent by URL" in page(client, failed_job)
    assert client.get(f"{JOBS}{failed_job.pk}/upload/").status_code == 404


def test_the_full_result_shows_pretty_json_and_text_per_page(operator, client):
    long_text = "Revenue grew. " * 100
    result = ExtractionResultFactory(
        payload={"pages": [{"number": 1, "text": long_text}, {"number": 2, "text": "Page two"}]}
    )
    html = page(client, result.job)
    assert f"{JOBS}{result.job.pk}/results/{result.attempt}/" in html
    full = client.get(f"{JOBS}{result.job.pk}/results/{result.attempt}/").content.decode()
    assert long_text.strip() in full and "Page 2" in full and "Page two" in full
    assert "\n  &quot;pages&quot;: [" in full  # pretty-printed
    download = client.get(f"{JOBS}{result.job.pk}/results/{result.attempt}/?download=1")
    assert json.loads(download.content)["pages"][1]["text"] == "Page two"


@pytest.mark.parametrize(
    ("azure", "pages", "shown"),
    [
        (False, ["not a page", 7, None, {"number": 2, "text": "Kept"}, {"text": 3}], ["Kept"]),
        (True, [{"lines": ["a line", 3, None, {"content": "Real line"}]}], ["Real line"]),
        (True, [{"lines": [{"content": "ok"}, [1, 2]]}, {"text": "Not Azure's"}], ["ok", ""]),
        (True, [{"spans": "0-5"}, {"spans": {"offset": 0}}], ["", ""]),
        (True, [{"spans": [7, "x", None, {"offset": 0, "length": 5}]}], ["Hello"]),
        (True, [{"spans": [{"offset": "0", "length": 5}, {"offset": 6, "length": 5}]}], ["world"]),
        (True, [{"spans": [{"offset": 1.5, "length": 2}, {"offset": 0, "length": None}]}], [""]),
        (True, [{"spans": [{"offset": -5, "length": 3}, {"offset": True, "length": 4}]}], [""]),
        (True, [{"spans": [{"offset": 0, "length": 10**30}]}], ["Hello world"]),
    ],
)
def test_the_full_result_survives_a_malformed_payload(operator, client, azure, pages, shown):
    result = ExtractionResultFactory(
        payload={"content": "Hello world", "pages": pages}, job__extractor__azure=azure
    )
    response = client.get(f"{JOBS}{result.job.pk}/results/{result.attempt}/")
    assert response.status_code == 200
    assert [page.text for page in response.context["view"].pages] == shown
    assert "&quot;pages&quot;" in response.content.decode()  # and the JSON as it came


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        "text",
        3,
        {"pages": "many"},
        {"pages": None},
        {"tables": "none", "key_values": {"a": 1}, "keyValuePairs": 7},
        {"tables": [None, 3, {"cells": None}, {"rows": "r"}, {"cells": [{"rowIndex": "0"}]}]},
        {"tables": [{"rowCount": -1, "columnCount": True, "cells": [[0, 0], "cell", None]}]},
        {"tables": [{"cells": [{"rowIndex": 0, "columnIndex": 0, "rowSpan": 10**20}]}]},
        {"tables": [{"rows": [["a", {"b": 1}], "row", None, [None, 2.5, True]]}]},
        {"key_values": [None, "k", {"key": None}, {"key": {"content": 3}, "value": [1]}]},
        {"keyValuePairs": [{"key": {"content": "k"}, "confidence": "high"}, {"key": {}}]},
        {"keyValuePairs": [{"key": "k", "confidence": 7, "boundingRegions": [None]}]},
    ],
)
def test_the_full_result_of_a_malformed_payload_shows_the_json(operator, client, payload):
    result = ExtractionResultFactory(payload=payload)
    response = client.get(f"{JOBS}{result.job.pk}/results/{result.attempt}/")
    assert response.status_code == 200
    assert 'id="result-json"' in response.content.decode()


def test_the_full_result_shows_pairs_and_tables_for_people(operator, client):
    azure = json.loads(AZURE_RESULT.read_text())["body"]["analyzeResult"]
    result = ExtractionResultFactory(payload=azure, job__extractor__azure=True)
    html = client.get(f"{JOBS}{result.job.pk}/results/{result.attempt}/").content.decode()
    pairs = html[html.index('id="key-values"') : html.index('id="document-tables"')]
    assert "<td>Total assets:</td><td>2,104,300</td><td>2</td><td>88%</td>" in pairs
    tables = html[html.index('id="document-tables"') : html.index('id="result-json-box"')]
    assert "Table 1, page 2: Balance Sheet" in tables
    assert '<th colspan="2">Amount</th>' in tables and '<th rowspan="2">Assets</th>' in tables
    assert "<tr><td>Buildings</td><td>2,000,000</td></tr>" in tables
    assert "Page 2" in html and "Total assets: 2,104,300" in html  # the texts stay


def test_the_short_id_shown_in_the_list_is_searchable(operator, client, failed_job):
    other = ExtractionJobFactory()
    short = str(failed_job.pk)[-12:]
    listing = client.get(f"{JOBS}?q={short}").content.decode()
    assert str(failed_job.pk) in listing and str(other.pk) not in listing
    assert str(failed_job.pk) in client.get(f"{JOBS}?q={short.upper()}").content.decode()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")
def test_short_id_search_is_index_backed(failed_job):
    from jobtracking.models import SHORT_ID

    # Enough rows, analysed, that the planner weighs its indexes (on a near-empty table any
    # index scan costs the same, whatever autovacuum last found).
    ExtractionJob.objects.bulk_create(
        ExtractionJobFactory.build_batch(
            5000, extractor=failed_job.extractor, requested_by=None, succeeded=True
        )
    )
    query = ExtractionJob.objects.alias(short_id=SHORT_ID).filter(short_id="abc")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ExtractionJob._meta.db_table}")
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "job_short_id_idx" in plan


def test_filters_and_columns_use_labels_and_second_precision(operator, client, failed_job):
    listing = client.get(JOBS).content.decode()
    assert "Timed out" in listing and "timed_out</a>" not in listing
    local = timezone.localtime(failed_job.created_at)
    assert local.strftime("%Y-%m-%d %H:%M:%S") in listing
    filtered = client.get(f"{JOBS}?status=failed").content.decode()
    assert str(failed_job.pk) in filtered


def test_span_reads_well():
    assert span(timedelta(seconds=0.42)) == "0.4 s"
    assert span(timedelta(seconds=75)) == "1 min 15 s"
    assert span(timedelta(hours=2, minutes=5)) == "2 h 5 min"
    assert span(timedelta(days=3, hours=4)) == "3 d 4 h"


def test_a_made_safe_result_says_how_and_gives_the_answer_as_sent(operator, client):
    sent = b'{"pages": [{"text": "a\\u0000b"}]}'
    result = ExtractionResultFactory(
        payload={"pages": [{"text": "a\ufffdb"}]},
        made_safe=["pages[0].text: unstorable characters replaced by U+FFFD"],
        original_sha256=hashlib.sha256(sent).hexdigest(),
        original_file=ContentFile(sent, name="original"),
    )
    url = f"{JOBS}{result.job.pk}/results/{result.attempt}/"
    full = client.get(url).content.decode()
    assert "pages[0].text: unstorable characters replaced by U+FFFD" in full
    assert hashlib.sha256(sent).hexdigest() in full
    original = client.get(f"{url}?download=original")
    assert b"".join(original.streaming_content) == sent
    assert original["Content-Disposition"].startswith("attachment")
