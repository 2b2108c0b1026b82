"""Statements PostgreSQL parses and plans once per connection: `PREPARE` the first time a
connection runs one, `EXECUTE` after. A single create's one statement spent more of
PostgreSQL's time being planned (0.7 ms) than inserting its rows; prepared, the plan is kept.

SQL-level prepared statements belong to the server connection, so a PgBouncer in transaction
mode (which hands each transaction any server connection) cannot carry them: there, set
`DB_PREPARED_STATEMENTS=0` (docs/deploy.md)."""

import hashlib
import re
import weakref

from django.conf import settings
from django.db.backends.utils import CursorWrapper

# Per database connection (the driver's own object: a reconnection starts afresh), the names of
# the statements prepared on it.
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
PLACEHOLDER = re.compile("%s")


def execute_prepared(cursor: CursorWrapper, sql: str, params: list) -> None:
    """`cursor.execute(sql, params)`, through a statement prepared on the cursor's connection
    (where the database is PostgreSQL and DB_PREPARED_STATEMENTS is on)."""
    if cursor.db.vendor != "postgresql" or not settings.DB_PREPARED_STATEMENTS:
        cursor.execute(sql, params)
        return
    if "%%" in sql:
        raise ValueError("A prepared statement's SQL takes no literal percent sign.")
    name = "jobtracking_" + hashlib.sha256(sql.encode()).hexdigest()[:20]
    done = _prepared.setdefault(cursor.db.connection, set())
    if name not in done:
        numbers = iter(range(1, len(params) + 1))
        cursor.execute(f"PREPARE {name} AS " + PLACEHOLDER.sub(lambda _: f"${next(numbers)}", sql))
        done.add(name)
    cursor.execute(f"EXECUTE {name}({', '.join(['%s'] * len(params))})", params)
