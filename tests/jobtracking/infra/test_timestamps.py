"""Timestamps read with psycopg's compiled loader (`jobtracking.infra.timestamps`) are the
datetimes Django's own loader gives, time zone included."""

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from psycopg.pq import Format

from jobtracking.infra.timestamps import TIMESTAMPTZ, timestamptz_loader
from jobtracking.models import ExtractionJob
from tests.factories import ExtractionJobFactory

pytestmark = pytest.mark.django_db

EDGES = [
    "2026-12-07 23:20:08.123456+00",
    "2026-12-07 23:20:08+00",
    "1970-01-01 00:00:00+00",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    "2024-02-29 12:00:00.5+05:30",
    "1901-12-13 20:45:52-04:56:02",
]
UNREADABLE = ["infinity", "-infinity", "0044-03-15 12:00:00+00 BC", "10000-01-01 00:00:00+00"]


def texts(literals: list[str]) -> list[bytes]:
    """Each literal as PostgreSQL writes the timestamptz back to this connection."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT v::timestamptz::text FROM unnest(%s::text[]) v",
            ["{" + ",".join(f'"{v}"' for v in literals) + "}"],
        )
        return [row[0].encode() for row in cursor.fetchall()]


def django_loader(zone):
    class Djangos(BaseTzLoader):
        timezone = zone

    return Djangos(TIMESTAMPTZ, connection.connection)


def ours(zone):
    return timestamptz_loader(zone)(TIMESTAMPTZ, connection.connection)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_timestamps_load_as_django_loads_them(zone):
    """In the connection's time zone: UTC, or a database's TIME_ZONE setting."""
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('TimeZone', %s, false)", [zone])
    tz = connection.timezone if zone == "UTC" else ZoneInfo(zone)
    rng = random.Random(7)
    start = datetime(1, 1, 1, tzinfo=UTC)
    randoms = [
        (start + timedelta(microseconds=rng.randrange(315_537_897_600_000_000))).isoformat()
        for _ in range(300)
    ]
    theirs, mine = django_loader(tz), ours(tz)
    for text in texts(EDGES + randoms):
        assert outcome(mine, text) == outcome(theirs, text), text


def outcome(loader, text: bytes) -> tuple:
    """The datetime with its tzinfo and offset, or the error."""
    try:
        value = loader.load(text)
    except psycopg.DataError as error:
        return ("refused", type(error))
    return (value, value.tzinfo, value.utcoffset())


def test_timestamps_that_python_cannot_hold_fail_alike():
    connection.ensure_connection()
    theirs, mine = django_loader(connection.timezone), ours(connection.timezone)
    for text in texts(UNREADABLE):
        with pytest.raises(psycopg.DataError):
            theirs.load(text)
        with pytest.raises(psycopg.DataError):
            mine.load(text)


def test_the_connection_and_its_cursors_read_with_the_compiled_loader():
    job = ExtractionJobFactory()
    with connection.cursor() as cursor:
        loader = cursor.cursor.adapters.get_loader(TIMESTAMPTZ, Format.TEXT)

    assert loader is timestamptz_loader(connection.timezone)
    assert ExtractionJob.objects.get(pk=job.pk).created_at == job.created_at
