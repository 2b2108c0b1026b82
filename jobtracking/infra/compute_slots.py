"""Machine-wide compute slots: however many workers and clusters a machine runs, at most
`JOBS_COMPUTE_SLOTS` batches (by default, the cores this process may use) are in their
transactions at once; the others wait in the kernel, at no CPU cost, instead of contending.

Why the transactions: a worker descheduled while it holds row locks (the jobs it moves, their
circuits, the broker's rows) makes every other worker that needs them wait too, so on a busy
machine each extra worker slowed all of them. A batch's extractor calls hold no lock and run
outside any slot, so a slow or hanging extractor never keeps other batches from their slots.

A slot is one byte of a lock file under the system's temporary folder, taken with a POSIX record
lock (`lockf`). The kernel drops a process's locks when it ends, however it ends (SIGKILL
included), so a dead worker never keeps a slot. Every cluster of a machine shares the file; each
machine has its own, so two clusters on two machines each use their own cores."""

import contextlib
import fcntl
import functools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from jobtracking.infra.metrics import COMPUTE_SLOT_WAIT


def slot_count() -> int:
    return settings.JOBS_COMPUTE_SLOTS or len(os.sched_getaffinity(0))


def slots_path() -> Path:
    return Path(tempfile.gettempdir()) / f"jobtracking-compute-slots-{os.getuid()}"


@functools.cache
def _slots_fd(path: Path, pid: int) -> int:
    """The lock file, opened once per process (`pid` keeps a forked child from using its parent's
    descriptor: record locks belong to the process that takes them)."""
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


@contextlib.contextmanager
def compute_slot() -> Iterator[None]:
    """Hold one of the machine's compute slots for the block: a free one if any, or else wait for
    one (each process starts looking at a slot of its own, so waiters spread over the slots)."""
    fd = _slots_fd(slots_path(), os.getpid())
    count = slot_count()
    first = os.getpid() % count
    for slot in [(first + step) % count for step in range(count)]:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            break
        except OSError:
            continue
    else:
        slot = first
        waited = time.perf_counter()
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, slot)
        COMPUTE_SLOT_WAIT.inc(time.perf_counter() - waited)
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, slot)
