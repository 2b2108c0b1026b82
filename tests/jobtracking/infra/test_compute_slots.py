"""The machine's compute slots: no more holders at once than slots, whatever the number of
processes; a killed holder's slot comes back; a batch holds one for its transactions and never
while it waits on its extractor."""

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from jobtracking.engine import tasks
from jobtracking.infra.compute_slots import compute_slot, slots_path
from tests.factories import ExtractorFactory
from tests.jobtracking.conftest import FAST
from tests.jobtracking.engine.scripted_extractor import ScriptedExtractor
from tests.jobtracking.engine.test_bad_answers import run_rounds

FORK = multiprocessing.get_context("fork")
HOLD_SECONDS = 0.3


@pytest.fixture(autouse=True)
def own_slots(settings, tmp_path, monkeypatch):
    """A slot file of the test's own (the machine's is shared with whatever else runs here)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    settings.JOBS_COMPUTE_SLOTS = 1


def slot_free_elsewhere() -> bool:
    """Whether another process could take slot 0 now."""
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
        "except OSError:\n    sys.exit(1)\n"
    )
    return subprocess.run([sys.executable, "-c", probe, str(slots_path())]).returncode == 0


def hold(spans) -> None:
    with compute_slot():
        started = time.monotonic()
        time.sleep(HOLD_SECONDS)
        spans.put((started, time.monotonic()))


def test_no_more_processes_hold_a_slot_at_once_than_there_are_slots(settings):
    settings.JOBS_COMPUTE_SLOTS = 2
    spans = FORK.Queue()
    holders = [FORK.Process(target=hold, args=(spans,)) for _ in range(5)]
    for holder in holders:
        holder.start()
    for holder in holders:
        holder.join(timeout=30)
    held = [spans.get(timeout=5) for _ in holders]

    most = max(sum(start <= moment < end for start, end in held) for moment, _ in held)
    assert most == 2
    # Five holders, two at a time: three turns.
    assert max(end for _, end in held) - min(start for start, _ in held) >= 3 * HOLD_SECONDS


def keep(ready) -> None:
    with compute_slot():
        ready.set()
        time.sleep(60)


def test_a_killed_holder_gives_its_slot_back():
    ready = FORK.Event()
    holder = FORK.Process(target=keep, args=(ready,))
    holder.start()
    assert ready.wait(timeout=10)
    assert not slot_free_elsewhere()

    os.kill(holder.pid, signal.SIGKILL)
    holder.join(timeout=10)

    assert slot_free_elsewhere()


@pytest.mark.django_db
def test_a_batch_holds_a_slot_for_its_transactions_and_none_during_its_calls(
    httpserver, monkeypatch
):
    scripted = ScriptedExtractor(httpserver)
    extractor = ExtractorFactory(base_url=scripted.url, adapter="http_async", **FAST)
    job = scripted.new_job(extractor, "one.txt")
    seen = {}

    def submit(job, original=tasks._submit):
        seen["during the call"] = slot_free_elsewhere()
        return original(job)

    def record(*args, original=tasks.jobs_record, **kwargs):
        seen.setdefault("while recording", slot_free_elsewhere())
        return original(*args, **kwargs)

    monkeypatch.setattr(tasks, "_submit", submit)
    monkeypatch.setattr(tasks, "jobs_record", record)

    ended = run_rounds([job])

    assert ended == {"one.txt": 2}
    assert seen == {"during the call": True, "while recording": False}
