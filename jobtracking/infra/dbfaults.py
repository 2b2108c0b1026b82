"""Which database errors mean "the database cannot be reached right now" (PostgreSQL restarting, a
failover, a full connection table) rather than a fault of the request: those answer 503 with
Retry-After, every other database error stays what it is (an IntegrityError, a bad query, a
deadlock or a statement timeout is not an outage)."""

import psycopg
from psycopg import pq

# Server-side refusals of the connection itself: class 08 (connection exception) and these.
UNAVAILABLE_SQLSTATES = {
    "57P01",  # admin_shutdown: the server is stopping (a restart, a failover)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: the server is starting up or in recovery
    "53300",  # too_many_connections
}


def database_unreachable(exc: BaseException | None) -> bool:
    """True when `exc` (or what it wraps: Django re-raises each driver error as its own class,
    the driver's error as the cause) is a lost or refused connection."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, psycopg.OperationalError):
            # No SQLSTATE: the client library's own failure (refused, lost, closed, timed out
            # connecting); the server's statement-level errors always carry one.
            sqlstate = exc.sqlstate
            return (
                sqlstate is None or sqlstate.startswith("08") or sqlstate in UNAVAILABLE_SQLSTATES
            )
        if isinstance(exc, psycopg.InterfaceError):
            # psycopg reports lost connections as OperationalError; an InterfaceError counts only
            # when it names a connection that is gone (otherwise it is a misuse of the driver).
            return exc.pgconn is not None and exc.pgconn.status == pq.ConnStatus.BAD
        exc, seen = exc.__cause__, seen + 1
    return False
