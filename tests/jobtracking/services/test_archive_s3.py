"""The archive on an S3-compatible server: moto in server mode, a real process on a loopback
port, reached by django-storages' S3 storage (boto3) over HTTP, as production reaches S3."""

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import requests

from jobtracking.models import ArchivedJob
from jobtracking.selectors import archived_job_record
from jobtracking.services import SYSTEM, job_cancel
from jobtracking.services.retention import jobs_purge
from tests.factories import ExtractionResultFactory, api_job
from tests.processes import free_port, stop, wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.e2e]
BUCKET = "grant-records"


def moto_answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/moto-api/", timeout=1).ok
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: moto_answers(url), 30, "the moto S3 server")
        yield url
    finally:
        stop(process)


@pytest.fixture
def s3_archive(s3_server, archive, settings, monkeypatch):
    # moto takes any credentials; boto3 reads these from the environment, as in production.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "moto-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "moto-test")
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": s3_server,
                "region_name": "us-east-1",
                "location": "tracker",
                "file_overwrite": False,
            },
        },
    }
    return s3


def test_the_archive_on_s3_is_confirmed_before_the_purge_and_reads_back(s3_archive):
    job = api_job(file_id="grant-5/statement.pdf")
    job_cancel(job_id=job.pk, actor=SYSTEM, reason="grant closed")
    ExtractionResultFactory(job=job)
    assert jobs_purge(ids=[job.pk]) == 1

    entry = ArchivedJob.objects.get(pk=job.pk)
    stored = s3_archive.get_object(Bucket=BUCKET, Key=f"tracker/{entry.path}")["Body"].read()
    manifest = json.loads(
        s3_archive.get_object(Bucket=BUCKET, Key=f"tracker/{entry.manifest}")["Body"].read()
    )
    assert manifest["backend"] == "S3Storage"
    assert manifest["files"][0]["sha256"] == hashlib.sha256(stored).hexdigest()
    record = json.loads(gzip.decompress(stored))
    assert record["job"]["file_id"] == "grant-5/statement.pdf"
    assert json.loads(archived_job_record(entry)) == record
    assert [r["attempt"] for r in record["results"]] == [1]
