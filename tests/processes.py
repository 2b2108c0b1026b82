"""Real processes for tests: start a `manage.py` command, wait until it answers, stop it."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"Timed out after {timeout}s waiting for {what}")


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).ok
    except requests.RequestException:
        return False


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `python manage.py ARGS` to its end, its output captured."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def start_gunicorn(port: int, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    """The web server as production runs it (`config.wsgi`), on loopback `port`, in its own
    process group (so `stop` ends its workers too); `args` are further gunicorn options."""
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            *args,
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_command(*args: str, env: dict[str, str] | None = None, log: Path | None = None):
    """Start `python manage.py ARGS` in its own process group."""
    output = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def parents() -> dict[int, int]:
    """pid → parent pid for every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The command name may hold spaces; the fields after its closing parenthesis do not.
            table[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return table


def descendants(pid: int) -> list[int]:
    table = parents()
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in table.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    """Stop a process and, with SIGKILL, every process it started (collected before the kill,
    since orphans are handed to init)."""
    if process.poll() is not None:
        return
    tree = descendants(process.pid) if sig == signal.SIGKILL else []
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = descendants(process.pid)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)
    except ProcessLookupError:
        pass
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
