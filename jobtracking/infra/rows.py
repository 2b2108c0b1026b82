"""Rows as SQL for statements the ORM cannot write, such as several inserts in one statement.

Rows travel as JSON parameters, expanded by `json_populate_recordset`: a statement keeps a
handful of parameters whatever its row count, so PostgreSQL parses and plans its text once per
connection (`prepared_cursor`), where rows as separate parameters cost more to bind than to
insert. The values every row shares travel once (`RowSet`): most of a bulk create's job columns
are the same in each row, and PostgreSQL reads far fewer values. Each value is the one
`bulk_create` sends (the field's `pre_save`, then its `get_db_prep_save`), generated columns are
left to the database, and a value left at the field's `db_default` gets the database's default.
orjson writes the JSON, much faster than the standard library at a bulk create's rows."""

import contextlib
import datetime
import decimal
import functools
import ipaddress
import json
import math
import operator
import uuid
from typing import NamedTuple

import orjson
import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import signals
from django.db.models.base import ModelState
from django.db.models.expressions import DatabaseDefault
from django.db.models.fields import AutoFieldMixin
from django.db.models.fields.files import FieldFile
from django.utils.duration import duration_iso_string
from psycopg.types.json import Json, Jsonb

# A value left at its field's `db_default`: its row leaves the column's key out.
_DEFAULT = object()
_FLOATS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
# Most prepared values: the row holds them as they are.
_AS_IS = frozenset({str, int, bool, type(None), datetime.datetime, datetime.date, uuid.UUID})


def _connection():
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def insert_fields(model: type[models.Model], *, exclude: tuple[str, ...] = ()) -> tuple:
    """The columns an insert writes, as `bulk_create`'s for objects without an id: every
    concrete field but a generated one and an id the database generates."""
    return tuple(
        field
        for field in model._meta.concrete_fields
        if not field.generated
        and not isinstance(field, AutoFieldMixin)
        and field.name not in exclude
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
    if isinstance(value, DatabaseDefault):
        return _DEFAULT
    if hasattr(value, "as_sql"):
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
def _plain(field: models.Field) -> tuple[tuple, object]:
    """The value types this field writes as they are, and their conversion if any."""
    if type(field) is models.JSONField and field.encoder is None:
        return (dict, list), None
    return _PLAIN.get(type(field), ((), None))


def _prepared_fast(field: models.Field, value, connection):
    """`_prepared`, without the preparation where the field writes the value as it is
    (`_PLAIN`): most of the work for the values each object has alone."""
    plain_types, convert = _plain(field)
    if type(value) in plain_types:
        return convert(value) if convert else value
    return _prepared(field, value, connection)


def _values(objs: list[models.Model], field: models.Field) -> list:
    """The field's value of each object as `bulk_create` sends it (`SQLInsertCompiler`). An
    object holding the very value the previous one held gets the same prepared value: a
    bulk create's objects share most of theirs."""
    connection = _connection()
    values, last, prepared = [], object(), None
    for value in _saved(objs, field):
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
    if isinstance(value, datetime.timedelta):
        return duration_iso_string(value)
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
    if values.count(first) != len(values):
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
    rows = [
        {name: value for name, value in zip(names, row, strict=True) if value is not _DEFAULT}
        for row in zip(*own_values, strict=True)
    ]
    return RowSet(tuple(own), _dumps(rows or [{}] * len(objs)), _dumps(shared))


@functools.cache
def _defaults(model: type[models.Model]) -> tuple[dict, tuple, frozenset[str]]:
    """A model's field defaults as `Model.__init__` sets them (not a generated field's): the
    fixed ones, the callables (id, an empty dict) by attname, and every attname."""
    fixed, made = {}, []
    fields = [field for field in model._meta.concrete_fields if not field.generated]
    for field in fields:
        if field.has_default() and callable(field.default):
            made.append((field.attname, field.default))
        else:
            fixed[field.attname] = field.get_default()
    return fixed, tuple(made), frozenset(field.attname for field in fields)


def instance(model: type[models.Model], **values) -> models.Model:
    """`model(**values)` (foreign keys by attname, `extractor_id`), the fields' defaults for the
    others, with the values put in the instance's `__dict__` as `Model.__init__` leaves them.
    Several times as fast, which counts for the many objects of a bulk create. Where a
    receiver listens to `pre_init` or `post_init` (for any model: cheaper to ask) the model's
    own `__init__` builds it."""
    fixed, made, attnames = _defaults(model)
    if unknown := values.keys() - attnames:
        raise TypeError(f"{model.__name__} has no fields {sorted(unknown)}")
    if signals.pre_init.receivers or signals.post_init.receivers:
        return model(**values)
    obj = model.__new__(model)
    state = obj.__dict__
    state.update(fixed)
    for attname, default in made:
        if attname not in values:
            state[attname] = default()
    state.update(values)
    obj._state = ModelState()
    return obj


def quote(name: str) -> str:
    return _connection().ops.quote_name(name)


@functools.cache
def columns(fields: tuple) -> str:
    return ", ".join(quote(field.column) for field in fields)


def table(model: type[models.Model]) -> str:
    return quote(model._meta.db_table)


def _db_default_sql(field: models.Field) -> str:
    """The field's `db_default` as the SQL its migration gave the column's DEFAULT, literals
    inlined, for a statement with parameters."""
    connection = _connection()
    sql, params = connection.schema_editor().db_default_sql(field)
    return connection.ops.compose_sql(sql, params).replace("%", "%%")


def _value(field: models.Field, alias: str) -> str:
    """The field's value in the JSON row `alias`; where a field with a `db_default` has no key
    in it, that default (as an omitted column or DEFAULT would, which an INSERT … SELECT cannot
    say per row)."""
    column = f"{alias}.{quote(field.column)}"
    if not field.has_db_default():
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
    if not any(field.has_db_default() for field in fields):
        expand = "json_populate_recordset" if many else "json_populate_record"
        # json, not jsonb: read once, the text need not become jsonb first.
        return f"{expand}({record}, %s::json) {alias}"
    objects = "json_array_elements(%s::json)" if many else "(SELECT %s::json)"
    return (
        f"{objects} {alias}_json(j) "
        f"CROSS JOIN LATERAL json_populate_record({record}, {alias}_json.j) {alias}"
    )


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


class _DebugCursor(CursorDebugWrapper):
    """Django's query log, of the statement as given: Django reads what it logs from a cursor
    that binds client-side, and psycopg keeps no text for a prepared statement's run."""

    def execute(self, sql, params=None):
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


@contextlib.contextmanager
def prepared_cursor():
    """A Django cursor (its query log, errors and execute wrappers) whose statement psycopg
    prepares once per database connection, where DATABASES' `prepare_threshold` lets it
    (`DB_PREPARED_STATEMENTS`): PostgreSQL then neither parses nor plans it again. Django's own
    cursors send the parameters inlined, which psycopg cannot prepare; this one sends them
    apart. The statement runs in the connection's transaction, as any other. PostgreSQL only."""
    connection = _connection()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        raw = psycopg.Cursor(connection.connection)
    wrapper = _DebugCursor if connection.queries_logged else CursorWrapper
    with wrapper(raw, connection) as cursor:
        yield cursor
