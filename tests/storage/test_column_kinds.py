"""Columns beyond text and numbers, on both databases: an ``Interval`` and a
``LargeBinary`` column are written, updated, read back and replayed from their events; a
value an ``Enum``, ``Boolean``, ``LargeBinary`` or ``Interval`` column cannot hold is a
``validation_error`` naming the column, and nothing is written.

Before, a create or update of an entity with a ``timedelta`` or ``bytes`` column was an
``internal_error`` (its event payload had no JSON for them); a text that is none of an
enum's values was stored by SQLite and refused by PostgreSQL, and the row SQLite kept
could never be read again (``LookupError``); a boolean column given ``"yes"`` was an
``internal_error`` from deep inside the statement."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


class CkPart(Entity):
    __tablename__ = "ck_part"
    took: Mapped[timedelta | None] = mapped_column(sa.Interval, nullable=True, default=None)
    blob: Mapped[bytes | None] = mapped_column(sa.LargeBinary, nullable=True, default=None)
    size: Mapped[Size | None] = mapped_column(sa.Enum(Size), nullable=True, default=None)
    fragile: Mapped[bool | None] = mapped_column(sa.Boolean, nullable=True, default=None)


@attrs.frozen
class Make:
    seconds: float
    blob: str


@attrs.frozen
class Change:
    id: uuid.UUID
    seconds: float


@attrs.frozen
class Raw:
    """Sets one column to a value no payload field could carry (a test's stand-in for a
    compute step's mistake)."""

    column: str
    case: int


@attrs.frozen
class BySize:
    size: str


parts = Feature("ck")
parts.entity(CkPart)
make = parts.write_handler(
    "make",
    parts.pipeline(Make)
    .create(
        "part",
        CkPart,
        data=lambda c: CkPart(took=timedelta(seconds=c.payload.seconds), blob=c.payload.blob.encode(), size=Size.LARGE),
    )
    .return_(lambda c: ok(c.steps["part"].id)),
)
change = parts.write_handler(
    "change",
    parts.pipeline(Change)
    .update(
        "part",
        CkPart,
        id=lambda c: c.payload.id,
        changes=lambda c: {"took": timedelta(seconds=c.payload.seconds), "blob": b"\x00\xff" * 3},
        skip_optimistic_lock=True,
    )
    .return_(lambda c: ok(None)),
)
UNFIT: dict[str, list[Any]] = {
    "size": ["MEDIUM", "l", 3],
    "fragile": ["yes", 2, None.__class__],
    "blob": ["text", 7],
    "took": [5, timedelta(days=-800_000), timedelta(days=3_000_000)],
}
raw = parts.write_handler(
    "raw",
    parts.pipeline(Raw)
    .create("part", CkPart, data=lambda c: CkPart(**{c.payload.column: UNFIT[c.payload.column][c.payload.case]}))
    .return_(lambda c: ok(None)),
)
by_size = parts.query_handler(
    "by_size",
    parts.query_pipeline(BySize)
    .find_many("parts", lambda c: sa.select(CkPart).where(CkPart.size == c.payload.size))
    .return_(lambda c: ok(len(c.steps["parts"]))),
)


def _row(app: App, part: uuid.UUID) -> dict[str, object]:
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(CkPart.took, CkPart.blob).where(CkPart.id == part)).one()
    return {"took": row.took, "blob": row.blob}


def test_interval_and_binary_columns_are_written_updated_and_replayed(app_on: Callable[..., App], user: User) -> None:
    app = app_on([parts])
    part = ok_data(app.dispatch(make, Make(90061.000001, "héllo"), user=user))
    assert _row(app, part) == {"took": timedelta(days=1, seconds=3661, microseconds=1), "blob": "héllo".encode()}
    ok_data(app.dispatch(change, Change(part, -0.5), user=user))
    assert _row(app, part) == {"took": timedelta(seconds=-0.5), "blob": b"\x00\xff" * 3}

    report = ok_data(app.rebuild_projection(CkPart, user=user, verify=True))
    assert (report.streams, report.changed, report.matches) == (1, {}, True), report
    with app.engine.begin() as conn:
        conn.execute(sa.update(CkPart.__table__).values(took=timedelta(0), blob=b""))
    assert ok_data(app.rebuild_projection(CkPart, user=user)).changed == {part: ("took", "blob")}
    assert _row(app, part) == {"took": timedelta(seconds=-0.5), "blob": b"\x00\xff" * 3}


@pytest.mark.parametrize(
    ("column", "case", "message"),
    [
        ("size", 0, "must be one of SMALL, LARGE"),
        ("size", 1, "must be one of SMALL, LARGE"),  # a value, not the name SQLAlchemy stores
        ("size", 2, "must be one of SMALL, LARGE"),
        ("fragile", 0, "must be true or false"),
        ("fragile", 1, "must be true or false"),
        ("fragile", 2, "must be true or false"),
        ("blob", 0, "must be bytes"),
        ("blob", 1, "must be bytes"),
        ("took", 0, "must be a timedelta"),
        ("took", 1, "must be between -719162 and 2932896 days"),
        ("took", 2, "must be between -719162 and 2932896 days"),
    ],
)
def test_a_value_the_column_cannot_hold_is_refused_alike(
    app_on: Callable[..., App], user: User, column: str, case: int, message: str
) -> None:
    app = app_on([parts])
    refused = failure_of(app.dispatch(raw, Raw(column, case), user=user), "validation_error")
    assert refused.details == [
        {"path": "$", "message": message, "column": f"ck_part.{column}", "step": '0 aggregate.create "part"'}
    ]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(CkPart.__table__)) == 0


def test_a_read_comparing_an_enum_with_none_of_its_values_is_refused_alike(
    app_on: Callable[..., App], user: User
) -> None:
    """PostgreSQL's enum type refuses the text; SQLite found no row."""
    app = app_on([parts])
    ok_data(app.dispatch(make, Make(1, "x"), user=user))
    assert ok_data(app.query(by_size, BySize("LARGE"), user=user)) == 1
    refused = failure_of(app.query(by_size, BySize("HUGE"), user=user), "validation_error")
    assert refused.details[0]["path"] == "$.size"
    assert refused.details[0]["message"] == "must be one of SMALL, LARGE"
