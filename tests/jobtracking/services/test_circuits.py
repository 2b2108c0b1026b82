"""An extractor failing as a whole opens its circuit: its jobs wait without spending attempts,
one probe goes out on a backoff schedule, and the first success releases them. Staff can pause
and resume it through the same mechanism. Against the real sandbox."""

import contextlib
import hashlib
import socketserver
import threading
import time
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.utils import timezone

from jobtracking import states
from jobtracking.engine.tasks import process_jobs
from jobtracking.models import CircuitState, ExtractionJob, ExtractorHealth, JobStatusChange
from jobtracking.services import Actor, NewJob, job_create
from jobtracking.services.extractor_health import extractor_pause, extractor_resume
from tests.factories import UserFactory
from tests.jobtracking.engine.test_tasks import new_job, run_to_end

pytestmark = pytest.mark.django_db


def new_upload(extractor, content: bytes, user=None) -> ExtractionJob:
    """A job for a text document of its own (each its own origin for the circuit)."""
    name = f"doc-{hashlib.sha256(content).hexdigest()[:8]}.txt"
    new = NewJob(
        extractor=extractor,
        file_id=name,
        file_name=name,
        upload=ContentFile(content, name=name),
    )
    return job_create(new, actor=Actor("api", user))


def run_batch(jobs) -> None:
    """What the dispatcher does for jobs that are due: claim them together, one task."""
    ids = [job.pk for job in jobs]
    ExtractionJob.objects.filter(pk__in=ids).update(claimed_at=timezone.now())
    process_jobs([str(pk) for pk in ids])


def make_due(jobs) -> None:
    ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).update(due_at=timezone.now())


def calls(sandbox) -> int:
    return sum(sandbox.stats()["requests"].values())


def reload(jobs) -> list[ExtractionJob]:
    return list(ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk"))


@pytest.fixture
def failing_batch(sandbox, sandbox_extractor, settings):
    """Six documents whose submissions all fail at once: the circuit opens on that batch."""
    settings.CIRCUIT_FAILURES = 5
    jobs = [new_upload(sandbox_extractor, f"Total revenue: {n}".encode()) for n in range(6)]
    sandbox.configure(transient_rate=1.0)
    run_batch(jobs)
    return jobs


def test_failures_across_jobs_open_the_circuit_and_spend_no_attempt(
    failing_batch,
    sandbox_extractor,
):
    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert (health.state, health.failures) == (CircuitState.OPEN, 6)
    assert "503" in health.last_error or "502" in health.last_error
    for job in reload(failing_batch):
        assert (job.status_id, job.submit_attempts, job.attempt) == (states.PENDING, 0, 1)
        assert job.due_at == health.probe_at
        change = JobStatusChange.objects.filter(job=job).last()
        assert change.details["circuit"] == "open"


def test_an_open_circuit_sends_one_probe_and_holds_the_rest(
    failing_batch,
    sandbox,
    sandbox_extractor,
):
    sandbox.reset()
    make_due(failing_batch)
    ExtractorHealth.objects.filter(pk=sandbox_extractor.pk).update(probe_at=timezone.now())
    run_batch(failing_batch)
    assert calls(sandbox) == 1
    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert (health.state, health.probes) == (CircuitState.OPEN, 1)
    assert {job.submit_attempts for job in reload(failing_batch)} == {0}
    # Not yet time for the next probe: nothing goes out.
    make_due(failing_batch)
    run_batch(failing_batch)
    assert calls(sandbox) == 1
    assert {job.due_at for job in reload(failing_batch)} == {health.probe_at}


def test_a_successful_probe_closes_the_circuit_and_releases_held_jobs(
    failing_batch,
    sandbox,
    sandbox_extractor,
):
    sandbox.configure(transient_rate=0.0)
    make_due(failing_batch)
    ExtractorHealth.objects.filter(pk=sandbox_extractor.pk).update(probe_at=timezone.now())
    run_batch(failing_batch)
    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert (health.state, health.failures) == (CircuitState.CLOSED, 0)
    jobs = reload(failing_batch)
    assert sorted(job.status_id for job in jobs) == [states.PENDING] * 5 + [states.SUBMITTED]
    assert all(job.due_at <= timezone.now() for job in jobs if job.status_id == states.PENDING)
    for job in jobs:
        done = run_to_end(job)
        assert (done.status_id, done.attempt, done.submit_attempts) == (states.SUCCEEDED, 1, 1)


def test_polls_during_an_outage_spend_no_poll_errors(sandbox, sandbox_extractor, settings):
    settings.CIRCUIT_FAILURES = 3
    sandbox.configure(latency_min=30, latency_max=30)
    jobs = [new_job(sandbox_extractor, file_id=f"p{n}") for n in range(4)]
    run_batch(jobs)
    assert {job.status_id for job in reload(jobs)} == {states.SUBMITTED}
    sandbox.configure(transient_rate=1.0)
    make_due(jobs)
    run_batch(jobs)
    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert health.state == CircuitState.OPEN
    for job in reload(jobs):
        assert (job.status_id, job.poll_error_count, job.due_at) == (
            states.SUBMITTED,
            0,
            health.probe_at,
        )


def test_one_job_failing_alone_spends_its_budget_and_opens_no_circuit(
    sandbox,
    sandbox_extractor,
    settings,
):
    settings.CIRCUIT_FAILURES = 2
    sandbox_extractor.max_submit_attempts = 4
    sandbox_extractor.save()
    sandbox.configure(transient_rate=1.0)
    job = run_to_end(new_job(sandbox_extractor))
    assert (job.status_id, job.error_code, job.submit_attempts) == (
        states.FAILED,
        "extractor_unavailable",
        4,
    )
    assert ExtractorHealth.objects.get(pk=sandbox_extractor.pk).state == CircuitState.CLOSED


def test_a_job_behind_an_open_circuit_still_times_out(failing_batch, sandbox_extractor):
    late = failing_batch[0]
    ExtractionJob.objects.filter(pk=late.pk).update(
        deadline_at=timezone.now() - timedelta(seconds=1)
    )
    make_due([late])
    run_batch([late])
    late.refresh_from_db()
    assert (late.status_id, late.error_code) == (states.TIMED_OUT, "deadline_exceeded")


def test_pause_holds_every_call_and_resume_releases_the_jobs(sandbox, sandbox_extractor):
    extractor_pause(extractor=sandbox_extractor, reason="key rotation")
    jobs = [new_job(sandbox_extractor, file_id=f"k{n}") for n in range(3)]
    run_batch(jobs)
    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert (health.state, health.reason) == (CircuitState.PAUSED, "key rotation")
    assert calls(sandbox) == 0
    assert {(j.status_id, j.due_at) for j in reload(jobs)} == {(states.PENDING, health.probe_at)}
    extractor_resume(extractor=sandbox_extractor)
    assert all(job.due_at <= timezone.now() for job in reload(jobs))
    assert run_to_end(jobs[0]).status_id == states.SUCCEEDED


class TricklingSource:
    """A document server that sends one byte a second: an extractor fetching it while it answers
    the submission answers too late."""

    def __init__(self) -> None:
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self.Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            with contextlib.suppress(OSError):
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                for _ in range(100):
                    time.sleep(1)
                    self.request.sendall(b"x")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def trickling_source():
    source = TricklingSource()
    yield source
    source.close()


def url_jobs(extractor, source, user, count: int) -> list[ExtractionJob]:
    return [
        job_create(
            NewJob(
                extractor=extractor,
                file_id=f"{user.username}-{n}",
                source_url=f"{source.url}/{user.username}-{n}.txt",
                file_name=f"{n}.txt",
            ),
            actor=Actor("api", user),
        )
        for n in range(count)
    ]


def test_one_clients_trickling_sources_do_not_open_the_circuit_for_everyone(
    sandbox, sandbox_extractor, trickling_source, settings
):
    """Its five submissions time out together, each on its own job's budget; the circuit counts
    them as one origin, the client, so another client's job goes out at once."""
    settings.CIRCUIT_FAILURES = 5
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    sandbox_extractor.request_timeout = timedelta(seconds=1)
    sandbox_extractor.save()
    attacker, other = UserFactory(), UserFactory()
    slow = url_jobs(sandbox_extractor, trickling_source, attacker, 5)

    run_batch(slow)

    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert (health.state, health.failures) == (CircuitState.CLOSED, 1)
    assert "timed out" in health.last_error
    for job in reload(slow):
        assert (job.status_id, job.submit_attempts) == (states.PENDING, 1)
    honest = new_upload(sandbox_extractor, b"Total revenue: 7", user=other)
    run_batch([honest])
    honest.refresh_from_db()
    assert honest.status_id == states.SUBMITTED


def test_several_clients_failing_together_open_the_circuit(
    sandbox, sandbox_extractor, trickling_source, settings
):
    """The other side of the rule: the same timeouts from five clients are an outage."""
    settings.CIRCUIT_FAILURES = 5
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    sandbox_extractor.request_timeout = timedelta(seconds=1)
    sandbox_extractor.save()
    jobs = [
        job
        for _ in range(5)
        for job in url_jobs(sandbox_extractor, trickling_source, UserFactory(), 1)
    ]

    run_batch(jobs)

    health = ExtractorHealth.objects.get(pk=sandbox_extractor.pk)
    assert (health.state, health.failures) == (CircuitState.OPEN, 5)
