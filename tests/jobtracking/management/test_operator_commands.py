"""Operators' read-only commands: `job_stats` prints what `/api/v1/stats/` answers, django-q2's
`qinfo` runs (it needs `blessed`), and `seed_demo` names each demo job's trace when tracing is
on."""

import io
import json
import os
import re
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from jobtracking.infra import tracing
from tests.factories import ExtractionJobFactory, ExtractorFactory
from tests.jobtracking.api.conftest import client_for, service_account
from tests.processes import ROOT

pytestmark = pytest.mark.django_db

# Moments of the call itself, which two calls never share.
MOMENTS = ("since", "oldest_due_at", "oldest_due_seconds")


def without_moments(value):
    if isinstance(value, dict):
        return {k: without_moments(v) for k, v in value.items() if k not in MOMENTS}
    return value


def printed(*args: str) -> str:
    out = io.StringIO()
    call_command("job_stats", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def jobs():
    sandbox, azure = ExtractorFactory(slug="sandbox"), ExtractorFactory(slug="azure")
    ExtractionJobFactory.create_batch(2, extractor=sandbox)
    ExtractionJobFactory(extractor=azure, succeeded=True)
    ExtractionJobFactory(extractor=azure, failed=True)


def test_job_stats_json_is_what_the_api_answers(jobs):
    api = client_for(service_account("auditor", "view_all_extractionjobs"))
    answered = api.get("/api/v1/stats/?window_hours=6").json()
    stats = json.loads(printed("--format", "json", "--window-hours", "6"))
    assert without_moments(stats) == without_moments(answered)
    assert stats["created_by_extractor"]["sandbox"] == {"pending": 2}
    assert stats["success_rate"] == 0.5


def test_job_stats_table_shows_each_extractors_counts_and_the_rate(jobs):
    table = printed()
    assert re.search(r"^sandbox\s+2\s+0\s+0\s+0\s+0\s+0\s+0\s+0\s+0$", table, re.MULTILINE)
    assert re.search(r"^azure\s+0\s+0\s+0\s+0\s+0\s+1\s+1\s+0\s+0$", table, re.MULTILINE)
    assert "success rate: 50.0 %" in table


def test_job_stats_refuses_a_bad_window_as_the_api_does():
    with pytest.raises(CommandError, match=r"--window-hours: An integer from 1 to 720\."):
        printed("--window-hours", "0")


def test_qinfo_runs_against_the_database():
    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "qinfo"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.test"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Clusters" in result.stdout and "Queued" in result.stdout


def seeded(settings, tmp_path) -> list[str]:
    settings.MEDIA_ROOT = str(tmp_path)
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return [line for line in out.getvalue().splitlines() if line.startswith("  ")]


def test_seed_demo_names_each_jobs_trace_when_tracing_is_on(spans, settings, tmp_path):
    lines = seeded(settings, tmp_path)
    assert len(lines) == 3
    created = {
        s.attributes["job.id"]: s for s in spans.get_finished_spans() if s.name == "jobs.create"
    }
    for line in lines:
        job_id, trace_id = re.fullmatch(r"  \S+: job (\S+), trace ([0-9a-f]{32})", line).groups()
        assert int(trace_id, 16) == created[job_id].context.trace_id
    assert tracing.enabled()


def test_seed_demo_says_nothing_of_traces_when_tracing_is_off(settings, tmp_path):
    lines = seeded(settings, tmp_path)
    assert len(lines) == 3 and not [line for line in lines if "trace" in line]
