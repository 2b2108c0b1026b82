"""Rows as SQL for statements the ORM cannot write, such as several inserts in one statement.

Rows travel as JSON parameters, expanded by `json_populate_recordset`: a statement keeps a
handful of parameters whatever its row count, so the driver parses its text once and caches it
(500 rows as separate parameters cost more to bind than to insert). The values every row shares
travel once (`RowSet`): most of a bulk create's 37 job columns are the same in each row, and
PostgreSQL reads 500 rows of the few others in half the time. Each value is read as `save()`
reads it (`auto_now`, files through their field's `pre_save`); orjson writes the JSON, ten
times faster than the standard library at a bulk create's rows."""

import datetime
import functools
import json
import uuid
from typing import NamedTuple

import orjson
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models import signals
from django.db.models.base import ModelState
from django.db.models.fields.files import FieldFile


@functools.cache
def insert_fields(model: type[models.Model], *, exclude: tuple[str, ...] = ()) -> tuple:
    """The columns an insert writes: every concrete field but a database-generated id."""
    return tuple(
        field
        for field in model._meta.concrete_fields
        if not isinstance(field, models.AutoField | models.BigAutoField)
        and field.name not in exclude
    )


def _read_plainly(field: models.Field) -> bool:
    """Whether `pre_save` only reads the attribute (a date field's override does more only when
    it is auto_now or auto_now_add)."""
    if isinstance(field, models.DateField):
        return not (field.auto_now or field.auto_now_add)
    return type(field).pre_save is models.Field.pre_save


@functools.cache
def _readers(fields: tuple) -> tuple:
    """(column, attribute name, field) per field; the attribute is None where the field's
    `pre_save` does more than read it (auto_now, files), so that it is called."""
    return tuple(
        (field.column, field.attname if _read_plainly(field) else None, field) for field in fields
    )


def _prepared(value):
    """A value neither JSON encoder writes itself, as the database stores it."""
    if isinstance(value, FieldFile):
        return value.name or ""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a column value")


def _values(objs: list[models.Model], reader: tuple) -> list:
    _column, attname, field = reader
    if attname:
        return [getattr(obj, attname) for obj in objs]
    return [field.pre_save(obj, True) for obj in objs]


def _dumps(value) -> str:
    try:
        return orjson.dumps(value, default=_prepared).decode()
    except orjson.JSONEncodeError:
        # What orjson refuses and the standard library writes: an integer beyond 64 bits in a
        # JSON field (jsonb keeps it), a key that is not a string.
        return json.dumps(value, default=_prepared, ensure_ascii=False, separators=(",", ":"))


def _row(obj: models.Model, readers: tuple) -> dict:
    return {
        column: getattr(obj, attname) if attname else field.pre_save(obj, True)
        for column, attname, field in readers
    }


def json_rows(objs: list[models.Model], fields: tuple) -> str:
    """The rows as a JSON array of {column: value}, for `json_populate_recordset`."""
    readers = _readers(fields)
    return _dumps([_row(obj, readers) for obj in objs])


class RowSet(NamedTuple):
    """Rows to insert: the fields whose values differ between them (`own`), their values as a
    JSON array of {column: value}, and the values every row shares as one JSON object."""

    own: tuple
    rows: str
    shared: str


def _shared(values: list, field: models.Field) -> bool:
    """Whether every value is the first as the database stores it: JSON by its text too, as
    {"n": 1} is not {"n": true} nor {"n": 1.0} there."""
    first = values[0]
    if values.count(first) != len(values):
        return False
    if isinstance(field, models.JSONField):
        text = _dumps(first)
        return all(_dumps(value) == text for value in values)
    return True


def row_set(objs: list[models.Model], fields: tuple) -> RowSet:
    """The objects' rows (at least one object), with the values they all share apart
    (`insert_statement`)."""
    if len(objs) == 1:  # a single create: every value is shared
        return RowSet((), "[{}]", _dumps(_row(objs[0], _readers(fields))))
    own, own_values, shared = [], [], {}
    for reader in _readers(fields):
        column, _attname, field = reader
        values = _values(objs, reader)
        if _shared(values, field):
            shared[column] = values[0]
        else:
            own.append(field)
            own_values.append(values)
    names = [field.column for field in own]
    rows = [dict(zip(names, row, strict=True)) for row in zip(*own_values, strict=True)]
    return RowSet(tuple(own), _dumps(rows or [{}] * len(objs)), _dumps(shared))


@functools.cache
def _defaults(model: type[models.Model]) -> tuple[dict, tuple, frozenset[str]]:
    """A model's field defaults: the fixed ones, the callables (id, an empty dict) by attname,
    and every attname."""
    fixed, made = {}, []
    for field in model._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            made.append((field.attname, field.default))
        else:
            fixed[field.attname] = field.get_default()
    return fixed, tuple(made), frozenset(field.attname for field in model._meta.concrete_fields)


def instance(model: type[models.Model], **values) -> models.Model:
    """`model(**values)` (foreign keys by attname, `extractor_id`), the fields' defaults for the
    others, with the values put in the instance's `__dict__` as `Model.__init__` leaves them.
    Five times as fast, which counts for the thousand objects of a bulk create. Where a
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
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(name)


@functools.cache
def columns(fields: tuple) -> str:
    return ", ".join(quote(field.column) for field in fields)


def table(model: type[models.Model]) -> str:
    return quote(model._meta.db_table)


def select_rows(model: type[models.Model], fields: tuple) -> str:
    """`SELECT <columns> FROM` the rows of the JSON parameter this SQL leaves a %s for."""
    return (
        # json, not jsonb: read once, the text need not become jsonb first (a seventh faster).
        f"SELECT {columns(fields)} FROM json_populate_recordset(NULL::{table(model)}, %s::json)"
    )


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
    values = ", ".join(f"{'r' if field in own else 's'}.{quote(field.column)}" for field in fields)
    rows = (
        f"SELECT {values} FROM json_populate_recordset(NULL::{table(model)}, %s::json) r "
        f"CROSS JOIN json_populate_record(NULL::{table(model)}, %s::json) s"
    )
    if where:
        rows = f"SELECT * FROM ({rows}) v WHERE {where}"
    sql = f"INSERT INTO {table(model)} ({columns(fields)}) {rows}"
    if on_conflict:
        sql += f" ON CONFLICT {on_conflict}"
    return f"{sql} RETURNING {returning}" if returning else sql
