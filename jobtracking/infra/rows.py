"""Rows as SQL for statements the ORM cannot write, such as several inserts in one statement.

Rows travel as JSON parameters, expanded by `json_populate_recordset`: a statement keeps a
handful of parameters whatever its row count, so PostgreSQL parses and plans its text once per
connection (`prepared_cursor`), where rows as separate parameters cost more to bind than to
insert. The values every row shares travel once (`RowSet`): most of a bulk create's job columns
are the same in each row, and PostgreSQL reads far fewer values. Each value is the one
`bulk_create` sends (the field's `pre_save`, then its `get_db_prep_save`), generated columns are
left to the database, and a value the model's constructor left to the column's `db_default` gets
the database's default. orjson writes the JSON, much faster than the standard library at a bulk
create's rows.

Django's documented API only (`tests/test_public_django.py` holds the product to it): objects
come from the model's constructor, values from the field's `pre_save` and `get_db_prep_save`,
the statement runs on psycopg's own cursor."""

import contextlib
import datetime
import decimal
import functools
import ipaddress
import json
import logging
import math
import operator
import time
import uuid
from collections.abc import Callable
from typing import NamedTuple

import orjson
import psycopg
from django import db
from django.db import connections, models
from django.db.models import DEFERRED
from django.db.models.expressions import RawSQL
from django.db.models.fields.files import FieldFile
from psycopg.types.json import Json, Jsonb

# A value left at its field's `db_default`: its row leaves the column's key out.
_DEFAULT = object()
_FLOATS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# Most prepared values: the row holds them as they are.
_AS_IS = frozenset({str, int, bool, type(None), datetime.datetime, datetime.date, uuid.UUID})
# Columns the database writes: generated ones, and ids it generates.
_NOT_WRITTEN = (models.GeneratedField, models.AutoField, models.BigAutoField, models.SmallAutoField)
# Django's SQL logger (its documented `django.db.backends`), which Django's own cursors use.
_SQL_LOG = logging.getLogger("django.db.backends")


def _connection():
    return connections["default"]


@functools.cache
def insert_fields(model: type[models.Model], *, exclude: tuple[str, ...] = ()) -> tuple:
    """The columns an insert writes, as `bulk_create`'s for objects without an id: every
    concrete field but a generated one and an id the database generates."""
    return tuple(
        field
        for field in model._meta.concrete_fields
        if not isinstance(field, _NOT_WRITTEN) and field.name not in exclude
    )


def _prepared(field: models.Field, value, connection):
    """An object's value (its field's `pre_save`) as `bulk_create` sends it: the field's
    `get_db_prep_save`, as the row's JSON holds it."""
    value = field.get_db_prep_save(value, connection)
    if type(value) in _AS_IS:
        return value
    if isinstance(value, Json | Jsonb):  # a JSONField's, with the field's encoder
        if value.dumps in (None, json.dumps):
            return value.obj  # orjson writes it as json.dumps does, where json.dumps can
        return json.loads(value.dumps(value.obj))  # as the encoder wrote it
    if isinstance(value, float) and not math.isfinite(value):
        return _FLOATS[str(value)]  # which orjson would write as null
    if hasattr(value, "resolve_expression"):
        if value == _database_default(field):  # as the model's constructor left it
            return _DEFAULT
        raise TypeError(f"{value!r}: an expression, which only the ORM can insert")
    return value


def _reads_attribute(field: models.Field) -> bool:
    """Whether the field's `pre_save` only reads the attribute: `Field`'s, and a Django date
    field's when it is neither auto_now nor auto_now_add."""
    pre_save = type(field).pre_save
    if pre_save in (models.DateField.pre_save, models.DateTimeField.pre_save):
        return not (field.auto_now or field.auto_now_add)
    return pre_save is models.Field.pre_save


def _saved(objs: list[models.Model], field: models.Field) -> list:
    """The field's `pre_save` of each object: where that only reads the attribute, the
    attribute, read at C speed."""
    if _reads_attribute(field):
        return list(map(operator.attrgetter(field.attname), objs))
    return [field.pre_save(obj, True) for obj in objs]


# Django's own field classes, by the value type whose `get_db_prep_save` on PostgreSQL is the
# value itself (a JSONField's: wrapped for the driver, which `_prepared` unwraps; a FileField's:
# its name). `test_a_row_set_stores_what_bulk_create_stores` holds them to `bulk_create`.
_PLAIN = {
    **dict.fromkeys(
        (models.CharField, models.TextField, models.SlugField, models.URLField), ((str,), None)
    ),
    **dict.fromkeys(
        (
            models.IntegerField,
            models.BigIntegerField,
            models.SmallIntegerField,
            models.PositiveIntegerField,
            models.PositiveSmallIntegerField,
        ),
        ((int,), None),
    ),
    models.BooleanField: ((bool,), None),
    models.UUIDField: ((uuid.UUID,), None),
    models.FileField: ((FieldFile,), str),
}


@functools.cache
def _plain(field: models.Field) -> tuple[frozenset, object]:
    """The value types this field writes as they are, and their conversion if any."""
    if type(field) is models.JSONField and field.encoder is None:
        return frozenset((dict, list)), None
    types, convert = _PLAIN.get(type(field), ((), None))
    return frozenset(types), convert


def _prepared_fast(field: models.Field, value, connection):
    """`_prepared`, without the preparation where the field writes the value as it is
    (`_PLAIN`): most of the work for the values each object has alone."""
    plain_types, convert = _plain(field)
    if type(value) in plain_types:
        return convert(value) if convert else value
    return _prepared(field, value, connection)


def _values(objs: list[models.Model], field: models.Field) -> list:
    """The field's value of each object as `bulk_create` sends it (`SQLInsertCompiler`)."""
    return _prepared_values(field, _saved(objs, field))


def _prepared_values(field: models.Field, saved: list) -> list:
    """The field's values as the database takes them (`_prepared`). A value that is the very
    one before it gets the same prepared value: a batch's objects share most of theirs."""
    plain_types, convert = _plain(field)
    if convert is None and set(map(type, saved)) <= plain_types:
        return saved  # every value written as it is (read at C speed)
    connection = _connection()
    values, last, prepared = [], object(), None
    for value in saved:
        if value is not last:
            last, prepared = value, _prepared_fast(field, value, connection)
        values.append(prepared)
    return values


def _text(value):
    """A value orjson does not write itself (or the standard library, where orjson gave up),
    as the column's text input reads it."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(
        value, decimal.Decimal | uuid.UUID | ipaddress.IPv4Address | ipaddress.IPv6Address
    ):
        return str(value)
    if isinstance(value, datetime.timedelta):  # days apart, as psycopg sends an interval
        return f"{value.days} days {value.seconds}.{value.microseconds:06d} seconds"
    if isinstance(value, psycopg.Binary):
        value = value.obj
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not a column value")


def _dumps(value) -> str:
    try:
        return orjson.dumps(value, default=_text).decode()
    except orjson.JSONEncodeError:
        # What orjson refuses and the standard library writes: an integer beyond 64 bits in a
        # JSON field (jsonb keeps it), a key that is not a string.
        return json.dumps(value, default=_text, ensure_ascii=False, separators=(",", ":"))


def _row(obj: models.Model, fields: tuple) -> dict:
    connection = _connection()
    row = {
        field.column: _prepared_fast(field, field.pre_save(obj, True), connection)
        for field in fields
    }
    return {column: value for column, value in row.items() if value is not _DEFAULT}


def json_rows(objs: list[models.Model], fields: tuple) -> str:
    """The rows as a JSON array of {column: value}, for `select_rows`."""
    return _dumps([_row(obj, fields) for obj in objs])


def json_updates(objs: list[models.Model], fields: tuple) -> str:
    """The objects' primary keys and values of `fields` as a JSON array of {column: value}, for
    `update_statement`: each value as it stands, prepared as `bulk_update` sends it (with no
    `pre_save`, which would stamp an auto_now field anew)."""
    fields = (objs[0]._meta.pk, *fields)
    values = [
        _prepared_values(field, list(map(operator.attrgetter(field.attname), objs)))
        for field in fields
    ]
    names = [field.column for field in fields]
    return _dumps([dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)])


@functools.cache
def update_statement(model: type[models.Model], fields: tuple) -> str:
    """An UPDATE of `fields` of the rows whose primary keys and values its JSON parameter holds
    (`json_updates`): one statement, the same for any number of rows."""
    pk = quote(model._meta.pk.column)
    assignments = ", ".join(f"{quote(field.column)} = v.{quote(field.column)}" for field in fields)
    return (
        f"UPDATE {table(model)} SET {assignments} "
        f"FROM json_populate_recordset(NULL::{table(model)}, %s::json) v "
        f"WHERE {table(model)}.{pk} = v.{pk}"
    )


class RowSet(NamedTuple):
    """Rows to insert: the fields whose values differ between them (`own`), their values as a
    JSON array of {column: value}, and the values every row shares as one JSON object."""

    own: tuple
    rows: str
    shared: str


def _shared(values: list) -> bool:
    """Whether every value is the first as the database stores it: by its JSON text too, as
    {"n": 1} is not {"n": true} nor {"n": 1.0} there, nor is 1.0 the numeric 1.00."""
    first = values[0]
    # The last one first: a column whose values differ mostly differs there already, and
    # counting compares every value (UUIDs, dicts: at Python speed).
    if values[-1] != first or values.count(first) != len(values):
        return False
    return first is _DEFAULT or _dumps(values) == _dumps([first] * len(values))


def row_set(objs: list[models.Model], fields: tuple) -> RowSet:
    """The objects' rows (at least one object), with the values they all share apart
    (`insert_statement`)."""
    if len(objs) == 1:  # a single create: every value is shared
        return RowSet((), "[{}]", _dumps(_row(objs[0], fields)))
    own, own_values, shared = [], [], {}
    for field in fields:
        values = _values(objs, field)
        if not _shared(values):
            own.append(field)
            own_values.append(values)
        elif values[0] is not _DEFAULT:
            shared[field.column] = values[0]
    names = [field.column for field in own]
    if any(_database_default(field) is not None for field in own):
        rows = [
            {name: value for name, value in zip(names, row, strict=True) if value is not _DEFAULT}
            for row in zip(*own_values, strict=True)
        ]
    else:  # no value can be left to the database
        rows = [dict(zip(names, row, strict=True)) for row in zip(*own_values, strict=True)]
    return RowSet(tuple(own), _dumps(rows or [{}] * len(objs)), _dumps(shared))


class _Constructor(NamedTuple):
    """How `instance` calls a model's constructor: with every concrete field's value in order,
    as `Model.from_db` does (the constructor's fast path, which Django documents there)."""

    positions: dict[str, int]  # by attname
    defaults: list  # each field's `get_default()`, as the constructor sets it (DEFERRED: generated)
    made: tuple[tuple[int, str, Callable], ...]  # callable defaults: called for each object


@functools.cache
def _constructor(model: type[models.Model]) -> _Constructor:
    fields = model._meta.concrete_fields
    made = tuple(
        (position, field.attname, field.get_default)
        for position, field in enumerate(fields)
        if field.has_default() and callable(field.default)
    )
    return _Constructor(
        positions={field.attname: position for position, field in enumerate(fields)},
        defaults=[
            DEFERRED if isinstance(field, models.GeneratedField) else field.get_default()
            for field in fields
        ],
        made=made,
    )


@functools.cache
def _database_default(field: models.Field):
    """What the model's constructor leaves in a field it leaves to the column's `db_default`
    (the field's default: an expression, equal to every other such one of the field), else
    None."""
    constructor = _constructor(field.model)
    value = constructor.defaults[constructor.positions[field.attname]]
    return value if hasattr(value, "resolve_expression") else None


def instance(model: type[models.Model], **values) -> models.Model:
    """`model(**values)` (foreign keys by attname, `extractor_id`), the fields' defaults for the
    others: the model's constructor, called with every field's value in order, which is several
    times as fast as with keywords and counts for the many objects of a bulk create."""
    constructor = _constructor(model)
    if unknown := values.keys() - constructor.positions.keys():
        raise TypeError(f"{model.__name__} has no fields {sorted(unknown)}")
    args = constructor.defaults.copy()
    for position, attname, default in constructor.made:
        if attname not in values:
            args[position] = default()
    positions = constructor.positions
    for attname, value in values.items():
        args[positions[attname]] = value
    return model(*args)


def quote(name: str) -> str:
    """A table's or column's name as PostgreSQL reads an identifier."""
    return '"' + name.replace('"', '""') + '"'


@functools.cache
def columns(fields: tuple) -> str:
    return ", ".join(quote(field.column) for field in fields)


def table(model: type[models.Model]) -> str:
    return quote(model._meta.db_table)


@functools.cache
def _db_default_sql(field: models.Field) -> str:
    """The column's DEFAULT as the database holds it (its migration set it from the field's
    `db_default`), for a statement with parameters: what an omitted column or DEFAULT inserts."""
    with _connection().cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
            "ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
            "WHERE d.adrelid = %s::regclass AND a.attname = %s",
            [table(field.model), field.column],
        )
        row = cursor.fetchone()
    return ("NULL" if row is None else row[0]).replace("%", "%%")


def _value(field: models.Field, alias: str) -> str:
    """The field's value in the JSON row `alias`; where a field with a `db_default` has no key
    in it, that default (as an omitted column or DEFAULT would, which an INSERT … SELECT cannot
    say per row)."""
    column = f"{alias}.{quote(field.column)}"
    if _database_default(field) is None:
        return column
    key = "'" + field.column.replace("'", "''") + "'"
    return (
        f"CASE WHEN {alias}_json.j -> {key} IS NULL THEN {_db_default_sql(field)} "
        f"ELSE {column} END AS {quote(field.column)}"
    )


def _from_json(model: type[models.Model], alias: str, fields: tuple, *, many: bool) -> str:
    """A FROM item of the rows of a JSON parameter (an array of objects if `many`, else one
    object) as `alias`. Where one of the fields has a `db_default`, each row's object is
    `{alias}_json.j` too, to tell a key left out from a null."""
    record = f"NULL::{table(model)}"
    if all(_database_default(field) is None for field in fields):
        expand = "json_populate_recordset" if many else "json_populate_record"
        # json, not jsonb: read once, the text need not become jsonb first.
        return f"{expand}({record}, %s::json) {alias}"
    objects = "json_array_elements(%s::json)" if many else "(SELECT %s::json)"
    return (
        f"{objects} {alias}_json(j) "
        f"CROSS JOIN LATERAL json_populate_record({record}, {alias}_json.j) {alias}"
    )


def any_of(values: list, db_type: str) -> RawSQL | list:
    """For `field__in=`: the values as one array parameter (`IN (SELECT unnest(%s::type[]))`),
    where a list binds each value as a parameter of its own, which at a purge's thousands of
    ids costs more to build and bind than the statement costs to run. The list itself on a
    database without arrays (SQLite)."""
    if _connection().vendor != "postgresql":
        return list(values)
    return RawSQL(f"SELECT unnest(%s::{db_type}[])", [array_literal(values)])


def array_literal(values) -> str:
    """The values (none None) as one PostgreSQL array literal, for a `%s::type[]` parameter:
    built once, however many statements bind it. Django's cursors put parameters into the
    statement's text, and psycopg writes a list there element by element, each time."""
    quoted = (str(value).replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return "{" + ",".join(f'"{value}"' for value in quoted) + "}"


def select_rows(model: type[models.Model], fields: tuple) -> str:
    """`SELECT <columns> FROM` the rows of the JSON parameter this SQL leaves a %s for."""
    values = ", ".join(_value(field, "t") for field in fields)
    return f"SELECT {values} FROM {_from_json(model, 't', fields, many=True)}"


@functools.cache
def insert_statement(
    model: type[models.Model],
    own: tuple,
    *,
    where: str = "",
    on_conflict: str = "",
    returning: str = "",
) -> str:
    """An INSERT of a `RowSet` with these `own` fields, the same for any number of rows; only
    the rows `where` holds (a condition on their columns), if given. Its parameters: the set's
    rows, then its shared values."""
    fields = insert_fields(model)
    shared = tuple(field for field in fields if field not in own)
    values = ", ".join(_value(field, "r" if field in own else "s") for field in fields)
    rows = (
        f"SELECT {values} FROM {_from_json(model, 'r', own, many=True)} "
        f"CROSS JOIN {_from_json(model, 's', shared, many=False)}"
    )
    if where:
        rows = f"SELECT * FROM ({rows}) v WHERE {where}"
    sql = f"INSERT INTO {table(model)} ({columns(fields)}) {rows}"
    if on_conflict:
        sql += f" ON CONFLICT {on_conflict}"
    return f"{sql} RETURNING {returning}" if returning else sql


# Django's exceptions for psycopg's (the DB-API's), most specific first, as Django's own cursors
# raise them: "the Django wrappers for database exceptions behave exactly the same as the
# underlying database exceptions", which is their `__cause__`.
_ERRORS = tuple(
    (getattr(psycopg, error.__name__), error)
    for error in (
        db.DataError,
        db.OperationalError,
        db.IntegrityError,
        db.InternalError,
        db.ProgrammingError,
        db.NotSupportedError,
        db.DatabaseError,
        db.InterfaceError,
        db.Error,
    )
)


def _django_error(error: psycopg.Error) -> db.Error:
    for theirs, ours in _ERRORS:
        if isinstance(error, theirs):
            return ours(*error.args)
    return db.Error(*error.args)


class PreparedCursor:
    """psycopg's cursor, which sends the parameters apart from the statement (so that psycopg
    can prepare it), with what a Django cursor adds: Django's exceptions, its SQL log and the
    connection's query log (`connection.queries`, `CaptureQueriesContext`)."""

    def __init__(self, cursor: psycopg.Cursor, connection) -> None:
        self.cursor = cursor
        self.connection = connection

    def execute(self, sql: str, params=None) -> None:
        started = time.monotonic()
        try:
            self.cursor.execute(sql, params)
        except psycopg.Error as error:
            raise _django_error(error) from error
        finally:
            self._logged(sql, params, time.monotonic() - started)

    def fetchone(self):
        return self.cursor.fetchone()

    def fetchall(self) -> list:
        return self.cursor.fetchall()

    def _logged(self, sql: str, params, duration: float) -> None:
        # As Django's cursors log while queries are logged (DEBUG, or a test capturing them).
        # Django documents `connection.queries` but not how its cursors add to it: should that
        # change, this leaves the statement out of it (and the prepared cursor's tests fail).
        connection = self.connection
        if not getattr(connection, "queries_logged", False):
            return
        with contextlib.suppress(AttributeError):
            connection.queries_log.append({"sql": sql, "time": f"{duration:.3f}"})
        _SQL_LOG.debug(
            "(%.3f) %s; args=%s; alias=%s",
            duration,
            sql,
            params,
            connection.alias,
            extra={"duration": duration, "sql": sql, "params": params, "alias": connection.alias},
        )


@contextlib.contextmanager
def prepared_cursor():
    """A cursor whose statement psycopg prepares once per database connection, where DATABASES'
    `prepare_threshold` lets it (`DB_PREPARED_STATEMENTS`): PostgreSQL then neither parses nor
    plans it again. Django's own cursors send the parameters inlined, which psycopg cannot
    prepare; this one, psycopg's own cursor on the connection a Django cursor opened (and
    checked), sends them apart. The statement runs in the connection's transaction, as any
    other. PostgreSQL only."""
    connection = _connection()
    with connection.cursor() as django_cursor, psycopg.Cursor(django_cursor.connection) as raw:
        yield PreparedCursor(raw, connection)
