"""PostgreSQL's `timestamptz` values read by psycopg's compiled loader. Django 5.2's own loader
subclasses psycopg's pure-Python one (to give each value the connection's time zone), which
costs about thirty times the CPU a value, and the engine reads some thirty timestamps a job
(docs/performance.md). This one gives each value that same time zone, after the compiled
parse: the same datetimes (`tests/jobtracking/infra/test_timestamps.py` holds them equal)."""

import functools
from datetime import datetime, tzinfo

from psycopg import adapters, postgres
from psycopg.adapt import Loader
from psycopg.pq import Format

TIMESTAMPTZ = postgres.types["timestamptz"].oid
# psycopg's loader by default: compiled where psycopg's binary package is installed.
_PARSER = adapters.get_loader(TIMESTAMPTZ, Format.TEXT)


@functools.cache
def timestamptz_loader(zone: tzinfo | None) -> type[Loader]:
    """A loader of `timestamptz` text whose values have `zone` for their tzinfo, as Django's
    (`zone`, its `timezone`, is what Django's cursors compare with the connection's)."""

    class TimestamptzLoader(Loader):
        timezone = zone

        def __init__(self, oid: int, context=None) -> None:
            super().__init__(oid, context)
            self._parse = _PARSER(oid, context).load

        def load(self, data) -> datetime:
            return self._parse(data).replace(tzinfo=self.timezone)

    return TimestamptzLoader


def use_compiled_timestamps(sender, connection, **kwargs) -> None:
    """`connection_created`: a new PostgreSQL connection reads timestamps with the loader above."""
    if connection.vendor == "postgresql":
        loader = timestamptz_loader(connection.timezone)
        connection.connection.adapters.register_loader(TIMESTAMPTZ, loader)
