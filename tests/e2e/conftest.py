"""The real stack for end-to-end tests: a django-q2 cluster and dispatchers as their own processes,
the sandbox extractor over HTTP, all on the test database in PostgreSQL."""

import os
import random
import re
import signal
import time
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django_q.conf import Conf

from extraction.models import Adapter
from jobtracking import states
from jobtracking.models import ExtractionJob, JobEvent, JobStatusChange
from jobtracking.services import Actor, NewJob, job_create
from tests.factories import ExtractorFactory
from tests.processes import descendants, start_command, stop, wait_until

ENGINE_SETTINGS = {
    "JOBS_DISPATCH_LEASE_SECONDS": "3",
    "JOBS_SUBMIT_LEASE_MARGIN_SECONDS": "1",
    "JOBS_DISPATCH_IDLE_SECONDS": "0.2",
}


def test_database_url() -> str:
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


def process_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Stack:
    def __init__(self, log_dir: Path, **extra_env: str) -> None:
        self.log_dir = log_dir
        self.env = {
            "DATABASE_URL": test_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "Q_SYNC": "0",
            "Q_WORKERS": "2",
            "Q_TIMEOUT": "8",
            "Q_RETRY": "30",
            **ENGINE_SETTINGS,
            **extra_env,
        }
        self.cluster = None
        self.dispatchers = []
        self.others = []

    def start_cluster(self) -> None:
        self.cluster = start_command("run_workers", env=self.env, log=self.log_dir / "cluster.log")

    def start_dispatcher(self):
        process = start_command(
            "run_dispatcher",
            env=self.env,
            log=self.log_dir / f"dispatcher{len(self.dispatchers)}.log",
        )
        self.dispatchers.append(process)
        return process

    def kill_cluster(self) -> None:
        stop(self.cluster, signal.SIGKILL)

    def titles(self) -> dict[int, str]:
        """Process titles of this stack's cluster (django-q2 names its workers by state)."""
        return {pid: process_title(pid) for pid in descendants(self.cluster.pid)}

    def worker_running(self, job_id) -> int | None:
        """The pid of the worker whose process title says it runs a batch led by this job."""
        needle = f"from {job_id}"
        return next(
            (
                pid
                for pid, title in self.titles().items()
                if "processing" in title and needle in title
            ),
            None,
        )

    def start(self, *args: str, log: str, **env: str):
        process = start_command(*args, env={**self.env, **env}, log=self.log_dir / log)
        self.others.append(process)
        return process

    def stop_all(self) -> None:
        # No need to be gentle at teardown: the database is flushed next.
        for process in [self.cluster, *self.dispatchers, *self.others]:
            if process is not None:
                stop(process, signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text()[-3000:]}"
            for path in sorted(self.log_dir.glob("*.log"))
        )


@pytest.fixture
def stack_env() -> dict[str, str]:
    """Extra environment for the stack's processes; tests override this fixture."""
    return {}


@pytest.fixture
def stack(seeded_statuses, sandbox, tmp_path, monkeypatch, settings, stack_env):
    for name, value in ENGINE_SETTINGS.items():
        setattr(settings, name, float(value))
    # This test process enqueues into the real queue instead of running tasks inline.
    monkeypatch.setattr(Conf, "SYNC", False)
    running = Stack(tmp_path, **stack_env)
    running.start_cluster()
    running.start_dispatcher()
    yield running
    running.stop_all()


def wait_for_terminal(job_ids, timeout: float, stack: Stack) -> list[ExtractionJob]:
    def all_done() -> bool:
        return not ExtractionJob.objects.filter(pk__in=job_ids, status__in=states.ACTIVE).exists()

    try:
        wait_until(all_done, timeout, "every job to reach a terminal status")
    except TimeoutError:
        stuck = list(
            ExtractionJob.objects.filter(pk__in=job_ids, status__in=states.ACTIVE).values_list(
                "pk", "status", "due_at"
            )
        )
        raise AssertionError(f"stuck: {stuck[:5]}\n{stack.logs()}") from None
    return list(ExtractionJob.objects.filter(pk__in=job_ids))


def wait_for_status(job_id, statuses, timeout: float = 20) -> None:
    wait_until(
        lambda: ExtractionJob.objects.filter(pk=job_id, status__in=statuses).exists(),
        timeout,
        f"job {job_id} to reach {statuses}",
    )


SAMPLES = Path(__file__).resolve().parents[2] / "extraction" / "sandbox" / "samples"
NAMES = ["financial-statement.pdf", "grant-report.txt", "budget.csv"]
# django-q2 titles its workers "qcluster Process-<id> idle" or "… processing <task>".
WORKER_TITLE = re.compile(r"^qcluster Process-\w+ (idle|processing)")
IDLE_WORKER_TITLE = re.compile(r"^qcluster Process-\w+ idle")


@pytest.fixture
def extractor(sandbox):
    return ExtractorFactory(
        slug="sandbox",
        adapter=Adapter.SANDBOX,
        base_url=sandbox.url,
        poll_initial_interval=timedelta(milliseconds=200),
        poll_max_interval=timedelta(seconds=1),
        request_timeout=timedelta(seconds=3),
        max_submit_attempts=20,
        max_poll_errors=20,
    )


def new_jobs(extractor, count: int, prefix: str = "f", *, distinct=False) -> list[NewJob]:
    """Uploads of the sandbox's samples, in turn; if `distinct`, each a document of its own (a
    last line naming its file id: a PDF comment, a line of text), as the documents of many
    clients are (an extractor's circuit counts one document's failures once)."""
    names = [NAMES[n % len(NAMES)] for n in range(count)]
    return [
        NewJob(
            extractor=extractor,
            file_id=f"{prefix}-{n}",
            file_name=name,
            upload=ContentFile(
                (SAMPLES / name).read_bytes()
                + (f"\n% {prefix}-{n}\n".encode() if distinct else b""),
                name=name,
            ),
        )
        for n, name in enumerate(names)
    ]


def create_jobs(extractor, count: int, prefix: str = "f", *, distinct=False) -> list:
    return [
        job_create(new, actor=Actor("api")).pk
        for new in new_jobs(extractor, count, prefix, distinct=distinct)
    ]


def idle_workers(stack) -> list[int]:
    return [pid for pid, title in stack.titles().items() if IDLE_WORKER_TITLE.search(title)]


def kill_at_random(stack, seconds: float, seed: int) -> Counter:
    """For `seconds`, every 0.8-1.6 s, SIGKILL the dispatcher (started again at once) or one of
    the cluster's workers (its sentinel starts another); returns how many of each it killed."""
    chaos = random.Random(seed)
    killed = Counter()
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        time.sleep(chaos.uniform(0.8, 1.6))
        if chaos.random() < 0.5:
            os.killpg(stack.dispatchers[-1].pid, signal.SIGKILL)
            stack.start_dispatcher()
            killed["dispatcher"] += 1
        else:
            workers = [pid for pid, title in stack.titles().items() if WORKER_TITLE.search(title)]
            if workers:
                os.kill(chaos.choice(workers), signal.SIGKILL)
                killed["worker"] += 1
    return killed


def assert_no_duplicate_submissions(sandbox, jobs) -> None:
    stats = sandbox.stats()
    assert stats["duplicate_keys"] == []
    for job in jobs:
        assert stats["created_by_key"].get(f"{job.pk}:{job.attempt}") == (
            1 if job.external_job_id else None
        )


def assert_each_transition_published_once(job_ids) -> None:
    """Each job's audit trail is one unbroken chain of moves, and its events are exactly the
    events of those moves, in the same order: none lost, none doubled."""
    changes = defaultdict(list)
    for job_id, source, target in (
        JobStatusChange.objects.filter(job_id__in=job_ids)
        .values_list("job_id", "from_status_id", "to_status_id")
        .order_by("id")
    ):
        changes[str(job_id)].append((source, target))
    published = defaultdict(list)
    for job_id, event_type in (
        JobEvent.objects.filter(job_id__in=job_ids).values_list("job_id", "type").order_by("id")
    ):
        published[str(job_id)].append(event_type)
    for job_id in map(str, job_ids):
        moves = changes[job_id]
        assert [source for source, _ in moves] == [None] + [target for _, target in moves[:-1]]
        expected = [states.event_type(source, target) for source, target in moves]
        assert published[job_id] == [t for t in expected if t is not None], job_id
