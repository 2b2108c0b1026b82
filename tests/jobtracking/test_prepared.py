"""Statements prepared once per connection (`jobtracking.prepared`)."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobtracking.prepared import execute_prepared

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's PREPARE"),
]

SQL = "SELECT %s::int + %s::int, %s::json ->> 'a'"


def run(params: list, sql: str = SQL):
    with CaptureQueriesContext(connection) as queries, connection.cursor() as cursor:
        execute_prepared(cursor, sql, params)
        row = cursor.fetchone()
    return row, [query["sql"].split()[0] for query in queries]


@pytest.mark.django_db(transaction=True)
def test_a_statement_is_prepared_once_per_connection_then_executed():
    connection.close()
    assert run([1, 2, '{"a": "x"}']) == ((3, "x"), ["PREPARE", "EXECUTE"])
    assert run([40, 2, '{"a": "it\'s"}']) == ((42, "it's"), ["EXECUTE"])
    connection.close()  # a new connection has none of them
    assert run([1, 1, "{}"]) == ((2, None), ["PREPARE", "EXECUTE"])


def test_a_prepared_statement_outlives_a_rolled_back_transaction():
    sql = SQL + " -- prepared inside the transaction below"
    with transaction.atomic():
        run([1, 2, "{}"], sql)
        transaction.set_rollback(True)
    assert run([2, 2, "{}"], sql)[1] == ["EXECUTE"]


def test_statements_run_unprepared_when_turned_off(settings):
    settings.DB_PREPARED_STATEMENTS = False
    assert run([1, 2, '{"a": 1}']) == ((3, "1"), ["SELECT"])


def test_sql_with_a_literal_percent_sign_is_refused():
    with connection.cursor() as cursor, pytest.raises(ValueError, match="percent"):
        execute_prepared(cursor, "SELECT 'a%%' || %s", ["b"])
