"""Purged jobs in the jobs admin: the search says when and where they were archived, and only
staff with download_archived_job, who may see the job, download its record."""

import json

import pytest

from jobtracking.services import SYSTEM, job_cancel
from jobtracking.services.retention import jobs_purge
from tests.factories import api_job
from tests.jobtracking.admin.conftest import JOBS, OPERATOR, staff

pytestmark = pytest.mark.django_db


@pytest.fixture
def purged(archive, client_user):
    job = api_job(file_id="grant-3/audit.pdf", user=client_user)
    job_cancel(job_id=job.pk, actor=SYSTEM, reason="grant closed")
    assert jobs_purge(ids=[job.pk]) == 1
    return job


def download_url(job) -> str:
    return f"{JOBS}archived/{job.pk}/"


def test_search_for_a_purged_file_says_when_and_where_it_was_archived(client, purged):
    client.force_login(staff(*OPERATOR))
    page = client.get(JOBS, {"q": "grant-3/audit.pdf"}).content.decode()
    assert f"Job {purged.pk} (file grant-3/audit.pdf, cancelled) was purged; archived" in page
    assert "to storage “archive”: jobs/" in page
    assert download_url(purged) not in page  # no permission to download


def test_permitted_staff_download_the_archived_record(client, purged):
    client.force_login(staff(*OPERATOR, "download_archived_job"))
    assert download_url(purged) in client.get(JOBS, {"q": str(purged.pk)}).content.decode()
    response = client.get(download_url(purged))
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="job-{purged.pk}.json"'
    record = json.loads(response.content)
    assert record["job"]["id"] == str(purged.pk)
    assert [c["to_status_id"] for c in record["status_changes"]] == ["pending", "cancelled"]


def test_download_needs_the_permission_and_the_job_in_reach(client, purged):
    client.force_login(staff(*OPERATOR))
    assert client.get(download_url(purged)).status_code == 403
    # Another client's purged job, for staff who may not see every client's jobs.
    client.force_login(staff("view_extractionjob", "download_archived_job"))
    assert client.get(download_url(purged)).status_code == 404
    assert "was purged" not in client.get(JOBS, {"q": str(purged.pk)}).content.decode()
