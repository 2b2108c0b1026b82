"""Rows as SQL for statements the ORM cannot write, such as several inserts in one statement.

Rows travel as one JSON parameter per table, expanded by `jsonb_populate_recordset`: a
statement keeps a handful of parameters whatever its row count, so the driver parses its text
once and caches it (500 rows as separate parameters cost more to bind than to insert). Each
value is prepared by its field, as `save()` prepares it (defaults, `auto_now`, foreign keys)."""

import datetime
import functools
import json
import uuid

from django.db import DEFAULT_DB_ALIAS, connections, models


@functools.cache
def insert_fields(model: type[models.Model], *, exclude: tuple[str, ...] = ()) -> tuple:
    """The columns an insert writes: every concrete field but a database-generated id."""
    return tuple(
        field
        for field in model._meta.concrete_fields
        if not isinstance(field, models.AutoField | models.BigAutoField)
        and field.name not in exclude
    )


JSON_NATIVE = frozenset({str, int, float, bool, dict, list, type(None)})


@functools.cache
def _readers(fields: tuple) -> tuple:
    """(column, attribute name, field) per field; the attribute is None where the field's
    `pre_save` does more than read it (auto_now, files), so that it is called."""
    plain_read = models.Field.pre_save
    return tuple(
        (field.column, field.attname if type(field).pre_save is plain_read else None, field)
        for field in fields
    )


def _plain(value, field):
    """A value as JSON, prepared as `save()` prepares it for the database."""
    kind = type(value)
    if kind in JSON_NATIVE:
        return value
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, int):  # an IntegerChoices member
        return int(value)
    prepared = field.get_prep_value(value)  # a stored file's name, for instance
    return str(prepared) if isinstance(prepared, uuid.UUID) else prepared


def json_rows(objs: list[models.Model], fields: tuple) -> str:
    """The rows as a JSON array of {column: value}, for `jsonb_populate_recordset`."""
    readers = _readers(fields)
    rows = [
        {
            column: _plain(getattr(obj, attname) if attname else field.pre_save(obj, True), field)
            for column, attname, field in readers
        }
        for obj in objs
    ]
    return json.dumps(rows, ensure_ascii=False, separators=(",", ":"))


@functools.cache
def columns(fields: tuple) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return ", ".join(quote(field.column) for field in fields)


def table(model: type[models.Model]) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(model._meta.db_table)


def select_rows(model: type[models.Model], fields: tuple) -> str:
    """`SELECT <columns> FROM` the rows of the JSON parameter this SQL leaves a %s for."""
    return (
        f"SELECT {columns(fields)} FROM jsonb_populate_recordset(NULL::{table(model)}, %s::jsonb)"
    )


@functools.cache
def insert_statement(model: type[models.Model], *, returning: str = "") -> str:
    """An INSERT of the rows of one JSON parameter (`json_rows`), the same for any number."""
    fields = insert_fields(model)
    sql = f"INSERT INTO {table(model)} ({columns(fields)}) {select_rows(model, fields)}"
    return f"{sql} RETURNING {returning}" if returning else sql
