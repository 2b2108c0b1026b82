"""An extractor outage with real processes: jobs polling when it starts and jobs created during
it all succeed once it ends, with attempt 1; the extractor gets probes, not one call per job;
work resumes within seconds of its end."""

import time

import pytest
from django.conf import settings
from django.utils import timezone

from jobtracking.models import CircuitState, ExtractionJob, ExtractorHealth, JobStatusChange
from tests.e2e.conftest import create_jobs, wait_for_terminal
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OUTAGE_SECONDS = 12
PROBE_MAX_SECONDS = 3


@pytest.fixture
def stack_env():
    return {"CIRCUIT_PROBE_MAX_SECONDS": str(PROBE_MAX_SECONDS)}


def test_an_extractor_outage_costs_no_job_and_gets_probes_not_calls_per_job(
    stack, sandbox, extractor
):
    # The extractor's default budgets: without the circuit this outage fails every job.
    extractor.max_submit_attempts, extractor.max_poll_errors = 5, 10
    extractor.save()
    sandbox.configure(latency_min=3, latency_max=3)
    polling = create_jobs(extractor, 20, prefix="polling")
    wait_until(
        lambda: ExtractionJob.objects.filter(pk__in=polling, status="submitted").count() == 20,
        30,
        "every job to be submitted",
    )
    sandbox.outage(OUTAGE_SECONDS)
    down_at = time.monotonic()
    created_during = create_jobs(extractor, 20, prefix="during", distinct=True)
    wait_until(
        lambda: ExtractorHealth.objects.filter(pk=extractor.pk, state=CircuitState.OPEN).exists(),
        OUTAGE_SECONDS,
        "the circuit to open",
    )
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
    while_down = sandbox.stats()
    assert not while_down["down"]
    recovered_at = timezone.now()

    jobs = wait_for_terminal(polling + created_during, 90, stack)

    assert {(job.status_id, job.attempt) for job in jobs} == {("succeeded", 1)}
    assert sandbox.stats()["duplicate_keys"] == []
    # Probes, not calls per job: the calls already going out when it began, then one probe at a
    # time (1 s, 2 s, then every PROBE_MAX_SECONDS).
    in_flight = 2 * settings.JOBS_TASK_BATCH_SIZE
    probes = 2 + OUTAGE_SECONDS // PROBE_MAX_SECONDS
    calls = while_down["outage_calls"]
    assert 0 < calls <= in_flight + probes, while_down["outage_calls_by_kind"]
    # The failures that opened the circuit, and every one after, gave the attempt back.
    spent = JobStatusChange.objects.filter(job__in=jobs, reason__startswith="Transient fault")
    assert spent.count() < settings.CIRCUIT_FAILURES
    last = max(job.completed_at for job in jobs)
    resumed_in = (last - recovered_at).total_seconds()
    assert resumed_in < PROBE_MAX_SECONDS + 10
    assert ExtractorHealth.objects.get(pk=extractor.pk).state == CircuitState.CLOSED
    print(
        f"\noutage {OUTAGE_SECONDS} s: {len(jobs)} jobs succeeded (20 polling, 20 created "
        f"during it); calls while down: {calls} {while_down['outage_calls_by_kind']}; "
        f"last success {resumed_in:.1f} s after recovery"
    )
