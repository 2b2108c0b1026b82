"""The worker supervisor with real processes: a killed cluster is restarted once, not in a loop,
and no cluster outlives its supervisor, however it dies."""

import os
import signal
import time
from pathlib import Path

import pytest

from jobtracking.models import ServiceHeartbeat
from tests.e2e.conftest import Stack, create_jobs, idle_workers, wait_for_terminal
from tests.processes import descendants, stop, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GRACE = 3


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent (orphans' parent here may not reap them)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cluster_main(stack: Stack) -> int:
    """The cluster's main process: the supervisor's only child."""
    wait_until(lambda: len(descendants(stack.cluster.pid)) > 0, 20, "the cluster")
    return descendants(stack.cluster.pid)[0]


def cluster_starts(stack: Stack) -> int:
    return (stack.log_dir / "cluster.log").read_text().count("supervisor: started the cluster")


def test_supervisor_killed_takes_its_cluster_down_even_with_a_dead_worker(
    seeded_statuses, tmp_path
):
    stack = Stack(tmp_path, JOBS_WORKER_STOP_GRACE_SECONDS=str(GRACE))
    try:
        for round_ in range(5):
            stack.start_cluster()
            wait_until(lambda: len(idle_workers(stack)) == 2, 30, "two idle workers")
            # A worker killed while idle leaves the queue lock held: the graceful stop hangs.
            os.kill(idle_workers(stack)[0], signal.SIGKILL)
            wait_until(lambda: len(idle_workers(stack)) == 2, 30, "the respawned worker")
            cluster = descendants(stack.cluster.pid)
            os.kill(stack.cluster.pid, signal.SIGKILL)
            stack.cluster.wait()
            try:
                wait_until(lambda pids=cluster: not any(map(alive, pids)), GRACE + 7, "its end")
            except TimeoutError:
                raise AssertionError(f"round {round_}: {stack.logs()}") from None
    finally:
        stack.stop_all()


def test_cluster_first_heartbeat_is_written_at_start(seeded_statuses, tmp_path):
    stack = Stack(tmp_path)
    try:
        stack.start_cluster()
        wait_until(
            lambda: ServiceHeartbeat.objects.filter(kind="cluster").exists(), 20, "a heartbeat"
        )
        # And how many workers it has, for the dispatchers' broker depth.
        wait_until(
            lambda: ServiceHeartbeat.objects.filter(kind="workers").exists(), 20, "a workers beat"
        )
        assert ServiceHeartbeat.objects.get(kind="workers").details == {"workers": 2}
        stop(stack.cluster)  # a clean stop takes its workers out of the count at once
        assert not ServiceHeartbeat.objects.filter(kind="workers").exists()
    finally:
        stack.stop_all()


def test_cluster_killed_with_tasks_in_flight_is_restarted_once(stack, sandbox, extractor):
    sandbox.configure(latency_min=1, latency_max=2)
    job_ids = create_jobs(extractor, 6)
    wait_until(lambda: "processing" in " ".join(stack.titles().values()), 20, "a task in flight")
    os.killpg(cluster_main(stack), signal.SIGKILL)
    killed_at = time.monotonic()
    # Each job's claim lease (3 s here) runs out and the dispatcher hands it out again.
    jobs = wait_for_terminal(job_ids, 60, stack)
    assert {job.status_id for job in jobs} == {"succeeded"}
    # The dead cluster's rows stay locked for Q_RETRY (30 s); past the stall threshold (timeout
    # 8 s + 10 s) they must not make the supervisor restart its healthy successor.
    time.sleep(max(0.0, killed_at + 24 - time.monotonic()))
    assert cluster_starts(stack) == 2, stack.logs()
