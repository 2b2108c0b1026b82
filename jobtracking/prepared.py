"""Statements PostgreSQL parses and plans once per connection: `PREPARE` the first time a
connection runs one, `EXECUTE` after. A single create's one statement spent more of
PostgreSQL's time being planned (0.7 ms) than inserting its rows; prepared, the plan is kept.

SQL-level prepared statements belong to the server connection, so a PgBouncer in transaction
mode (which hands each transaction any server connection) cannot carry them: there, set
`DB_PREPARED_STATEMENTS=0` (docs/deploy.md)."""

import functools
import hashlib
import itertools
import re
import weakref

from django.conf import settings
from django.db.backends.utils import CursorWrapper

# Per database connection (the driver's own object: a reconnection starts afresh), the names of
# the statements prepared on it.
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
PLACEHOLDER = re.compile("%s")


@functools.lru_cache(maxsize=64)
def _statements(sql: str) -> tuple[str, str, str]:
    """The prepared statement's name, its PREPARE and its EXECUTE (a `%s` per parameter), made
    once per SQL text rather than on every call."""
    if "%%" in sql:
        raise ValueError("A prepared statement's SQL takes no literal percent sign.")
    name = "jobtracking_" + hashlib.sha256(sql.encode()).hexdigest()[:20]
    numbers = itertools.count(1)
    prepare = f"PREPARE {name} AS " + PLACEHOLDER.sub(lambda _: f"${next(numbers)}", sql)
    parameters = ", ".join(["%s"] * len(PLACEHOLDER.findall(sql)))
    return name, prepare, f"EXECUTE {name}({parameters})"


def execute_prepared(cursor: CursorWrapper, sql: str, params: list) -> None:
    """`cursor.execute(sql, params)`, through a statement prepared on the cursor's connection
    (where the database is PostgreSQL and DB_PREPARED_STATEMENTS is on)."""
    if cursor.db.vendor != "postgresql" or not settings.DB_PREPARED_STATEMENTS:
        cursor.execute(sql, params)
        return
    name, prepare, execute = _statements(sql)
    done = _prepared.setdefault(cursor.db.connection, set())
    if name not in done:
        cursor.execute(prepare)
        done.add(name)
    cursor.execute(execute, params)
