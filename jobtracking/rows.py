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


JSON_NATIVE = (str, int, float, bool, dict, list, type(None))


def _plain(field, obj):
    """The field's value in `obj` as JSON, prepared as `save()` prepares it."""
    value = field.pre_save(obj, True)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, JSON_NATIVE):
        return value
    # Anything else (a stored file's name) as the field prepares it for the database.
    prepared = field.get_prep_value(value)
    return str(prepared) if isinstance(prepared, uuid.UUID) else prepared


def json_rows(objs: list[models.Model], fields: tuple) -> str:
    """The rows as a JSON array of {column: value}, for `jsonb_populate_recordset`."""
    return json.dumps(
        [{field.column: _plain(field, obj) for field in fields} for obj in objs],
        ensure_ascii=False,
        separators=(",", ":"),
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
        f"SELECT {columns(fields)} FROM jsonb_populate_recordset(NULL::{table(model)}, %s::jsonb)"
    )


@functools.cache
def insert_statement(model: type[models.Model], *, returning: str = "") -> str:
    """An INSERT of the rows of one JSON parameter (`json_rows`), the same for any number."""
    fields = insert_fields(model)
    sql = f"INSERT INTO {table(model)} ({columns(fields)}) {select_rows(model, fields)}"
    return f"{sql} RETURNING {returning}" if returning else sql
