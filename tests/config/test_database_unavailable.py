"""A database that cannot be reached (PostgreSQL restarting, a failover) answers 503 with
Retry-After on every path, API and admin, wherever the error arises: in a DRF view (DRF's
exception handler) or before any view (a middleware; Django's handler500). Every other database
error stays a 500."""

import contextlib
import os
import shlex
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import requests
from django.db import connection
from django.db.utils import DatabaseErrorWrapper
from django.test import Client
from psycopg import errors as pg_errors

from jobtracking.api.views import ExtractionJobViewSet
from jobtracking.infra.dbfaults import database_unreachable
from jobtracking.services.tokens import token_issue
from tests.factories import UserFactory
from tests.jobtracking.api.conftest import assert_problem, client_for, service_account
from tests.processes import answers, free_port, start_gunicorn, stop, wait_until

API = "/api/v1/jobs/"
ADMIN = "/admin/"


def refused_connection() -> psycopg.OperationalError:
    """The real error of a connection attempt that nothing answers."""
    try:
        psycopg.connect(f"postgres://postgres@127.0.0.1:{free_port()}/x", connect_timeout=5)
    except psycopg.OperationalError as error:
        return error
    raise AssertionError("a free port accepted a connection")


def as_django(error: Exception) -> Exception:
    """The error as Django raises it: its own class, the driver's error as the cause."""
    wrapper = DatabaseErrorWrapper(SimpleNamespace(Database=psycopg, errors_occurred=False))
    try:
        with wrapper:
            raise error
    except Exception as wrapped:  # the wrapper re-raises under Django's class
        return wrapped
    raise AssertionError("not re-raised")


LOST = [
    pg_errors.AdminShutdown("terminating connection due to administrator command"),
    pg_errors.CannotConnectNow("the database system is starting up"),
    pg_errors.ConnectionFailure("connection failure"),
    pg_errors.TooManyConnections("sorry, too many clients already"),
    psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
    psycopg.OperationalError("the connection is closed"),
]
NOT_LOST = [
    # OperationalErrors of a statement, on a connection that is fine.
    pg_errors.QueryCanceled("canceling statement due to statement timeout"),
    pg_errors.DeadlockDetected("deadlock detected"),
    pg_errors.LockNotAvailable("could not obtain lock"),
    pg_errors.SerializationFailure("could not serialize access"),
    pg_errors.UniqueViolation("duplicate key value violates unique constraint"),
    pg_errors.UndefinedTable('relation "nope" does not exist'),
    psycopg.InterfaceError("the cursor is closed"),
]
# A statement timeout, a deadlock, an IntegrityError, a bad query: 500s, not outages.
STATEMENT_ERRORS = [NOT_LOST[0], NOT_LOST[1], NOT_LOST[4], NOT_LOST[5]]


@pytest.mark.parametrize("error", LOST, ids=lambda error: type(error).__name__)
def test_database_unreachable_for_a_lost_or_refused_connection(error):
    assert database_unreachable(error)
    assert database_unreachable(as_django(error))


def test_database_unreachable_for_a_real_refused_connection():
    error = refused_connection()
    assert database_unreachable(error) and database_unreachable(as_django(error))


@pytest.mark.parametrize("error", NOT_LOST, ids=lambda error: type(error).__name__)
def test_database_unreachable_not_for_any_other_database_error(error):
    assert not database_unreachable(error)
    assert not database_unreachable(as_django(error))
    assert not database_unreachable(None)


class FailingMiddleware:
    """Stands for a middleware that reads the database before the view (sessions,
    authentication, django-axes)."""

    error: Exception = RuntimeError("set by the test")

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        raise self.error


@pytest.fixture
def failing_middleware(settings, monkeypatch):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.FailingMiddleware"]

    def fail_with(error: Exception) -> None:
        monkeypatch.setattr(FailingMiddleware, "error", error)

    return fail_with


def assert_unavailable(response, path: str, seconds: int) -> None:
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == str(seconds)
    if path.startswith("/api/"):
        problem = assert_problem(response, 503, "database_unavailable")
        assert f"retry after {seconds} seconds" in problem["detail"]
    else:
        assert response["Content-Type"].startswith("text/plain")
        assert f"retry after {seconds} seconds" in response.content.decode()


@pytest.mark.parametrize("path", [API, ADMIN])
def test_a_connection_lost_in_middleware_answers_503_with_retry_after(
    failing_middleware, settings, path
):
    settings.DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS = 7
    failing_middleware(as_django(refused_connection()))
    response = Client(raise_request_exception=False).get(path)
    assert_unavailable(response, path, 7)


@pytest.mark.django_db
def test_a_connection_lost_in_an_api_view_answers_a_503_problem(monkeypatch, settings):
    settings.DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS = 4
    api = client_for(service_account("lost-in-view"))
    error = as_django(LOST[0])  # the server going down under a connection in use

    def lose_the_connection(*args, **kwargs):
        raise error

    monkeypatch.setattr(ExtractionJobViewSet, "list", lose_the_connection)
    assert_unavailable(api.get(API), API, 4)


@pytest.mark.parametrize("path", [API, ADMIN])
@pytest.mark.parametrize("error", STATEMENT_ERRORS, ids=lambda e: type(e).__name__)
def test_any_other_database_error_in_middleware_stays_a_500(failing_middleware, path, error):
    failing_middleware(as_django(error))
    response = Client(raise_request_exception=False).get(path)
    assert response.status_code == 500 and "Retry-After" not in response
    assert response.json()["code"] == "server_error"


@pytest.mark.django_db
@pytest.mark.parametrize("error", STATEMENT_ERRORS, ids=lambda e: type(e).__name__)
def test_any_other_database_error_in_an_api_view_stays_a_500(monkeypatch, error):
    api = client_for(service_account("bad-query"))
    api.raise_request_exception = False
    wrapped = as_django(error)

    def fail(*args, **kwargs):
        raise wrapped

    monkeypatch.setattr(ExtractionJobViewSet, "list", fail)
    response = api.get(API)
    assert response.status_code == 500 and "Retry-After" not in response
    assert response.json()["code"] == "server_error"


# The real outage: gunicorn, as in production (one thread keeping its connection across requests,
# DB_CONN_MAX_AGE), while the test PostgreSQL is stopped and started again.

RETRY_AFTER = 3


def pg_ctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    data = os.environ["TEST_PG_DATA"]
    # The log file keeps the restarted server off our pipes (else run() waits for it forever).
    command = [*os.environ["TEST_PG_CTL"].split(), "-D", data, "-l", f"{data}/../server.log"]
    return subprocess.run(
        [*command, *args],
        check=check,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


def server_options() -> str:
    """The options the server runs with: `pg_ctl restart` reuses them, `start` needs them."""
    words = shlex.split((Path(os.environ["TEST_PG_DATA"]) / "postmaster.opts").read_text())[1:]
    at = words.index("-D")
    return shlex.join(words[:at] + words[at + 2 :])


def accepts_connections(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


@contextlib.contextmanager
def postgresql_stopped(url: str):
    """PostgreSQL stopped for the block, then always started again and waited for, so that the
    tests after this one find it."""
    options = server_options()
    connection.close()  # ours would be broken by the stop
    pg_ctl("-m", "fast", "-w", "stop")
    try:
        yield
    finally:
        if pg_ctl("status", check=False).returncode != 0:
            pg_ctl("-w", "-o", options, "start")
        wait_until(lambda: accepts_connections(url), 60, "PostgreSQL accepting connections")
        connection.close()


def the_test_database_url() -> str:
    """The database this test run uses, for the server it starts."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("TEST_PG_CTL"), reason="needs the throwaway PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_postgresql_down_answers_503_and_requests_work_again_once_it_is_back(tmp_path):
    token = token_issue(user=service_account("outage-client"))
    browser = Client()
    browser.force_login(UserFactory(username="outage-root", is_staff=True, is_superuser=True))
    session = browser.cookies["sessionid"].value
    url = the_test_database_url()
    port = free_port()
    gunicorn = start_gunicorn(
        port,
        *("--workers", "1", "--worker-class", "gthread", "--threads", "1"),
        env={
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DB_CONN_MAX_AGE": "60",
            # Every API request reads its token: authentication meets the outage too.
            "API_LOOKUP_CACHE_SECONDS": "0",
            "DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS": str(RETRY_AFTER),
        },
        log=tmp_path / "gunicorn.log",
    )
    base = f"http://127.0.0.1:{port}"

    def api():
        headers = {"Authorization": f"Token {token}"}
        return requests.get(base + API, headers=headers, timeout=30)

    def admin():
        return requests.get(base + ADMIN, cookies={"sessionid": session}, timeout=30)

    try:
        wait_until(lambda: answers(f"{base}/healthz"), 30, "gunicorn")
        # The worker's thread now holds a connection, which the stop breaks.
        assert api().status_code == 200 and admin().status_code == 200
        with postgresql_stopped(url):
            for _ in range(2):  # the broken connection, then no connection at all
                response = api()
                assert response.status_code == 503, response.text
                assert response.headers["Retry-After"] == str(RETRY_AFTER)
                assert response.headers["Content-Type"].startswith("application/problem+json")
                problem = response.json()
                assert (problem["status"], problem["code"]) == (503, "database_unavailable")
                assert f"{RETRY_AFTER} seconds" in problem["detail"]
                response = admin()
                assert response.status_code == 503, response.text
                assert response.headers["Retry-After"] == str(RETRY_AFTER)
        # The first requests after the restart find the database again.
        response = api()
        assert response.status_code == 200, response.text
        assert "results" in response.json()
        response = admin()
        assert response.status_code == 200 and "Staff console" in response.text
    finally:
        stop(gunicorn, signal.SIGKILL)
    log = (tmp_path / "gunicorn.log").read_text()
    assert "Database unavailable" in log and "Traceback" not in log, log
