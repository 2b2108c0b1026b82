"""The engine end to end: real django-q2 cluster and dispatcher processes, the sandbox extractor
over HTTP, PostgreSQL; faults injected by the sandbox and by killing processes."""

import os
import signal
import subprocess
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobtracking.models import ExtractionJob, ExtractionResult, JobStatusChange
from tests.e2e.conftest import (
    assert_each_transition_published_once,
    assert_no_duplicate_submissions,
    create_jobs,
    idle_workers,
    kill_at_random,
    wait_for_status,
    wait_for_terminal,
)
from tests.processes import free_port, start_command, stop, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_each_sample_goes_from_pending_to_succeeded(stack, sandbox, extractor):
    sandbox.configure(latency_min=0.5, latency_max=1.0)
    jobs = wait_for_terminal(create_jobs(extractor, 3), 60, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    assert ExtractionResult.objects.filter(job__in=jobs).count() == 3
    assert_no_duplicate_submissions(sandbox, jobs)
    assert sandbox.stats()["early_polls"] == []


@pytest.mark.parametrize(
    ("faults", "status", "error_code"),
    [
        ({"transient_rate": 0.4}, "succeeded", ""),
        ({"throttle_rate": 0.4, "throttle_retry_after": 0.5}, "succeeded", ""),
        ({"slow_rate": 0.3, "slow_seconds": 4}, "succeeded", ""),
        ({"permanent_failure_rate": 1.0}, "failed", "extraction_failed"),
        ({"lost_rate": 1.0}, "failed", "external_job_lost"),
    ],
)
def test_every_sandbox_fault_mode_ends_in_the_right_terminal_state(
    stack, sandbox, extractor, faults, status, error_code
):
    sandbox.configure(latency_min=0.2, latency_max=0.5, poll_retry_after=0.3, **faults)
    jobs = wait_for_terminal(create_jobs(extractor, 4), 90, stack)
    assert {(job.status_id, job.error_code) for job in jobs} == {(status, error_code)}
    assert_no_duplicate_submissions(sandbox, jobs)
    assert sandbox.stats()["early_polls"] == []


def test_worker_killed_mid_submission_resubmits_with_the_same_key(stack, sandbox, extractor):
    sandbox.configure(slow_rate=1.0, slow_seconds=2)
    (job_id,) = create_jobs(extractor, 1)
    wait_until(lambda: stack.worker_running(job_id), 15, "a worker submitting the job")
    time.sleep(0.5)  # the sandbox has the submission; its answer is still on the way
    os.kill(stack.worker_running(job_id), signal.SIGKILL)
    sandbox.configure(slow_rate=0.0)

    (job,) = wait_for_terminal([job_id], 60, stack)
    assert job.status_id == "succeeded"
    stats = sandbox.stats()
    assert stats["created_by_key"] == {f"{job_id}:1": 1}
    assert stats["posts_by_key"][f"{job_id}:1"] >= 2
    assert JobStatusChange.objects.filter(job=job, details__resubmission=True).exists()


def test_worker_killed_mid_poll_the_job_still_finishes(stack, sandbox, extractor):
    sandbox.configure(latency_min=4, latency_max=4)
    (job_id,) = create_jobs(extractor, 1)
    wait_for_status(job_id, ["submitted", "processing"])
    sandbox.configure(slow_rate=1.0, slow_seconds=2)
    wait_until(lambda: stack.worker_running(job_id), 15, "a worker polling the job")
    os.kill(stack.worker_running(job_id), signal.SIGKILL)
    sandbox.configure(slow_rate=0.0)

    (job,) = wait_for_terminal([job_id], 60, stack)
    assert job.status_id == "succeeded"
    assert sandbox.stats()["created_by_key"] == {f"{job_id}:1": 1}


def test_whole_cluster_killed_and_restarted(stack, sandbox, extractor):
    sandbox.configure(latency_min=1, latency_max=2)
    job_ids = create_jobs(extractor, 8)
    time.sleep(1.0)
    stack.kill_cluster()
    time.sleep(1.0)
    stack.start_cluster()
    jobs = wait_for_terminal(job_ids, 90, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    assert_no_duplicate_submissions(sandbox, jobs)


def test_two_dispatchers_never_act_on_a_job_twice(stack, sandbox, extractor):
    # Every call must get its answer, so that each sandbox request is one action of ours: with the
    # whole suite loading two cores, a 3 s read timeout can expire and legitimately retry a poll.
    extractor.request_timeout = timedelta(seconds=15)
    extractor.save()
    stack.start_dispatcher()
    sandbox.configure(latency_min=0.5, latency_max=1.5, poll_retry_after=0.4)
    jobs = wait_for_terminal(create_jobs(extractor, 20), 120, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    stats = sandbox.stats()
    # Without faults, each job was posted once and never polled before Retry-After.
    assert set(stats["posts_by_key"].values()) == {1}
    assert stats["early_polls"] == []
    for job in jobs:
        assert len(stats["polls"][job.external_job_id]) == job.poll_count


def test_deadline_reached_times_out_and_cancels_at_the_extractor(stack, sandbox, extractor):
    sandbox.configure(latency_min=30, latency_max=30)
    (job_id,) = create_jobs(extractor, 1)
    # Shorten the deadline only once the extractor has the job (a slow cluster start under load
    # would otherwise time it out before submission, with nothing to cancel).
    wait_for_status(job_id, ["submitted", "processing"])
    ExtractionJob.objects.filter(pk=job_id).update(
        deadline_at=timezone.now() + timedelta(seconds=1)
    )
    (job,) = wait_for_terminal([job_id], 30, stack)
    assert (job.status_id, job.error_code) == ("timed_out", "deadline_exceeded")
    wait_until(lambda: sandbox.stats()["requests"].get("DELETE", 0) >= 1, 20, "the cancel")


def test_random_kills_and_transient_faults_leave_no_job_behind(stack, sandbox, extractor):
    sandbox.configure(latency_min=0.2, latency_max=1.0, transient_rate=0.2, poll_retry_after=0.3)
    job_ids = create_jobs(extractor, 20)
    kill_at_random(stack, seconds=8, seed=11)
    jobs = wait_for_terminal(job_ids, 120, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    assert_no_duplicate_submissions(sandbox, jobs)
    assert_each_transition_published_once(job_ids)
    assert sandbox.stats()["early_polls"] == []


@pytest.mark.skipif(not os.environ.get("TEST_PG_CTL"), reason="needs the throwaway PostgreSQL")
def test_postgresql_restart_mid_run_is_recovered_without_a_person(stack, sandbox, extractor):
    sandbox.configure(latency_min=1, latency_max=2)
    job_ids = create_jobs(extractor, 6)
    time.sleep(1.0)
    connection.close()
    data = os.environ["TEST_PG_DATA"]
    # The log file keeps the restarted server off our pipes (else run() waits for it forever).
    command = [*os.environ["TEST_PG_CTL"].split(), "-D", data, "-l", f"{data}/../server.log"]
    subprocess.run(
        [*command, "-m", "fast", "-w", "restart"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
    jobs = wait_for_terminal(job_ids, 120, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    assert_no_duplicate_submissions(sandbox, jobs)


def test_a_dispatcher_started_during_a_database_outage_waits_for_the_database(tmp_path):
    # Nothing listens on the port: the database is down when the dispatcher starts.
    url = f"postgres://postgres@127.0.0.1:{free_port()}/jobtracking"
    log = tmp_path / "dispatcher.log"
    dispatcher = start_command("run_dispatcher", env={"DATABASE_URL": url, "Q_SYNC": "0"}, log=log)
    try:
        wait_until(
            lambda: "retrying in" in log.read_text() or dispatcher.poll() is not None,
            60,
            "a retried round",
        )
        assert dispatcher.poll() is None, log.read_text()
    finally:
        stop(dispatcher, signal.SIGKILL)


def test_idle_workers_killed_stall_the_cluster_and_the_supervisor_restarts_it(
    stack, sandbox, extractor
):
    wait_until(lambda: len(idle_workers(stack)) == 2, 20, "two idle workers")
    for pid in idle_workers(stack):
        os.kill(pid, signal.SIGKILL)
    (job_id,) = create_jobs(extractor, 1)
    (job,) = wait_for_terminal([job_id], 90, stack)
    assert job.status_id == "succeeded"
    assert "restarting stalled cluster" in (stack.log_dir / "cluster.log").read_text()


def test_rate_limits_at_the_extractors_own_keep_it_from_ever_answering_429(
    stack, sandbox, extractor
):
    sandbox.configure(submit_rate_limit=8, poll_rate_limit=16)
    extractor.submit_rate, extractor.poll_rate = 8, 16
    extractor.save()
    started = time.monotonic()
    jobs = wait_for_terminal(create_jobs(extractor, 24), 90, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    stats = sandbox.stats()
    assert stats["faults"].get("rate_limited", 0) == 0
    # 24 submissions at 8/s cannot all have gone in under two seconds.
    assert time.monotonic() - started > 2
    assert_no_duplicate_submissions(sandbox, jobs)


def test_without_our_limits_the_same_load_meets_429_and_still_finishes(stack, sandbox, extractor):
    """The control for the test above: the sandbox does refuse a burst beyond its limit."""
    sandbox.configure(submit_rate_limit=8, poll_rate_limit=16)
    jobs = wait_for_terminal(create_jobs(extractor, 24), 90, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    assert sandbox.stats()["faults"].get("rate_limited", 0) > 0
    assert_no_duplicate_submissions(sandbox, jobs)


def test_worker_killed_mid_batch_loses_no_job_and_submits_none_twice(stack, sandbox, extractor):
    # Every answer comes 2 s late: the worker is killed with its batch's submissions sent.
    sandbox.configure(slow_rate=1.0, slow_seconds=2)
    job_ids = create_jobs(extractor, 10)
    wait_until(lambda: stack.worker_running(job_ids[0]), 20, "a worker on the batch")
    wait_until(lambda: len(sandbox.stats()["posts_by_key"]) == 10, 20, "the batch's submissions")
    os.kill(stack.worker_running(job_ids[0]), signal.SIGKILL)
    sandbox.configure(slow_rate=0.0)
    jobs = wait_for_terminal(job_ids, 90, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    # Resubmitted after the lease ran out, each with its key: the sandbox made one extraction.
    assert_no_duplicate_submissions(sandbox, jobs)
    assert JobStatusChange.objects.filter(
        job_id__in=job_ids, details__resubmission=True
    ).count() == len(job_ids)
