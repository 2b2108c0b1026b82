"""Production settings for real: `check --deploy`, gunicorn serving one job end to end through
the API, structured logs that carry the job and never the extractor's key."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
import requests

from extraction.models import Adapter
from jobtracking.services.tokens import token_issue
from tests.e2e.conftest import wait_for_terminal
from tests.factories import ExtractorFactory
from tests.jobtracking.api.conftest import service_account
from tests.processes import ROOT, answers, free_port, manage, start_gunicorn, wait_until

SECRET_VALUE = "sk-e2e-extractor-key-3f9a1c77d2"
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": "a-long-random-production-secret-for-tests-0123456789abcdefghij",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
}


def test_production_settings_pass_check_deploy():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_settings_refuse_to_start_without_a_secret_key():
    env = {**PRODUCTION_ENV, "DJANGO_SECRET_KEY": ""}
    result = manage("check", env=env)
    assert result.returncode != 0 and "DJANGO_SECRET_KEY" in result.stderr


@pytest.mark.parametrize("value", ["-1", "ten"])
def test_settings_refuse_to_start_with_a_bad_retention(value):
    # -1 would make every fresh failure purgeable at once.
    result = manage("check", env={**PRODUCTION_ENV, "JOBS_RETENTION_FAILED_DAYS": value})
    assert result.returncode != 0 and "JOBS_RETENTION_FAILED_DAYS" in result.stderr


def test_the_wsgi_application_loads_every_view_freezes_start_up_and_collects_less_often():
    probe = (
        "import gc, sys; import config.wsgi; "
        "print(gc.get_freeze_count(), 'jobtracking.api.views' in sys.modules, gc.get_threshold())"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, **PRODUCTION_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    frozen, views_loaded, thresholds = result.stdout.split(maxsplit=2)
    # Every object of the loaded app, out of the collector's full passes.
    assert int(frozen) > 50_000 and views_loaded == "True", result.stderr
    assert thresholds.strip() == "(50000, 20, 10)"


@pytest.fixture
def stack_env():
    return {
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "DEBUG",
        "EXTRACTOR_E2E_KEY": SECRET_VALUE,
        "OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
    }


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_gunicorn_serves_a_job_end_to_end_and_logs_keep_the_key_secret(stack, sandbox, httpserver):
    sandbox.configure(api_key=SECRET_VALUE, latency_min=0.5, latency_max=0.5)
    ExtractorFactory(
        slug="sandbox",
        adapter=Adapter.SANDBOX,
        base_url=sandbox.url,
        api_key_env="EXTRACTOR_E2E_KEY",
        poll_initial_interval=timedelta(milliseconds=300),
    )
    samples = ROOT / "extraction" / "sandbox" / "samples"
    httpserver.expect_request("/files/report.txt").respond_with_data(
        (samples / "grant-report.txt").read_bytes(), content_type="text/plain"
    )
    token = token_issue(user=service_account("prod-client"))
    port = free_port()
    stack.start("collectstatic", "--no-input", log="collectstatic.log", **PRODUCTION_ENV).wait(
        timeout=120
    )
    gunicorn = start_gunicorn(
        port,
        *("--workers", "2"),
        env={**stack.env, **PRODUCTION_ENV},
        log=stack.log_dir / "gunicorn.log",
    )
    stack.others.append(gunicorn)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{base}/healthz"), 30, "gunicorn")

    https = {"X-Forwarded-Proto": "https", "Authorization": f"Token {token}"}
    plain = requests.get(f"{base}/api/v1/jobs/", allow_redirects=False, timeout=10)
    assert plain.status_code == 301  # plain HTTP is redirected to HTTPS
    created = requests.post(
        f"{base}/api/v1/jobs/",
        json={
            "extractor": "sandbox",
            "file_id": "prod-1",
            "source_url": httpserver.url_for("/files/report.txt"),
        },
        headers=https,
        timeout=10,
    )
    assert created.status_code == 201, created.text
    assert "max-age=" in created.headers["Strict-Transport-Security"]
    job_id = created.json()["id"]

    (job,) = wait_for_terminal([job_id], 60, stack)
    assert job.status_id == "succeeded"
    result = requests.get(f"{base}/api/v1/jobs/{job_id}/result/", headers=https, timeout=10)
    assert "Volunteer hours" in json.dumps(result.json()["payload"])

    lines = []
    for log in stack.log_dir.glob("*.log"):
        lines += log.read_text(errors="replace").splitlines()
    assert not [line for line in lines if SECRET_VALUE in line]
    structured = [json.loads(line) for line in lines if line.startswith("{")]
    about_job = [entry for entry in structured if entry.get("job_id") == job_id]
    assert about_job, "no structured log line carries the job id"
    assert all(entry["extractor"] == "sandbox" and entry["attempt"] == 1 for entry in about_job)
    assert {entry["event"] for entry in about_job} >= {"submitting", "submitted"}
