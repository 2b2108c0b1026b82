"""One bad item harms only itself (issue #42, point 6), as a property of the real engine and the
real delivery lane on PostgreSQL.

The engine: Hypothesis makes up an extractor's answers (submit, poll, result) for one job among
good neighbours of the same extractor: any JSON value, with NUL, lone surrogates, huge and
non-finite numbers, deep nesting and wrong types, bytes that are no JSON or no UTF-8, odd headers
and status codes, answers cut short, run long, reset or never finished. The jobs go through
`process_jobs` in rounds, as the dispatcher hands them out. Every neighbour must end exactly as
it ends without the bad job (same status, error, counters, history, events, result), in as many
rounds, submitted once; the bad job must end within a bounded number of rounds with a clear
error, or succeed; no exception may leave a task; and one lane round afterwards must deliver
every event, the bad job's too.

The lane: one receiver's answer (any status, odd headers, bodies with NUL, invalid UTF-8, lone
surrogates' bytes, huge; malformed HTTP) for its deliveries among good receivers' in one round:
the neighbours are delivered in that round, once each; the bad deliveries' attempts are recorded
with the state their status implies; no exception leaves the round.

`BLAST_RADIUS_EXAMPLES` sets the examples of each test (`make bench` runs 500).
"""

import json
import os
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import hypothesis
import orjson
import pytest
from django.db import connection, transaction
from django.db.models import Min, Q
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from extraction.errors import ErrorCode
from extraction.models import Adapter
from jobtracking import states
from jobtracking.engine.delivery_lane import deliveries_send_due
from jobtracking.engine.tasks import process_jobs
from jobtracking.models import (
    DeliveryAttempt,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    ReceiverHealth,
    WebhookDelivery,
)
from jobtracking.representation import job_representation
from jobtracking.services import Actor, NewJob, job_create
from jobtracking.webhooks.sending import RETRY_SCHEDULE
from tests.factories import (
    ExtractorFactory,
    JobEventFactory,
    WebhookDeliveryFactory,
    WebhookSubscriptionFactory,
)
from tests.hostile_http import Canned, CannedServer, Request, http_answer
from tests.jobtracking.conftest import FAST
from tests.receivers import KeepAliveReceiver

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("BLAST_RADIUS_EXAMPLES", "0"))
# Every event type, listed.
EVERY_EVENT = list(states.OUTBOX_EVENT_TYPES)


def budget(default: int) -> hypothesis.settings:
    return hypothesis.settings(
        max_examples=EXAMPLES or default,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


@contextmanager
def rolled_back():
    """One example's rows, gone after it (a savepoint of the test's transaction). Constraints
    are checked at each statement, as a commit would check the deferred ones."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        yield
        transaction.set_rollback(True)


# JSON as a hostile peer writes it: a tree of values, written by `written`, where `Raw` is
# written as it is (numbers Python's writer refuses, nesting deeper than any writer recurses).


@dataclass(frozen=True)
class Raw:
    token: bytes

    def __repr__(self) -> str:
        token = self.token if len(self.token) <= 40 else self.token[:40] + b"..."
        return f"Raw({token!r}, {len(self.token)} bytes)"


def written(value, ascii_only: bool) -> bytes:
    """`value` as JSON bytes: strings as `json.dumps` escapes them (lone surrogates as \\uD800)
    or, not `ascii_only`, in UTF-8 where a lone surrogate is bytes no decoder accepts."""
    if isinstance(value, Raw):
        return value.token
    if isinstance(value, dict):
        items = (
            written(str(k), ascii_only) + b":" + written(v, ascii_only) for k, v in value.items()
        )
        return b"{" + b",".join(items) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(written(v, ascii_only) for v in value) + b"]"
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def nested(depth: int, kind: str) -> Raw:
    if kind == "list":
        return Raw(b"[" * depth + b"]" * depth)
    return Raw(b'{"a":' * depth + b"1" + b"}" * depth)


UNSTORABLE = st.sampled_from(
    [
        "\x00",
        "a\x00b",
        "\ud800",
        "x\udfffy",
        "\ud83d\ude00",  # a surrogate pair as two code points: one emoji once escaped and read
    ]
)
# Past the columns that keep an extractor's words (status 50, request id 100, job id 255, poll
# location 2,000), and huge.
LONG = st.sampled_from([51, 101, 256, 2_001, 70_000]).map("x".__mul__)
ODD_TEXT = (
    UNSTORABLE
    | LONG
    | st.sampled_from(
        ["", "\ufffd", "é", "\u2028", " ", "\r\n", "../../etc", "?a=1#frag", "%00%zz"]
    )
)
TEXT = st.text(st.characters(exclude_categories=()), max_size=12) | ODD_TEXT
ODD_NUMBERS = st.sampled_from(
    [
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"-0",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"18446744073709551616",
        b"1.0e19",
        b"NaN",
        b"Infinity",
        b"-Infinity",
    ]
).map(Raw) | st.just(b"1" * 4400).map(Raw)  # past Python's int parsing limit
DEEP = st.builds(
    nested,
    st.sampled_from([8, 64, 65, 200, 990, 1_000, 5_000, 100_000]),
    st.sampled_from(["list", "dict"]),
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**64 + 2)
    | st.integers(min_value=-(2**64), max_value=-(2**63) + 2)
    | st.floats()
    | TEXT
    | ODD_NUMBERS
    | DEEP
)


JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)


def shaped(required: dict, optional: dict) -> st.SearchStrategy:
    """An object with the protocol's keys (each any value) and maybe others."""
    known = st.fixed_dictionaries(required, optional=optional)
    return st.tuples(known, st.dictionaries(TEXT, JSON, max_size=2)).map(lambda t: {**t[1], **t[0]})


STATUS_WORDS = st.sampled_from(
    [
        "queued",
        "running",
        "succeeded",
        "failed",
        "canceled",
        "cancelled",
        "SUCCEEDED",
        "skipped",
        "",
    ]
)
SUBMIT_OBJECTS = shaped(
    {"id": st.sampled_from(["ext-1", "a/b", "a b"]) | ODD_TEXT | TEXT | JSON}, {"status": JSON}
)
POLL_OBJECTS = shaped(
    {"status": STATUS_WORDS | ODD_TEXT | TEXT | JSON},
    {
        "progress": JSON,
        "error": shaped({}, {"code": JSON, "message": JSON}) | JSON,
    },
)
PAGE = shaped({}, {"number": JSON, "text": ODD_TEXT | JSON})
RESULT_OBJECTS = shaped(
    {"pages": st.lists(PAGE, max_size=3) | JSON},
    {
        "model": ODD_TEXT | JSON,
        "content": DEEP | ODD_NUMBERS | st.just(300_000).map("z".__mul__) | JSON,
    },
)
ODD_BODIES = st.sampled_from(
    [
        b"",
        b"\x00",
        b"\xff\xfe\xfd",
        b"{",
        b'{"status": "succeeded"',
        b'{"a":1}{"b":2}',
        b"\xef\xbb\xbf" + b'{"status":"succeeded","pages":[]}',  # a BOM
        '{"status":"succeeded","pages":[]}'.encode("utf-16"),
        b'{"status":"succeeded","id":"x\xed\xa0\x80"}',  # a surrogate's UTF-8 bytes
        b"<html>busy</html>",
        b"null",
        b"[]",
    ]
) | st.just(2 << 20).map(b"w".__mul__)  # past the response limit the test sets


def bodies(objects: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    """What an answer's body may hold: mostly the protocol's object (any value in its keys),
    else any JSON value, written with escapes or without (lone surrogates then written as bytes
    no decoder takes), or bytes that are no JSON at all."""
    escaped = st.builds(written, objects, st.just(True))
    return st.one_of(
        escaped,
        escaped,
        st.builds(written, objects | JSON, st.booleans()),
        st.binary(max_size=64),
        ODD_BODIES,
    )


TOKEN = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz-XYZ0123456789_!#$%&'*+.^`|~"),
    min_size=1,
    max_size=12,
)
HEADER_VALUE = st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
ODD_HEADERS = st.sampled_from(
    [
        (b"Retry-After", value)
        for value in (
            b"-1",
            b"0",
            b"0.05",
            b"nan",
            b"inf",
            b"-inf",
            b"1e309",
            b"99999999999999999999999",
            b"Wed, 21 Oct 2015 07:28:00 GMT",
            b"Fri, 31 Dec 9999 23:59:59 GMT",
            b"Mon, 01 Jan 0000 00:00:00 GMT",
            b"soon",
            b"",
        )
    ]
    + [(b"retry-after-ms", value) for value in (b"-5", b"1e400", b"nan", b"12.5", b"x")]
    + [(b"X-Request-Id", value) for value in (b"r" * 150, b"\x00\x01", b"\xe9\xff", b"")]
    + [
        (b"Content-Type", value)
        for value in (b"text/html", b"application/json; charset=utf-16", b"")
    ]
    + [(b"Content-Encoding", value) for value in (b"gzip", b"deflate", b"br", b"zz")]
    + [(b"Connection", value) for value in (b"close", b"upgrade", b"keep-alive")]
    + [(b"Content-Length", value) for value in (b"-1", b"abc", b"99999999999999999999")]
    + [(b"Transfer-Encoding", b"gzip, chunked"), (b"Location", b"http://127.0.0.1:9/x")]
    + [(b"Operation-Location", b"\x00"), (b"Folded", b"a\r\n b"), (b"No colon", b"")]
)
HEADERS = st.lists(ODD_HEADERS | st.tuples(TOKEN.map(str.encode), HEADER_VALUE), max_size=4)
STATUS_CODES = st.integers(min_value=100, max_value=599)
STATUSES = (
    st.sampled_from([200, 200, 201, 202, 202, 204, 206, 299])
    | st.sampled_from([301, 304, 400, 401, 403, 404, 408, 409, 410, 418, 425, 429, 500, 502, 503])
    | STATUS_CODES
    | st.sampled_from([0, 99, 600, 999, 1000]).map(lambda n: str(n).encode())
)
VERSIONS = st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2", b"HTTP/0.9", b"ICY"])
FRAMINGS = st.sampled_from(
    ["length"] * 5 + ["none", "short", "long", "double", "chunked", "bad-chunks"]
)
# After its answer, a connection kept (an answer cut short then leaves the call waiting), closed or
# reset; for an extractor, closed or reset as its answer said (`Answer.canned`). What a connection
# left kept alive does to the next call on it, whichever job that is for, is
# `test_a_connection_the_bad_jobs_answer_left_harms_no_neighbour`'s.
THENS = st.sampled_from(["keep"] * 4 + ["close", "reset"])
GARBAGE = (
    st.sampled_from(
        [
            b"",
            b"garbage\r\n\r\n",
            b"\x16\x03\x01\x02\x00",  # a TLS handshake
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{}",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
            # An answer, and bytes no request asked for.
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200",
        ]
    )
    | st.just(70_000).map(lambda n: b"HTTP/1.1 200 OK\r\nX-Long: " + b"h" * n + b"\r\n\r\n")
    | st.binary(max_size=100)
)


@dataclass(frozen=True)
class Answer:
    """A hostile answer before it is bytes (Hypothesis shows this when an example fails)."""

    status: int | bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    version: bytes
    framing: str
    then: str

    def canned(self, *, announced: bool) -> Canned:
        """Its bytes; `announced`: a connection closed or reset after it says so first."""
        headers = self.headers
        if announced and self.then != "keep":
            headers = [(b"Connection", b"close"), *headers]
        raw = http_answer(
            self.status, self.body, headers, version=self.version, framing=self.framing
        )
        return Canned(raw, self.then)

    def __repr__(self) -> str:
        body = (
            self.body
            if len(self.body) <= 120
            else self.body[:120] + b"...(%d bytes)" % len(self.body)
        )
        return (
            f"Answer({self.status!r}, headers={self.headers!r}, body={body!r}, "
            f"version={self.version!r}, framing={self.framing!r}, then={self.then!r})"
        )


ACCEPTED = st.sampled_from([200, 201, 202])


def answers(
    body: st.SearchStrategy[bytes],
    *,
    statuses: st.SearchStrategy[int] = ACCEPTED,
    thens: st.SearchStrategy[str] = THENS,
) -> st.SearchStrategy[Answer | Canned]:
    """A hostile body in a plain envelope (of one of `statuses`), a hostile envelope, or no HTTP
    at all."""
    plain = st.builds(
        Answer,
        statuses,
        st.just([]),
        body,
        st.just(b"HTTP/1.1"),
        st.just("length"),
        st.just("keep"),
    )
    hostile = st.builds(Answer, STATUSES, HEADERS, body, VERSIONS, FRAMINGS, thens)
    return st.one_of(plain, plain, plain, hostile, st.builds(Canned, GARBAGE, thens))


def as_canned(answer: Answer | Canned, *, announced: bool = True) -> Canned:
    return answer.canned(announced=announced) if isinstance(answer, Answer) else answer


def json_answer(status: int, value) -> Canned:
    body = json.dumps(value).encode()
    return Canned(http_answer(status, body, [(b"Content-Type", b"application/json")]))


def plain(status: int, body: bytes, *headers: tuple[bytes, bytes]) -> Answer:
    return Answer(status, list(headers), body, b"HTTP/1.1", "length", "keep")


# The engine.

BAD_ID = "the-bad-one"
GOOD_SUBMIT = json_answer(202, {"id": BAD_ID, "status": "queued"})
SUCCEEDED = json_answer(200, {"status": "succeeded", "progress": 100})
GOOD_POLLS = st.sampled_from(
    [
        SUCCEEDED,
        json_answer(200, {"status": "running", "progress": 10}),
        json_answer(200, {"status": "failed", "error": {"code": "bad_doc", "message": "Bad."}}),
    ]
)
GOOD_RESULT = json_answer(200, {"pages": [{"number": 1, "text": "Total: 1"}], "model": "m1"})


@dataclass(frozen=True)
class BadExtractor:
    """What the extractor answers for the bad job, at each step (the same at every call)."""

    submit: Answer | Canned
    poll: Answer | Canned
    result: Answer | Canned


BAD_SUBMITS = answers(bodies(SUBMIT_OBJECTS))
BAD_POLLS = answers(bodies(POLL_OBJECTS))
BAD_RESULTS = answers(bodies(RESULT_OBJECTS))
# One step answered badly, the others well (so that each step's answers get their share), or
# every step answered badly.
BAD_EXTRACTORS = st.one_of(
    st.builds(BadExtractor, BAD_SUBMITS, GOOD_POLLS, st.just(GOOD_RESULT)),
    st.builds(BadExtractor, st.just(GOOD_SUBMIT), BAD_POLLS, st.just(GOOD_RESULT)),
    st.builds(BadExtractor, st.just(GOOD_SUBMIT), st.just(SUCCEEDED), BAD_RESULTS),
    st.builds(BadExtractor, BAD_SUBMITS, BAD_POLLS, BAD_RESULTS),
)

# The neighbours, each answered alike in every example: its role, then its poll answers in turn.
ROLES = {
    "succeeds": ["succeeded"],
    "fails": ["failed"],
    "runs first": ["running", "succeeded"],
}
NEIGHBOUR_RESULT = {"pages": [{"number": 1, "text": "Total revenue: 10"}], "model": "m1"}
# The bad job's deadline: what ends it when nothing else does (a status that never ends). Its
# calls come at least 50 ms apart (the first poll interval, FAST), so it is in a dozen rounds or
# so before the one that times it out.
BAD_JOB_DEADLINE = timedelta(seconds=0.6)
MAX_BAD_JOB_ROUNDS = 20
MAX_ROUNDS = 40


class FakeExtractor:
    """The http_async protocol: neighbours answered well (they are told apart by the
    Idempotency-Key and by the ids handed out), everything else as the bad job's answers say.
    Counts submissions per job."""

    def __init__(self) -> None:
        self.server = CannedServer(self.route, hang_seconds=2.0)
        self.url = self.server.url
        self.reset()

    def reset(self, bad: BadExtractor | None = None, bad_job: str = "", roles=None) -> None:
        self.bad, self.bad_job, self.roles = bad, bad_job, roles or {}
        self.submissions: Counter[str] = Counter()
        self.polls: Counter[str] = Counter()

    def route(self, request: Request) -> Canned:
        path = request.path
        if request.method == "POST" and path == "/v1/extractions":
            job = request.headers.get("idempotency-key", "").partition(":")[0]
            with self.server.lock:
                self.submissions[job] += 1
            if job == self.bad_job:
                return as_canned(self.bad.submit)
            return json_answer(202, {"id": f"good-{job}", "status": "queued"})
        if request.method == "DELETE":
            return Canned(http_answer(204))
        rest = path.removeprefix("/v1/extractions/")
        fetch = rest.endswith("/result")
        job = rest.removesuffix("/result").removeprefix("good-")
        role = self.roles.get(job) if rest.startswith("good-") else None
        if role is None:
            if self.bad is None:
                return json_answer(404, {"error": {"code": "not_found", "message": "No."}})
            return as_canned(self.bad.result if fetch else self.bad.poll)
        if fetch:
            return json_answer(200, NEIGHBOUR_RESULT)
        with self.server.lock:
            self.polls[job] += 1
            words = ROLES[role]
            word = words[min(self.polls[job], len(words)) - 1]
        if word == "failed":
            return json_answer(200, {"status": "failed", "error": {"code": "c", "message": "m"}})
        return json_answer(200, {"status": word, "progress": 50})


@pytest.fixture
def fake_extractor():
    fake = FakeExtractor()
    with fake.server:
        yield fake
    assert not fake.server.errors


@pytest.fixture
def extractor_row(settings, fake_extractor):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.EXTRACTOR_MAX_RESPONSE_BYTES = 1 << 20
    settings.WEBHOOK_READ_TIMEOUT = 2
    extractor = ExtractorFactory(
        adapter=Adapter.HTTP_ASYNC,
        base_url=fake_extractor.url,
        # Long enough for a loaded machine; an answer cut short costs a call this much.
        request_timeout=timedelta(seconds=1),
        max_submit_attempts=2,
        max_poll_errors=2,
        max_duration=timedelta(minutes=5),
        submit_rate=0,
        poll_rate=0,
        **FAST,
    )
    with KeepAliveReceiver() as receiver:
        # Every event of every job goes through the lane after the engine's rounds.
        WebhookSubscriptionFactory(
            url=f"http://127.0.0.1:{receiver.port}/hooks", all_jobs=True, event_types=EVERY_EVENT
        )
        yield extractor


def new_job(extractor, file_id: str) -> ExtractionJob:
    new = NewJob(
        extractor=extractor, file_id=file_id, source_url=f"https://files.example.org/{file_id}"
    )
    return job_create(new, actor=Actor("api"))


def run_rounds(jobs: list[ExtractionJob]) -> Counter:
    """As the dispatcher would: once a job is due, claim every due job, one task for them all;
    until every job has ended or `MAX_ROUNDS`. Returns the rounds each job was in."""
    ids, rounds = [job.pk for job in jobs], Counter()
    for _ in range(MAX_ROUNDS):
        active = ExtractionJob.objects.filter(pk__in=ids, status__in=states.ACTIVE)
        soonest = active.aggregate(at=Min("due_at"))["at"]
        if not active.exists():
            break
        if soonest is not None:
            time.sleep(min(max((soonest - timezone.now()).total_seconds(), 0), 1.0))
        now = timezone.now()
        due = list(
            active.filter(Q(due_at__lte=now) | Q(due_at__isnull=True)).values_list("pk", flat=True)
        )
        if due:
            ExtractionJob.objects.filter(pk__in=due).update(claimed_at=now)
            process_jobs([str(pk) for pk in due])  # an exception here fails the example
            rounds.update(due)
    return rounds


def outcome(job: ExtractionJob, rounds: Counter, fake: FakeExtractor) -> dict:
    """What a neighbour's end must not owe to the bad job."""
    job.refresh_from_db()
    return {
        "status": job.status_id,
        "error": (job.error_code, job.error_message),
        "remote": (job.external_status, job.progress),
        "counters": (job.attempt, job.submit_attempts, job.poll_count, job.poll_error_count),
        "history": list(
            JobStatusChange.objects.filter(job=job)
            .order_by("pk")
            .values_list("from_status", "to_status")
        ),
        "events": list(
            JobEvent.objects.filter(job=job).order_by("pk").values_list("type", flat=True)
        ),
        "results": list(
            ExtractionResult.objects.filter(job=job).values_list("attempt", "page_count", "payload")
        ),
        "rounds": rounds[job.pk],
        "submissions": fake.submissions[str(job.pk)],
    }


def run_engine(extractor, fake: FakeExtractor, bad: BadExtractor | None, position: int):
    """The neighbours (and the bad job at `position` among them) to their ends; returns each
    neighbour's outcome by role, and the bad job."""
    roles = list(ROLES)
    jobs, by_role, bad_job = [], {}, None
    for index in range(len(roles) + 1):
        if index == position and bad is not None:
            bad_job = new_job(extractor, "bad")
            jobs.append(bad_job)
        if index < len(roles):
            by_role[roles[index]] = new_job(extractor, f"n{index}")
            jobs.append(by_role[roles[index]])
    if bad_job is not None:
        ExtractionJob.objects.filter(pk=bad_job.pk).update(
            deadline_at=bad_job.created_at + BAD_JOB_DEADLINE
        )
    fake.reset(bad, str(bad_job.pk) if bad_job else "", {str(j.pk): r for r, j in by_role.items()})
    rounds = run_rounds(jobs)
    return {role: outcome(job, rounds, fake) for role, job in by_role.items()}, bad_job, rounds


@pytest.fixture
def baseline(extractor_row, fake_extractor):
    """The neighbours' outcomes without a bad job."""
    with rolled_back():
        outcomes, _bad, _rounds = run_engine(extractor_row, fake_extractor, None, 0)
    assert {role: o["status"] for role, o in outcomes.items()} == {
        "succeeds": states.SUCCEEDED,
        "fails": states.FAILED,
        "runs first": states.SUCCEEDED,
    }
    assert {o["submissions"] for o in outcomes.values()} == {1}
    return outcomes


# Each path of the engine's isolation, every run (the generated examples reach some rarely).
PINNED = [
    # Unstorable identifiers: the answer fails its job as each call returns.
    BadExtractor(plain(202, b'{"id":"a\\u0000b"}'), SUCCEEDED, GOOD_RESULT),
    BadExtractor(GOOD_SUBMIT, plain(200, b'{"status":"succeeded\\ud800"}'), GOOD_RESULT),
    # Free text past its column (a request id): cut to fit.
    BadExtractor(plain(202, b'{"id":"ok"}', (b"X-Request-Id", b"r" * 150)), SUCCEEDED, GOOD_RESULT),
    # Results: made safe (NUL, lone surrogate, NaN, beyond 64 bits), or too deep to store.
    BadExtractor(
        GOOD_SUBMIT,
        SUCCEEDED,
        plain(200, b'{"pages":[{"text":"a\\u0000\\udc00","n":NaN,"big":%s}]}' % (b"9" * 30)),
    ),
    BadExtractor(GOOD_SUBMIT, SUCCEEDED, plain(200, b'{"pages":%s}' % nested(65, "list").token)),
    # A status that never ends, a Retry-After of forever: the deadline ends it.
    BadExtractor(plain(202, b'{"id":"ok"}', (b"Retry-After", b"1e309")), SUCCEEDED, GOOD_RESULT),
    BadExtractor(GOOD_SUBMIT, plain(200, b'{"status":"running","progress":NaN}'), GOOD_RESULT),
]


def pinned(examples: list, **others):
    def decorate(test):
        for bad in reversed(examples):
            test = hypothesis.example(bad=bad, **others)(test)
        return test

    return decorate


@budget(default=20)
@pinned(PINNED, position=1)
@given(bad=BAD_EXTRACTORS, position=st.integers(min_value=0, max_value=len(ROLES)))
def test_a_bad_extractor_answer_harms_only_its_own_job(
    extractor_row, fake_extractor, baseline, bad, position
):
    with rolled_back():
        outcomes, bad_job, rounds = run_engine(extractor_row, fake_extractor, bad, position)

        assert outcomes == baseline
        bad_job.refresh_from_db()
        assert bad_job.status_id in states.TERMINAL, (
            f"the bad job is still {bad_job.status_id} after {rounds[bad_job.pk]} rounds"
        )
        assert rounds[bad_job.pk] <= MAX_BAD_JOB_ROUNDS
        hypothesis.event(f"the bad job: {bad_job.status_id} {bad_job.error_code}")
        if bad_job.status_id in (states.FAILED, states.TIMED_OUT):
            assert bad_job.error_code in ErrorCode.values
            assert bad_job.error_message.strip()
        # What clients and receivers are shown of it can be written.
        orjson.dumps(job_representation(bad_job))
        # The lane takes every event, the bad job's with its neighbours', in one round.
        assert deliveries_send_due(limit=1000, lease=timedelta(seconds=30)) > 0
        assert set(WebhookDelivery.objects.values_list("state", flat=True)) == {"delivered"}


def claimed_round(*jobs: ExtractionJob) -> None:
    ExtractionJob.objects.filter(pk__in=[job.pk for job in jobs]).update(claimed_at=timezone.now())
    process_jobs([str(job.pk) for job in jobs])


@pytest.mark.xfail(
    strict=True,
    reason="issue #42: an extractor's kept-alive connection is shared by every job's calls; the "
    "next call on one its answer left silent or dropped fails, whichever job it is for",
)
@pytest.mark.parametrize("then", ["hang", "drop-next"])
def test_a_connection_the_bad_jobs_answer_left_harms_no_neighbour(
    extractor_row, fake_extractor, then
):
    """The bad job's submission is answered in full, the connection kept alive; then the
    extractor leaves that connection silent, or closes it when the next request comes (as an
    idle timeout does). The next call on it, a neighbour's submission a round later, must go
    through in its round: submitted once, no attempt spent."""
    bad_job = new_job(extractor_row, "bad")
    answer = BadExtractor(Canned(GOOD_SUBMIT.raw, then), SUCCEEDED, GOOD_RESULT)
    fake_extractor.reset(answer, str(bad_job.pk))
    claimed_round(bad_job)
    neighbour = new_job(extractor_row, "n0")
    fake_extractor.roles[str(neighbour.pk)] = "succeeds"
    claimed_round(neighbour)
    neighbour.refresh_from_db()
    assert (neighbour.status_id, neighbour.submit_attempts, neighbour.error_message) == (
        states.SUBMITTED,
        1,
        "",
    )
    assert fake_extractor.submissions[str(neighbour.pk)] == 1


@pytest.mark.parametrize("length", [256, 2_100])
def test_an_extractor_job_id_too_long_to_store_fails_its_job(extractor_row, fake_extractor, length):
    """What the engine acts on again must be storable as sent (docs/architecture.md, "One bad
    item harms only itself"): a job id past 255 characters, or one that makes the poll location
    pass 2,000, is the job's `invalid_extractor_answer`, not a job id or location cut short."""
    bad_job = new_job(extractor_row, "bad")
    answer = json_answer(202, {"id": "x" * (length - 1) + "Z"})
    fake_extractor.reset(BadExtractor(answer, SUCCEEDED, GOOD_RESULT), str(bad_job.pk))
    claimed_round(bad_job)
    bad_job.refresh_from_db()
    assert (bad_job.status_id, bad_job.error_code) == (
        states.FAILED,
        ErrorCode.INVALID_EXTRACTOR_ANSWER,
    )


# The lane.

RECEIVER_OBJECTS = shaped({}, {"ok": JSON, "error": JSON})
RECEIVER_BODIES = (
    bodies(RECEIVER_OBJECTS)
    | st.binary(min_size=1, max_size=300)
    | st.sampled_from([b"\x00" * 10, b"\xed\xa0\x80", b"ok\x00", b"\xc3\x28"])
    | st.sampled_from([70_000, 1 << 20]).map(b"v".__mul__)
)
# A receiver's connections are its own (kept by host and port): one held silent harms only its
# own deliveries.
RECEIVER_THENS = THENS | st.sampled_from(["hang", "drop-next"])
RECEIVER_ANSWERS = answers(
    RECEIVER_BODIES,
    statuses=st.sampled_from([200, 202, 204, 400, 404, 410, 429, 500, 503]) | STATUS_CODES,
    thens=RECEIVER_THENS,
)
GOOD_RECEIVERS = 2
ANSWER_204 = Canned(http_answer(204, framing="none"))


@pytest.fixture
def good_receivers(settings):
    """Receivers that answer 204 at once, kept alive, on one server; their subscriptions."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOK_READ_TIMEOUT = 0.5  # what a receiver that never finishes costs an example
    settings.CIRCUIT_FAILURES = 5
    with CannedServer(lambda request: ANSWER_204, hang_seconds=1.0) as server:
        server.subscriptions = [
            WebhookSubscriptionFactory(url=f"{server.url}/good/{n}", event_types=EVERY_EVENT)
            for n in range(GOOD_RECEIVERS)
        ]
        yield server


@contextmanager
def bad_receiver(answer: Canned):
    """A receiver of its own (the lane keeps its connections apart from the others'), new for
    each example: what one example's answer leaves on a kept connection stays in it."""
    with CannedServer(lambda request: answer, hang_seconds=1.0) as server:
        yield WebhookSubscriptionFactory(url=f"{server.url}/bad", event_types=EVERY_EVENT)


def expected_status(answer: Answer | Canned) -> int | None:
    """The status the lane must record for a plainly written answer, its connection kept as it
    was (a reset may take the answer with it); None: not plain."""
    if not isinstance(answer, Answer) or answer.version not in (b"HTTP/1.1", b"HTTP/1.0"):
        return None
    if answer.then != "keep" or answer.framing == "double":
        return None
    if not isinstance(answer.status, int) or not 200 <= answer.status < 600:
        return None
    clean = all(
        name.isascii()
        and name.strip()
        and b":" not in name
        and all(32 <= c < 127 or c == 9 for c in value)
        for name, value in answer.headers
    )
    odd = {b"Content-Length", b"Transfer-Encoding", b"Connection", b"No colon", b"Folded"}
    if not clean or any(name in odd for name, _ in answer.headers):
        return None
    return answer.status


@budget(default=40)
@pinned(
    [
        plain(200, b"ok\x00"),
        plain(500, b"\xed\xa0\x80" + b"\x00" * 2_000),
        plain(204, b"v" * (1 << 20)),
        Canned(b"HTTP/1.1 100 Continue\r\n\r\n", "close"),
        Canned(b"HTTP/1.1 999 Whatever\r\nContent-Length: 0\r\n\r\n"),
    ],
    events=2,
    prior_attempts=len(RETRY_SCHEDULE),
)
@given(
    bad=RECEIVER_ANSWERS,
    events=st.integers(min_value=1, max_value=3),
    prior_attempts=st.integers(min_value=0, max_value=len(RETRY_SCHEDULE)),
)
def test_a_bad_receiver_answer_harms_only_its_own_deliveries(
    good_receivers, bad, events, prior_attempts
):
    with rolled_back(), bad_receiver(as_canned(bad, announced=False)) as bad_subscription:
        good_receivers.requests.clear()
        now = timezone.now()
        for _ in range(events):
            event = JobEventFactory()
            for subscription in good_receivers.subscriptions:
                WebhookDeliveryFactory(event=event, subscription=subscription)
            WebhookDeliveryFactory(
                event=event,
                subscription=bad_subscription,
                attempts=prior_attempts,
                first_failed_at=now - timedelta(minutes=1) if prior_attempts else None,
            )
        good = WebhookDelivery.objects.exclude(subscription=bad_subscription)

        assert deliveries_send_due(limit=100, lease=timedelta(seconds=30)) == events * (
            GOOD_RECEIVERS + 1
        )

        # The neighbours: delivered in this round, once each.
        assert list(good.values_list("state", "attempts", "claimed_until").distinct()) == [
            ("delivered", 1, None)
        ]
        assert set(
            DeliveryAttempt.objects.filter(delivery__in=good).values_list("status_code", "error")
        ) == {(204, "")}
        received = Counter((r.path, r.headers.get("webhook-id")) for r in good_receivers.requests)
        assert sorted(received.values()) == [1] * (events * GOOD_RECEIVERS)
        assert not ReceiverHealth.objects.filter(
            pk__in=[s.pk for s in good_receivers.subscriptions]
        ).exists()
        # The bad one's: each attempt recorded, its state as its status implies.
        for delivery in WebhookDelivery.objects.filter(subscription=bad_subscription):
            status = DeliveryAttempt.objects.get(delivery=delivery).status_code
            hypothesis.event(f"the bad receiver's status: {status}")
            if (plain := expected_status(bad)) is not None:
                assert status == plain
            assert (delivery.claimed_until, delivery.attempts) == (None, prior_attempts + 1)
            if status is not None and 200 <= status < 300:
                assert delivery.state == "delivered"
            elif prior_attempts + 1 > len(RETRY_SCHEDULE):
                assert delivery.state == "dead"
            else:
                assert (delivery.state, bool(delivery.last_error)) == ("pending", True)


# Not strict: whether the next POST lands on the spoiled connection depends on which of the
# lane's kept connections is free at that moment, so on a busy machine it sometimes passes.
@pytest.mark.xfail(
    strict=False,
    reason="issue #42: the lane keeps connections by host and port, so receivers on one host share "
    "them; the next POST on one a receiver's answer left silent or dropped fails, whichever "
    "subscription it is for",
)
@pytest.mark.parametrize("then", ["hang", "drop-next"])
def test_a_connection_a_bad_receiver_left_harms_no_receiver_on_its_host(good_receivers, then):
    """The bad receiver, on the good receivers' host and port, answers its delivery in full and
    keeps the connection alive; then it leaves that connection silent, or closes it when the
    next request comes. The next POST on it, a good receiver's, must be delivered."""
    answer = Canned(http_answer(200, b"ok"), then)
    good_receivers.route = lambda request: answer if request.path == "/bad" else ANSWER_204
    bad_subscription = WebhookSubscriptionFactory(
        url=f"{good_receivers.url}/bad", event_types=EVERY_EVENT
    )
    event = JobEventFactory()
    # Claimed first (the earliest due), its receiver's deliveries are sent first.
    WebhookDeliveryFactory(event=event, subscription=bad_subscription)
    for subscription in good_receivers.subscriptions:
        WebhookDeliveryFactory(event=event, subscription=subscription)

    assert deliveries_send_due(limit=100, lease=timedelta(seconds=30)) == GOOD_RECEIVERS + 1
    good = WebhookDelivery.objects.exclude(subscription=bad_subscription)
    assert (
        list(DeliveryAttempt.objects.filter(delivery__in=good).values_list("status_code", "error"))
        == [(204, "")] * GOOD_RECEIVERS
    )
