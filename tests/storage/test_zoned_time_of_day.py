"""A ``Time(timezone=True)`` column gives one answer on SQLite and PostgreSQL.

Before: PostgreSQL's ``timetz`` kept a time's offset and read a naive time back in UTC (the
App's session), SQLite kept no offset and read everything back naive — ``12:00-05:00`` read
back as ``12:00-05:00`` there and ``12:00`` here, ``12:00`` as ``12:00+00:00`` there and
``12:00`` here.  Now both read such a column back in UTC, and a time of another offset is a
``validation_error`` at its field on both, with nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, time, timedelta, timezone
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class FupClock(Entity):
    __tablename__ = "fup_clock"
    at: Mapped[time | None] = mapped_column(sa.Time(timezone=True), default=None)


@attrs.frozen
class Put:
    v: Any


f = Feature("fup")
f.entity(FupClock)
put = f.write_handler(
    "put",
    f.pipeline(Put)
    .create("x", FupClock, data=lambda c: FupClock(at=c.payload.v))
    .return_(lambda c: ok(c.steps["x"].id)),
)


def _read(app: App) -> list[time | None]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(FupClock.__table__.c.at)))


@pytest.mark.parametrize("written", [time(12, 30), time(12, 30, tzinfo=UTC)], ids=["naive", "utc"])
def test_a_time_without_a_zone_or_in_utc_reads_back_in_utc_on_both(
    app_on: Callable[..., App], user: User, written: time
) -> None:
    app = app_on([f])
    ok_data(app.dispatch(put, Put(written), user=user))
    assert _read(app) == [time(12, 30, tzinfo=UTC)]
    # The event keeps the time as written: its replay is the row (a naive one was "changed").
    report = ok_data(app.rebuild_projection(FupClock, user=user, verify=True))
    assert report.matches, report


def test_a_time_of_another_offset_is_refused_at_its_field_on_both(app_on: Callable[..., App], user: User) -> None:
    app = app_on([f])
    refused = failure_of(
        app.dispatch(put, Put(time(12, tzinfo=timezone(timedelta(hours=-5)))), user=user), "validation_error"
    )
    ((detail,),) = [refused.details]
    assert (detail["path"], detail["column"]) == ("$.v", "fup_clock.at")
    assert detail["message"].startswith("must be a time in UTC or without a time zone (read back in UTC)")
    assert _read(app) == []


def test_a_time_of_another_offset_an_earlier_release_stored_reads_back_in_utc_on_both(
    app_on: Callable[..., App], user: User
) -> None:
    """A release before the write refused other offsets stored ``22:00-05:00`` in
    PostgreSQL's ``timetz``, which read it back so, where SQLite reads every row in UTC
    (it kept no offset).  Now PostgreSQL reads such a row in UTC too, wrapped past
    midnight as its ``AT TIME ZONE 'UTC'`` wraps it: ``03:00+00:00``, on both."""
    app = app_on([f])
    made = ok_data(app.dispatch(put, Put(time(3)), user=user))
    table = FupClock.__table__
    if app.engine.dialect.name == "postgresql":  # the earlier release's row, as it stored it
        with app.engine.begin() as conn:
            conn.execute(sa.text("UPDATE fup_clock SET at = '22:00-05'::timetz WHERE id = :id"), {"id": made})
            assert conn.execute(sa.text("SELECT at::text FROM fup_clock")).scalar_one() == "22:00:00-05"
    assert _read(app) == [time(3, tzinfo=UTC)]
    assert [(t, t.utcoffset()) for t in _read(app)] == [(time(3, tzinfo=UTC), timedelta(0))]
    with app.engine.connect() as conn:  # a computed read of the column, through its type
        assert conn.scalar(sa.select(sa.func.max(table.c.at))) == time(3, tzinfo=UTC)
    # Its event says 03:00 (naive, UTC): the row, replayed, is unchanged.
    report = ok_data(app.rebuild_projection(FupClock, user=user, verify=True))
    assert report.matches, report
