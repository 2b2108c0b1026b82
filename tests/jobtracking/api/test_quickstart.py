"""The quick start works as written, offline, right after `make run`: the README's commands are
read from the README itself (so the two cannot drift) and sent to the service, and docs/api.md's
Python client runs against a live server. The sandbox is started as `make run` starts it (local
settings: only its own origin is allowed out of loopback), and serves the samples the
`source_url` names."""

import io
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from docs.examples.client import quick_start, tail_events
from extraction.models import Adapter
from jobtracking.models import ExtractionJob
from jobtracking.services.tokens import token_issue
from tests.factories import ExtractorFactory, api_job
from tests.jobtracking.api.conftest import service_account
from tests.jobtracking.conftest import FAST
from tests.jobtracking.engine.test_tasks import run_to_end
from tests.processes import ROOT, answers, free_port, start_command, stop, wait_until

README = ROOT / "README.md"
# Where the README's commands point (`make run`'s default ports).
WEB, SANDBOX = "http://127.0.0.1:8000", "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def make_run_sandbox(tmp_path_factory):
    """The sandbox extractor under `make run`'s settings, on a free port."""
    port = free_port()
    log = tmp_path_factory.mktemp("quickstart") / "sandbox.log"
    env = {"DJANGO_SETTINGS_MODULE": "config.settings.local", "SANDBOX_PORT": str(port)}
    process = start_command("run_sandbox_extractor", "--port", str(port), env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{url}/healthz"), 20, "the sandbox extractor")
        yield url
    finally:
        stop(process)


@pytest.fixture
def demo(make_run_sandbox, settings):
    """The service as `make run` configures it: config/settings/local.py's outbound allowance
    (the sandbox's origin, nothing else) and seed_demo's `sandbox` extractor."""
    settings.OUTBOUND_ALLOWED_ORIGINS = [make_run_sandbox]
    settings.OUTBOUND_ALLOWED_HOSTS = settings.OUTBOUND_ALLOWED_NETWORKS = []
    ExtractorFactory(slug="sandbox", adapter=Adapter.SANDBOX, base_url=make_run_sandbox, **FAST)
    return make_run_sandbox


@dataclass
class Curl:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    form: dict[str, str] = field(default_factory=dict)


def readme_commands() -> list[str]:
    """The shell commands of the README's "Using the API" block, continuation lines joined."""
    text = README.read_text()
    section = text[text.index("## Using the API") :]
    start = section.index("```sh\n") + len("```sh\n")
    block = section[start : section.index("```", start)].replace("\\\n", " ")
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


JOB_ID = "JOB_ID"


def parse_curl(command: str) -> Curl:
    # A placeholder (`<id from an answer>`) is one word to a person, several to shlex.
    words = shlex.split(re.sub(r"<[^>]+>", JOB_ID, command), comments=True)
    assert words.pop(0) == "curl", command
    curl, options = Curl(url=""), iter(words)
    for word in options:
        if word == "-H":
            name, value = next(options).split(": ", 1)
            curl.headers[name] = value
        elif word == "-d":
            curl.body = next(options)
        elif word == "-F":
            name, value = next(options).split("=", 1)
            curl.form[name] = value
        else:
            assert not word.startswith("-"), f"the test does not know curl's {word}"
            assert not curl.url, f"two URLs in {command}"
            curl.url = word
    return curl


def send(client: APIClient, curl: Curl, *, key: str, sandbox: str, job_id: str = ""):
    """The request curl would send, through the test client: the README's addresses become the
    test's, `$KEY` the token, `<id …>` the job id."""
    url = curl.url.replace(WEB, "").replace(JOB_ID, job_id)
    meta = {
        "HTTP_" + name.upper().replace("-", "_"): value.replace("$KEY", key)
        for name, value in curl.headers.items()
        if name != "Content-Type"
    }
    if curl.body is not None:
        body = curl.body.replace(SANDBOX, sandbox)
        return client.generic("POST", url, body, curl.headers["Content-Type"], **meta)
    if curl.form:
        data = {  # `-F name=@path` uploads the file at path
            name: open(ROOT / value[1:], "rb") if value.startswith("@") else value  # noqa: SIM115
            for name, value in curl.form.items()
        }
        try:
            return client.post(url, data, **meta)
        finally:
            for upload in data.values():
                if hasattr(upload, "close"):
                    upload.close()
    return client.get(url, **meta)


@pytest.mark.django_db
def test_the_readme_quick_start_works_as_written(demo):
    commands = readme_commands()
    token_command = re.search(r"manage\.py (create_api_token [^)]*)\)", commands.pop(0))
    key = io.StringIO()
    call_command(*shlex.split(token_command[1]), stdout=key, stderr=io.StringIO())
    curls = [parse_curl(command) for command in commands]
    creates = [curl for curl in curls if curl.body is not None or curl.form]
    reads = [curl for curl in curls if curl not in creates]
    assert len(creates) == 2 and any(c.form for c in creates) and len(reads) == 2

    client = APIClient()
    created = []
    for curl in creates:
        response = send(client, curl, key=key.getvalue().strip(), sandbox=demo)
        assert response.status_code == 201, response.content
        created.append(response.json()["id"])
    for job_id in created:
        assert run_to_end(ExtractionJob.objects.get(pk=job_id)).status_id == "succeeded"

    texts = []
    for job_id in created:
        job, result = (
            send(client, curl, key=key.getvalue().strip(), sandbox=demo, job_id=job_id)
            for curl in reads
        )
        assert job.status_code == result.status_code == 200, result.content
        assert job.json()["status"] == "succeeded"
        texts.append(" ".join(page["text"] for page in result.json()["payload"]["pages"]))
    assert "after-school literacy" in texts[0]  # the sample the source_url names
    assert "Program supplies" in texts[1]  # the uploaded budget.csv


def run_jobs_in_the_background(count: int) -> threading.Thread:
    """Act as the dispatcher and workers would: take each of the next `count` jobs created to
    its end (the test's own thread is busy in the client)."""

    def work():
        try:
            done = set()
            deadline = time.monotonic() + 30
            while len(done) < count and time.monotonic() < deadline:
                for job in ExtractionJob.objects.exclude(pk__in=done):
                    run_to_end(job)
                    done.add(job.pk)
                time.sleep(0.05)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_the_python_quick_start_creates_waits_and_fetches(live_server, demo):
    token = token_issue(user=service_account("quick-start"))
    engine = run_jobs_in_the_background(1)
    result = quick_start(live_server.url, token, f"{demo}/samples/budget.csv")
    engine.join(timeout=30)
    assert result["page_count"] == 1
    assert "Total budget" in result["payload"]["pages"][0]["text"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_the_example_client_run_as_a_script_finds_a_stack_on_other_ports(live_server, demo):
    token = token_issue(user=service_account("quick-start"))
    engine = run_jobs_in_the_background(1)
    env = {
        **os.environ,
        "KEY": token,
        "PORT": str(urlsplit(live_server.url).port),
        "SANDBOX_PORT": str(urlsplit(demo).port),
    }
    script = ROOT / "docs" / "examples" / "client.py"
    run = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    engine.join(timeout=30)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Grant number" in run.stdout


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("seeded_statuses")
def test_the_python_tail_gets_only_the_events_published_after_it_starts(live_server, extractor):
    owner = service_account("tailer")
    token = token_issue(user=owner)
    api_job(extractor, file_id="before", user=owner)
    polling, seen = threading.Event(), []

    def stop() -> bool:  # called before each poll, so first once the position is taken
        polling.set()
        return len(seen) >= 2

    tail = threading.Thread(
        target=tail_events,
        args=(live_server.url, token, seen.append),
        kwargs={"first_wait": 0.05, "max_wait": 0.2, "stop": stop},
        daemon=True,
    )
    tail.start()
    assert polling.wait(10)
    after = [api_job(extractor, file_id=f"after-{n}", user=owner) for n in range(2)]
    tail.join(timeout=10)
    assert not tail.is_alive()
    assert [(event["type"], event["job"]) for event in seen] == [
        ("job.created", str(job.pk)) for job in after
    ]
