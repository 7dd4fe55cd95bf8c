"""Points in time stored in UTC and read back aware, on SQLite as on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["UtcDateTime", "column_time", "utc_time_of_day"]


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that means the same on every database.

    SQLite has no time-zone type: SQLAlchemy stores the wall-clock digits and drops the
    offset, so a time from a clock in another zone was stored wrong, and every time
    came back naive.  Converting to UTC on the way in and marking UTC on the way out
    gives what PostgreSQL's ``timestamptz`` gives.  Both ways PostgreSQL would otherwise
    use the session's time zone (the server's setting): a naive value, taken as UTC, is
    marked so before it is sent, and a value read back is converted to UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        # Else a cron schedule read back from its cursor would tick in the server's zone.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def column_time(value: date, *, zoned: bool) -> datetime:
    """``value`` as a ``DateTime`` column holds it on both databases (the engine binds
    every one in UTC, ``_engine._UtcDateTime`` and PostgreSQL's UTC session): its UTC
    time, a naive one taken as UTC, aware only if the column keeps a zone (``zoned``);
    a date at its midnight."""
    moment = value if isinstance(value, datetime) else datetime.combine(value, time())
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc if zoned else utc.replace(tzinfo=None)


def utc_time_of_day(value: time) -> time:
    """An aware time of day in UTC, past midnight wrapped as PostgreSQL's ``AT TIME ZONE
    'UTC'`` wraps it (``22:00-05:00`` is ``03:00+00:00``); a naive one as it is.  What a
    ``Time(timezone=True)`` column reads back on both databases: a release before the
    write refused other offsets stored ``12:00-05:00`` in PostgreSQL's ``timetz``, which
    read it back so (SQLite kept no offset)."""
    if value.tzinfo is None or value.tzinfo is UTC:
        return value
    # Another zone at UTC's offset: the same time, named UTC (a zone whose offset depends on
    # the date gives None for a bare time: placed on a day below).
    if value.utcoffset() == timedelta(0):
        return value.replace(tzinfo=UTC)
    return datetime.combine(_ANY_DAY, value).astimezone(UTC).timetz()


#: A day to put a time of day on, far from the calendar's ends (its offset is fixed).
_ANY_DAY: Final = date(2000, 1, 2)
