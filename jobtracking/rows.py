"""Rows as SQL for statements the ORM cannot write, such as several inserts in one statement.

Rows travel as one JSON parameter per table, expanded by `json_populate_recordset`: a
statement keeps a handful of parameters whatever its row count, so the driver parses its text
once and caches it (500 rows as separate parameters cost more to bind than to insert). Each
value is read as `save()` reads it (`auto_now`, files through their field's `pre_save`); orjson
writes the JSON, ten times faster than the standard library at a bulk create's rows."""

import datetime
import functools
import json
import uuid

import orjson
from django.db import DEFAULT_DB_ALIAS, connections, models
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


def json_rows(objs: list[models.Model], fields: tuple) -> str:
    """The rows as a JSON array of {column: value}, for `json_populate_recordset`."""
    readers = _readers(fields)
    rows = [
        {
            column: getattr(obj, attname) if attname else field.pre_save(obj, True)
            for column, attname, field in readers
        }
        for obj in objs
    ]
    try:
        return orjson.dumps(rows, default=_prepared).decode()
    except orjson.JSONEncodeError:
        # What orjson refuses and the standard library writes: an integer beyond 64 bits in a
        # JSON field (jsonb keeps it), a key that is not a string.
        return json.dumps(rows, default=_prepared, ensure_ascii=False, separators=(",", ":"))


@functools.cache
def _attnames(model: type[models.Model]) -> frozenset[str]:
    return frozenset(field.attname for field in model._meta.concrete_fields)


def instance(model: type[models.Model], **values) -> models.Model:
    """`model(**values)` (foreign keys by attname, `extractor_id`) built the way Django builds a
    row it loads: positional values in field order, the fields' defaults for the others. Twice
    as fast, which counts for the thousand objects of a bulk create."""
    fields = model._meta.concrete_fields
    if unknown := values.keys() - _attnames(model):
        raise TypeError(f"{model.__name__} has no fields {sorted(unknown)}")
    return model(
        *[
            values[field.attname] if field.attname in values else field.get_default()
            for field in fields
        ]
    )


@functools.cache
def columns(fields: tuple) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return ", ".join(quote(field.column) for field in fields)


def table(model: type[models.Model]) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(model._meta.db_table)


def select_rows(model: type[models.Model], fields: tuple) -> str:
    """`SELECT <columns> FROM` the rows of the JSON parameter this SQL leaves a %s for."""
    return (
        # json, not jsonb: read once, the text need not become jsonb first (a seventh faster).
        f"SELECT {columns(fields)} FROM json_populate_recordset(NULL::{table(model)}, %s::json)"
    )


@functools.cache
def insert_statement(model: type[models.Model], *, returning: str = "") -> str:
    """An INSERT of the rows of one JSON parameter (`json_rows`), the same for any number."""
    fields = insert_fields(model)
    sql = f"INSERT INTO {table(model)} ({columns(fields)}) {select_rows(model, fields)}"
    return f"{sql} RETURNING {returning}" if returning else sql
