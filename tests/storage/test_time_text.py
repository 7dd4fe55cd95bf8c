"""Times are written as the same instants on both databases; on SQLite as SQLAlchemy's
DATETIME text of their UTC time (``YYYY-MM-DD HH:MM:SS.ffffff``, which the engine writes
with ``isoformat`` for a plain ``datetime``), so that text compares in time order."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects.sqlite import DATETIME

from kumiko_typed._engine import make_engine

_meta = sa.MetaData()
_times = sa.Table(
    "ttt_time",
    _meta,
    sa.Column("n", sa.Integer, primary_key=True),
    sa.Column("naive", sa.DateTime),
    sa.Column("aware", sa.DateTime(timezone=True)),
)


class _Moment(datetime):
    """A datetime subclass: written by SQLAlchemy's own format, not ``isoformat``."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "not this"


_ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-12))])
_NAIVE = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30))


def test_times_are_stored_as_sqlite_datetime_text_and_read_back_as_written(db_url: str) -> None:
    engine = make_engine(db_url)
    sqlite = engine.dialect.name == "sqlite"
    reference = DATETIME().bind_processor(engine.dialect)
    try:
        _meta.create_all(engine)

        @settings(max_examples=60, deadline=None)
        @given(naive=_NAIVE, zone=_ZONES, subclass=st.booleans())
        def check(naive: datetime, zone: timezone, subclass: bool) -> None:
            written = _Moment.fromisoformat(naive.isoformat()) if subclass else naive
            aware = naive.replace(tzinfo=zone)
            with engine.begin() as conn:
                conn.execute(_times.delete())
                conn.execute(_times.insert().values(n=1, naive=written, aware=aware))
                row = conn.execute(sa.select(_times.c.naive, _times.c.aware)).one()
                assert (row.naive, row.aware) == (naive, aware)
                if sqlite:
                    text = conn.exec_driver_sql("SELECT naive, aware FROM ttt_time").one()
                    utc = aware.astimezone(UTC).replace(tzinfo=None)
                    assert tuple(text) == (reference(naive), reference(utc))
                    assert len(text[0]) == len("2024-01-02 03:04:05.000006")

        check()
        if sqlite:  # a date in a DateTime column: SQLAlchemy's text, midnight
            with engine.begin() as conn:
                conn.execute(_times.delete())
                conn.execute(_times.insert().values(n=2, naive=date(2024, 1, 2)))
                assert conn.exec_driver_sql("SELECT naive FROM ttt_time").scalar() == "2024-01-02 00:00:00.000000"
    finally:
        engine.dispose()


def test_a_column_of_its_own_sqlite_storage_format_is_written_in_it() -> None:
    """``isoformat`` writes only SQLite's default format: a column declaring another keeps
    it (a mutation run found the check untested)."""
    minutes = DATETIME(
        storage_format="%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d",
        regexp=r"(\d+)-(\d+)-(\d+) (\d+):(\d+)",
    )
    table = sa.Table(
        "ttt_minutes", sa.MetaData(), sa.Column("n", sa.Integer, primary_key=True), sa.Column("at", minutes)
    )
    engine = make_engine("sqlite://")
    try:
        table.create(engine)
        with engine.begin() as conn:
            conn.execute(table.insert().values(n=1, at=datetime(2024, 1, 2, 3, 4)))
            assert conn.exec_driver_sql("SELECT at FROM ttt_minutes").scalar() == "2024-01-02 03:04"
            assert conn.execute(sa.select(table.c.at)).scalar() == datetime(2024, 1, 2, 3, 4)
    finally:
        engine.dispose()
