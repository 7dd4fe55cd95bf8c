"""A user's timestamp columns on a PostgreSQL server whose time zone is not UTC: what a
handler writes and reads back, and what a read compares, is what SQLite answers.
Before, PostgreSQL read ``timestamptz`` back in the server's zone, took a naive time as
the server's local time, and stored an aware time in a ``timestamp`` column as the
server's wall clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import attrs
import sqlalchemy as sa
from _support import ok_data, server_time_zone
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class TzStamp(Entity):
    __tablename__ = "tz_stamp"
    at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    plain: Mapped[datetime] = mapped_column(sa.DateTime())


@attrs.frozen
class At:
    at: datetime


f = Feature("tz")
f.entity(TzStamp)
stamp = f.write_handler(
    "stamp",
    f.pipeline(At)
    .create("row", TzStamp, data=lambda c: TzStamp(at=c.payload.at, plain=c.payload.at))
    .return_(lambda c: ok(None)),
)
before = f.write_handler(
    "before",
    f.pipeline(At)
    .find_many("rows", lambda c: sa.select(TzStamp).where(TzStamp.at < c.payload.at).order_by(TzStamp.at))
    .return_(lambda c: ok([(row.at, row.plain) for row in c.steps["rows"]])),
)


def test_timestamps_read_and_compare_in_utc_whatever_the_servers_time_zone(
    db_url: str, app_on: AppOn, admin: User
) -> None:
    server_time_zone(db_url, "Pacific/Kiritimati")  # UTC+14, before the App connects
    app = app_on([f])
    east = datetime(2026, 3, 2, 10, 0, tzinfo=timezone(timedelta(hours=2)))  # 08:00 UTC
    naive = datetime(2026, 3, 2, 12, 0)  # taken as UTC, as SQLite takes it
    for at in (east, naive):
        assert ok_data(app.dispatch(stamp, At(at), user=admin)) is None

    read = ok_data(app.dispatch(before, At(datetime(2026, 3, 3, tzinfo=UTC)), user=admin))
    assert read == [
        (datetime(2026, 3, 2, 8, 0, tzinfo=UTC), datetime(2026, 3, 2, 8, 0)),
        (datetime(2026, 3, 2, 12, 0, tzinfo=UTC), datetime(2026, 3, 2, 12, 0)),
    ]
    assert {at.utcoffset() for at, _plain in read} == {timedelta(0)}  # not +14:00
    # A naive bound is UTC too: 11:00 lies between the two rows.
    assert [at for at, _ in ok_data(app.dispatch(before, At(datetime(2026, 3, 2, 11, 0)), user=admin))] == [
        datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    ]
    # The App's engine, used directly, answers in UTC as well.
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(TzStamp.at).order_by(TzStamp.at)).scalars().all() == [r[0] for r in read]
        assert conn.execute(sa.select(TzStamp.at).order_by(TzStamp.at)).scalars().first().utcoffset() == timedelta(0)
