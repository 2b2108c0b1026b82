"""Waking the dispatcher when work becomes due now (a job created or requeued).

On PostgreSQL the creating transaction sends `NOTIFY`; the server delivers it only if and when
that transaction commits, so a woken dispatcher always finds the job. This costs one statement in
a transaction that is happening anyway, where enqueueing a task per job cost five broker
statements and its own commit, and it lets the dispatcher hand new jobs out in batches. Other
databases have no notifications: the dispatcher finds new jobs on its next idle round.
"""

import time

from django.db import connection

CHANNEL = "jobtracking_due"
# The wake-up as SQL, for statements that include it (`creation.created_rows_statement`).
NOTIFY_SQL = "SELECT pg_notify(%s, '')"


def notify_due() -> None:
    """Call inside the transaction that makes a job due."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(NOTIFY_SQL, [CHANNEL])


class Listener:
    """The dispatcher's side: `wait(timeout)` returns early when a notification arrives."""

    def __init__(self) -> None:
        self.raw = None

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds; True if a notification cut it short."""
        if connection.vendor != "postgresql":
            time.sleep(timeout)
            return False
        connection.ensure_connection()
        raw = connection.connection
        # The raw connection's errors become Django's DatabaseError, which callers handle.
        with connection.wrap_database_errors:
            if raw is not self.raw:  # a new connection (first use, or after a restart)
                raw.execute(f"LISTEN {CHANNEL}")
                self.raw = raw
            woken = any(True for _ in raw.notifies(timeout=timeout, stop_after=1))
            # Drain the rest: one wake-up serves any number of notifications.
            for _ in raw.notifies(timeout=0):
                pass
        return woken
