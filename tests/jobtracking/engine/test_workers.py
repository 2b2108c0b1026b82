"""The worker supervisor's loop goes on whatever a check meets, a cluster that failed to start
included: the next check starts one."""

import logging
import threading

import pytest
from django.db import connection
from prometheus_client import REGISTRY

from jobtracking.engine.workers import WorkerSupervisor
from jobtracking.models import ServiceHeartbeat
from tests.e2e import conftest as e2e
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster_env(monkeypatch):
    """What `run_cluster` needs to work on this test's database."""
    env = {
        "DATABASE_URL": e2e.test_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "Q_SYNC": "0",
        "Q_WORKERS": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_the_supervisor_logs_counts_and_goes_on_when_a_start_fails(
    seeded_statuses, cluster_env, own_signals, settings, monkeypatch, caplog
):
    settings.JOBS_WORKER_STOP_GRACE_SECONDS = 2
    supervisor = WorkerSupervisor(check_every=0.1)
    real, starts = supervisor.start_cluster, []

    def start_failing_once():
        starts.append(1)
        if len(starts) == 1:
            raise OSError(12, "Cannot allocate memory")  # what a failed fork may say
        real()
        threading.Thread(target=stop_once_it_beats).start()

    def stop_once_it_beats():
        try:
            wait_until(
                lambda: ServiceHeartbeat.objects.filter(kind="cluster").exists(), 30, "a beat"
            )
        finally:
            supervisor.stop()
            connection.close()

    monkeypatch.setattr(supervisor, "start_cluster", start_failing_once)
    before = REGISTRY.get_sample_value(
        "jobtracking_loop_errors_total", {"loop": "worker_supervisor"}
    )
    never_forever = threading.Timer(60, supervisor.stop)
    never_forever.start()
    try:
        with caplog.at_level(logging.ERROR, logger="jobtracking.engine.workers"):
            supervisor.run()
    finally:
        never_forever.cancel()

    assert len(starts) == 2
    assert ServiceHeartbeat.objects.filter(kind="cluster").exists()  # the second start ran
    assert supervisor.child.poll() is not None  # and was stopped with the supervisor
    (failure,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "the check failed" in failure.getMessage() and failure.exc_info[0] is OSError
    after = REGISTRY.get_sample_value(
        "jobtracking_loop_errors_total", {"loop": "worker_supervisor"}
    )
    assert after == (before or 0) + 1
