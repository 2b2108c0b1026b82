"""Error text clients read names no internal host: they get the code and the extractor's own
words; the audit row keeps where the call went, for staff."""

import json
from urllib.parse import urlsplit

import pytest
from django.core.files.base import ContentFile

from jobtracking.models import ActorType, JobEvent, JobStatusChange
from jobtracking.services import Actor, NewJob, job_create
from tests.jobtracking.api.conftest import client_for, service_account
from tests.jobtracking.engine.test_tasks import SAMPLES, run_to_end

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("faults", "code"),
    [
        ({"transient_rate": 1.0}, "extractor_unavailable"),  # 503s until the budget is spent
        ({"api_key": "the-right-key"}, "extractor_auth"),  # a 401, failed at once
    ],
)
def test_a_failed_job_shows_clients_no_extractor_address(sandbox, sandbox_extractor, faults, code):
    sandbox.configure(**faults)
    sandbox_extractor.max_submit_attempts = 2
    sandbox_extractor.save()
    owner = service_account("owner")
    job = job_create(
        NewJob(
            extractor=sandbox_extractor,
            file_id="budget",
            file_name="budget.csv",
            upload=ContentFile((SAMPLES / "budget.csv").read_bytes(), name="budget.csv"),
        ),
        actor=Actor(ActorType.API, owner),
    )
    job = run_to_end(job)
    assert (job.status_id, job.error_code) == ("failed", code)
    address = urlsplit(sandbox_extractor.base_url).netloc  # 127.0.0.1:<port>
    api = client_for(owner)
    shown = {
        "job": api.get(f"/api/v1/jobs/{job.pk}/").json(),
        "history": api.get(f"/api/v1/jobs/{job.pk}/history/").json(),
        "events": api.get("/api/v1/events/").json(),
        "stored events": list(JobEvent.objects.filter(job=job).values_list("payload", flat=True)),
        "extractors": api.get("/api/v1/extractors/").json(),
    }
    for name, body in shown.items():
        assert address not in json.dumps(body), name
    message = shown["job"]["error"]["message"]
    assert message and "HTTP" in message and job.error_message == message
    failed = JobStatusChange.objects.get(job=job, to_status="failed")
    assert f"{address}/v1/" in failed.details["error"]
