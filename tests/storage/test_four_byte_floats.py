"""A float column declared with 4 bytes (``REAL``, ``Float(precision=24)``) holds what
SQLite's 8-byte REAL holds, on PostgreSQL too.  As PostgreSQL's ``real`` it kept 1/3 as
0.33333334 and 16777217.0 as 16777216.0 — the row no longer equalled its event, so a
rebuild's verify found it changed right after the write, and ``r == 1/3`` matched on SQLite
only — and it refused 1e39, which SQLite stored.  On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.schema import CreateTable

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class FbGauge(Entity):
    __tablename__ = "fb_gauge"
    real: Mapped[float] = mapped_column(sa.REAL)
    narrow: Mapped[float] = mapped_column(sa.Float(precision=24))
    wide: Mapped[float] = mapped_column(sa.Float(precision=25))


@attrs.frozen
class Put:
    value: float


gauges = Feature("fb")
gauges.entity(FbGauge)
put = gauges.write_handler(
    "put",
    gauges.pipeline(Put)
    .create("g", FbGauge, data=lambda c: FbGauge(real=c.payload.value, narrow=c.payload.value, wide=c.payload.value))
    .return_(lambda c: ok(None)),
)
equal = gauges.query_handler(
    "equal",
    gauges.query_pipeline(Put)
    .find_many(
        "r", lambda c: sa.select(FbGauge).where(FbGauge.real == c.payload.value, FbGauge.narrow == c.payload.value)
    )
    .return_(lambda c: ok([(g.real, g.narrow, g.wide) for g in c.steps["r"]])),
)

VALUES = (1 / 3, 16777217.0, 1e39, 0.1)


def test_four_byte_floats_read_back_as_written_and_match_their_events(app_on: AppOn, admin: User) -> None:
    app = app_on([gauges])
    for value in VALUES:
        ok_data(app.dispatch(put, Put(value), user=admin))
    for value in VALUES:
        assert ok_data(app.query(equal, Put(value), user=admin)) == [(value, value, value)]
    report = ok_data(app.rebuild_projection(FbGauge, user=admin, verify=True))
    assert report.matches and report.streams == len(VALUES)


def test_only_four_byte_float_columns_are_widened(app_on: AppOn) -> None:
    """``FLOAT(25)`` and wider is PostgreSQL's double already: left as declared."""
    app = app_on([gauges])
    ddl = str(CreateTable(FbGauge.__table__).compile(app.engine))  # type: ignore[arg-type]
    if app.engine.dialect.name == "postgresql":
        assert "real DOUBLE PRECISION NOT NULL" in ddl and "narrow DOUBLE PRECISION NOT NULL" in ddl
        assert "wide FLOAT(25) NOT NULL" in ddl
    else:
        assert "DOUBLE" not in ddl


def test_a_cast_to_a_four_byte_float_keeps_eight_bytes(app_on: AppOn) -> None:
    """The widening is the engine's type compiler's, so a ``cast`` to ``REAL`` answers as
    on SQLite too (it was PostgreSQL's ``real``: 1/3 came back as 0.3333333432674408)."""
    app = app_on([gauges])
    with app.engine.connect() as conn:
        for type_ in (sa.REAL(), sa.Float(precision=24)):
            assert conn.scalar(sa.select(sa.cast(sa.literal(1 / 3, sa.Float()), type_))) == 1 / 3
