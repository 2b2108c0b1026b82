"""What a newcomer sees from `make run`'s commands, run as real processes on a throwaway SQLite
database (the `make run` default): no django-q2 task lines unless asked, busy ports refused
before anything starts, and a last start-up line with the admin URL and login."""

import os
import re
import signal
import socket

import pytest
import requests

from tests.processes import answers, free_port, manage, start_command, stop, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def sqlite_env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("make-run")
    env = {
        "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_MEDIA_ROOT": str(folder / "media"),
        "DEMO_ADMIN_PASSWORD": "make-run-pass",
    }
    manage("migrate", "--no-input", "-v", "0", env=env)
    return env


def test_commands_print_their_own_lines_without_django_q2s(sqlite_env):
    quiet = manage("seed_demo", env=sqlite_env)
    assert quiet.returncode == 0, quiet.stderr
    output = quiet.stdout + quiet.stderr
    assert "Seeded 3 demo job(s)" in output and "login: admin / make-run-pass" in output
    assert re.search(r"/_sandbox/webhooks .*signed with whsec_[A-Za-z0-9+/=]{40,}\.", output)
    assert "Enqueued" not in output and "AXES: BEGIN" not in output

    dry = manage("cancel_jobs", "--status", "pending", "--dry-run", "--limit", "2", env=sqlite_env)
    assert "Enqueued" not in dry.stdout + dry.stderr
    assert len([line for line in dry.stdout.splitlines() if line.startswith("  ")]) == 2


def test_q_log_level_brings_the_task_lines_back(sqlite_env):
    enqueue = ("shell", "-c", "from django_q.tasks import async_task; async_task('math.floor', 1)")
    quiet = manage(*enqueue, env=sqlite_env)
    assert quiet.returncode == 0 and "Enqueued" not in quiet.stdout + quiet.stderr
    verbose = manage(*enqueue, env={**sqlite_env, "Q_LOG_LEVEL": "INFO"})
    assert "Enqueued" in verbose.stdout + verbose.stderr


def test_busy_ports_are_one_clear_error_before_anything_starts(sqlite_env):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sandbox = str(free_port())
        result = manage("run_stack", "--port", str(port), "--sandbox-port", sandbox, env=sqlite_env)
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert f"Port {port} (web) already in use" in output and "PORT=8001" in output
    assert "Running" not in output and "Traceback" not in output


def test_the_last_start_up_line_repeats_the_admin_url_and_login(sqlite_env, tmp_path):
    web, sandbox = free_port(), free_port()
    log = tmp_path / "stack.log"
    env = {**sqlite_env, "PORT": str(web), "SANDBOX_PORT": str(sandbox)}
    stack = start_command("run_stack", env=env, log=log)
    try:
        wait_until(lambda: "Running:" in log.read_text(), 60, "the stack to start")
        lines = log.read_text().splitlines()
        running = next(line for line in lines if "Running:" in line)
        assert f"http://127.0.0.1:{web}/admin/" in running
        assert "login: admin / make-run-pass" in running
        assert f"127.0.0.1:{sandbox}" in running
        # Every server's own banner came before it.
        assert "Sandbox extractor listening" in "\n".join(lines[: lines.index(running)])
    finally:
        os.killpg(stack.pid, signal.SIGINT)
        assert stack.wait(timeout=60) == 0
    assert "Stack stopped." in log.read_text()


def test_the_web_server_logs_each_request_once_plainly(sqlite_env, tmp_path):
    """`make run`'s web server: one access line a request, whatever its status; no colours, no
    second or third line for a 4xx; an admin login adds no lockout app lines."""
    assert manage("seed_demo", env=sqlite_env).returncode == 0  # the admin login below
    port, log = free_port(), tmp_path / "web.log"
    web = start_command("runserver", f"127.0.0.1:{port}", "--noreload", env=sqlite_env, log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{base}/healthz"), 30, "the web server")
        requests.get(f"{base}/api/v1/jobs/not-a-job-4xx/", timeout=5)  # 401: no token
        admin = requests.Session()
        login = f"{base}/admin/login/"
        admin.get(login, timeout=5)
        admin.post(
            login,
            {
                "username": "admin",
                "password": "make-run-pass",
                "csrfmiddlewaretoken": admin.cookies["csrftoken"],
            },
            headers={"Referer": login},
            timeout=5,
        )
    finally:
        stop(web)
    output = log.read_text()
    assert output.count("/api/v1/jobs/not-a-job-4xx/") == 1, output
    assert "\x1b[" not in output  # no terminal colours
    assert "AXES" not in output
