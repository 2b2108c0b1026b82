"""One job's bad answer from the extractor, in a batch with good neighbours: the bad job ends (or
is kept, made safe) on its own, and every neighbour ends as it would without it, in the same
rounds, submitted once. Each case was measured to stall or fail its whole batch before."""

import hashlib
import math
import time
from datetime import timedelta

import pytest
from django.db import DataError
from django.utils import timezone

from extraction.clients.http_async import HttpAsyncClient
from extraction.models import Adapter
from jobtracking import states
from jobtracking.engine import tasks
from jobtracking.engine.tasks import process_jobs
from jobtracking.models import ExtractionJob, ExtractionResult, ExtractorHealth, JobStatusChange
from jobtracking.services import engine
from jobtracking.services.engine import jobs_claim
from tests.factories import ExtractorFactory
from tests.jobtracking.api.conftest import client_for, service_account
from tests.jobtracking.conftest import FAST
from tests.jobtracking.engine.scripted_extractor import Answer, ScriptedExtractor

pytestmark = pytest.mark.django_db

NEIGHBOURS = ("good-1.txt", "good-2.txt")
BAD = "bad.txt"


@pytest.fixture
def scripted(httpserver) -> ScriptedExtractor:
    return ScriptedExtractor(httpserver)


@pytest.fixture
def extractor(scripted):
    return ExtractorFactory(adapter=Adapter.HTTP_ASYNC, base_url=scripted.url, **FAST)


def run_rounds(jobs, max_rounds: int = 20) -> dict[str, int]:
    """As the dispatcher would: each round claims every job that has not ended and is due
    within a second (for a claim lease) and runs them as one batch. Returns the round in which
    each job (by file name) ended."""
    ended = {}
    for round_number in range(1, max_rounds + 1):
        soon = timezone.now() + timedelta(seconds=1)
        live = list(
            ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs], due_at__lte=soon)
            .exclude(status__in=states.TERMINAL)
            .order_by("due_at")
        )
        if not live:
            break
        # Every job due within the second, together: a busy machine must not split a batch.
        time.sleep(max(0.0, (live[-1].due_at - timezone.now()).total_seconds()))
        now = timezone.now()
        due = [job.pk for job in live]
        jobs_claim(due, now=now, lease=timedelta(seconds=30))
        process_jobs([str(pk) for pk in due])
        for job in ExtractionJob.objects.filter(pk__in=due, status__in=states.TERMINAL):
            ended.setdefault(job.file_name, round_number)
    return ended


def batch(scripted, extractor) -> list[ExtractionJob]:
    return [scripted.new_job(extractor, name) for name in (*NEIGHBOURS, BAD)]


def by_name(jobs) -> dict[str, ExtractionJob]:
    return {job.file_name: job for job in ExtractionJob.objects.filter(pk__in=[j.pk for j in jobs])}


def assert_neighbours_unharmed(scripted, jobs, ended: dict[str, int]) -> None:
    """Each neighbour succeeded as it does alone (submit, one poll, the result: round 2),
    submitted once, its result stored as sent."""
    found = by_name(jobs)
    for name in NEIGHBOURS:
        job = found[name]
        assert (job.status_id, job.error_code, ended[name]) == (states.SUCCEEDED, "", 2)
        assert scripted.submissions[f"{job.pk}:1"] == 1
        result = ExtractionResult.objects.get(job=job)
        assert (result.made_safe, result.original_file.name) == ([], "")


RAW_RESULTS = {
    "nul": b'{"model": "m", "pages": [{"text": "a\\u0000b"}]}',
    "lone surrogate": b'{"model": "m", "pages": [{"text": "\\ud800"}]}',
    "NaN": b'{"model": "m", "pages": [{"text": "x", "confidence": NaN}]}',
    "1e999": b'{"model": "m", "pages": [{"text": "x", "confidence": 1e999}]}',
    "beyond 64 bits": b'{"model": "m", "pages": [{"total": 123456789012345678901234}]}',
    "nul in a key": b'{"model": "m", "pages": [{"te\\u0000xt": "x"}]}',
}


@pytest.mark.parametrize("raw", RAW_RESULTS.values(), ids=RAW_RESULTS.keys())
def test_a_result_postgresql_cannot_hold_is_stored_made_safe_with_its_bytes(
    scripted, extractor, raw
):
    scripted.script(BAD, "result", Answer(200, raw))
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, ended[BAD]) == (states.SUCCEEDED, 2)
    result = ExtractionResult.objects.get(job=bad)
    assert result.made_safe and result.made_safe[0].startswith("pages[0].")
    assert result.original_file.read() == raw
    assert result.original_sha256 == hashlib.sha256(raw).hexdigest()
    # What is served holds nothing PostgreSQL refused, and says where it was changed.
    text = result.payload["pages"][0]
    assert all(
        not isinstance(value, float) or math.isfinite(value) for value in text.values()
    ) and "\x00" not in str(result.payload)


def test_a_result_nested_too_deeply_fails_its_job_alone(scripted, extractor):
    scripted.script(BAD, "result", Answer(200, b'{"pages": ' + b"[" * 100 + b"]" * 100 + b"}"))
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.error_code, ended[BAD]) == (states.FAILED, "invalid_result", 2)
    assert not ExtractionResult.objects.filter(job=bad).exists()


@pytest.mark.parametrize("word", ["succ\\u0000eeded", "\\udc00running"])
def test_a_status_word_we_cannot_store_fails_its_job_alone(scripted, extractor, word):
    scripted.script(BAD, "poll", Answer(200, f'{{"status": "{word}"}}'.encode()))
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.error_code, ended[BAD]) == (
        states.FAILED,
        "invalid_extractor_answer",
        2,
    )
    assert "cannot store" in bad.error_message


@pytest.mark.parametrize("job_id", ["a\\u0000b", "\\ud800"])
def test_a_submission_answer_with_an_id_we_cannot_store_fails_its_job_alone(
    scripted, extractor, job_id
):
    scripted.script(BAD, "submit", Answer(202, f'{{"id": "{job_id}"}}'.encode()))
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    # Before, the batch's one UPDATE failed and lost every neighbour's submission: each was
    # submitted again at every lease, four paid extractions, then timed out.
    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.error_code, ended[BAD]) == (
        states.FAILED,
        "invalid_extractor_answer",
        1,
    )
    assert scripted.submissions[f"{bad.pk}:1"] == 1


def test_free_text_we_cannot_store_is_made_safe(scripted, extractor):
    failed = b'{"status": "failed", "error": {"code": "bad\\u0000code", "message": "no\\ud800pe"}}'
    scripted.script(BAD, "poll", Answer(200, failed))
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.error_code) == (states.FAILED, "extraction_failed")
    assert bad.error_message == "bad\ufffdcode: no\ufffdpe"


@pytest.mark.parametrize("progress", [b"1e999", b"NaN", b"-Infinity"])
def test_a_progress_that_is_no_finite_number_is_ignored(scripted, extractor, progress):
    running = Answer(200, b'{"status": "running", "progress": ' + progress + b"}")
    scripted.script(BAD, "poll", running, Answer(200, {"status": "succeeded"}))
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, ended[BAD]) == (states.SUCCEEDED, 3)
    processing = JobStatusChange.objects.get(job=bad, to_status=states.PROCESSING)
    assert processing.details["progress"] is None


def test_a_5xx_body_we_cannot_store_reaches_the_circuit_made_safe(scripted, extractor):
    scripted.script(
        BAD, "poll", Answer(503, b"down\x00 \xff\xfe"), Answer(200, {"status": "succeeded"})
    )
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, ended[BAD]) == (states.SUCCEEDED, 3)
    health = ExtractorHealth.objects.get(pk=extractor.pk)
    assert "\x00" not in health.last_error and "503" in health.last_error


def test_an_unexpected_exception_in_one_call_fails_that_job_alone(scripted, extractor, monkeypatch):
    poll = HttpAsyncClient.poll

    def poll_or_raise(self, poll_url):
        if poll_url.endswith(BAD):
            raise KeyError("a bug in reading this answer")
        return poll(self, poll_url)

    monkeypatch.setattr(HttpAsyncClient, "poll", poll_or_raise)
    jobs = batch(scripted, extractor)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.error_code, ended[BAD]) == (
        states.FAILED,
        "invalid_extractor_answer",
        2,
    )


def test_a_failing_shared_write_records_each_job_alone(scripted, extractor, monkeypatch):
    """Whatever a check before it missed: the batch's write fails once, each job is then
    recorded alone, and the job whose own outcome cannot be written fails with its code."""
    record = engine._record
    jobs = batch(scripted, extractor)
    bad_id = jobs[-1].pk
    batches = []

    def record_or_fail(moves, results):
        batches.append(len(moves))
        if bad_id in results:
            raise DataError("unsupported Unicode escape sequence")
        return record(moves, results)

    monkeypatch.setattr(engine, "_record", record_or_fail)

    ended = run_rounds(jobs)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.error_code, ended[BAD]) == (states.FAILED, "invalid_result", 2)
    # Round 1 in one write; round 2 failed once, then each job alone and the bad one's failure.
    assert batches == [3, 3, 1, 1, 1, 1]


def test_a_retry_after_beyond_the_deadline_is_capped_by_it(scripted, extractor):
    extractor.max_duration = timedelta(seconds=30)
    extractor.save()
    scripted.script(BAD, "submit", Answer(202, {"id": f"x-{BAD}"}, {"Retry-After": "1e9"}))
    jobs = batch(scripted, extractor)

    run_rounds(jobs, max_rounds=1)

    bad = by_name(jobs)[BAD]
    assert bad.status_id == states.SUBMITTED
    # Before: its first poll 24 h out, past the deadline, left to the reaper. Now due when the
    # deadline passes (give or take the moment the move was written), when it times out.
    assert bad.due_at - bad.deadline_at < timedelta(seconds=1)


def test_the_api_serves_a_made_safe_result_saying_how(scripted, extractor):
    owner = service_account("owner")
    scripted.script(BAD, "result", Answer(200, RAW_RESULTS["nul"]))
    job = scripted.new_job(extractor, BAD, user=owner)

    run_rounds([job])

    answer = client_for(owner).get(f"/api/v1/jobs/{job.pk}/result/")
    assert answer.status_code == 200
    body = answer.json()
    assert body["payload"]["pages"] == [{"text": "a\ufffdb"}]
    assert body["made_safe"] == ["pages[0].text: unstorable characters replaced by U+FFFD"]
    assert body["original_sha256"] == hashlib.sha256(RAW_RESULTS["nul"]).hexdigest()


def test_a_failing_start_starts_each_job_alone(scripted, extractor, monkeypatch):
    """An unexpected error while starting the batch holds back only the job that causes it."""
    start = tasks.jobs_start
    jobs = batch(scripted, extractor)
    bad_id = str(jobs[-1].pk)

    def start_or_fail(*, job_ids):
        if bad_id in map(str, job_ids):
            raise ValueError("a bug that this job's data sets off")
        return start(job_ids=job_ids)

    monkeypatch.setattr(tasks, "jobs_start", start_or_fail)

    ended = run_rounds(jobs, max_rounds=2)

    assert_neighbours_unharmed(scripted, jobs, ended)
    bad = by_name(jobs)[BAD]
    assert (bad.status_id, bad.claimed_at is not None) == (states.PENDING, True)
