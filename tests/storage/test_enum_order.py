"""Ordering by a native ``Enum`` column is the step's refusal on both databases.

PostgreSQL's enum type orders its members as the class declares them (``LOW, HIGH,
MID``), SQLite's text by the names it stores (``HIGH, LOW, MID``): before, ``order_by``,
``<``/``>``/``between`` and ``min``/``max`` of such a column gave other rows on each —
``Task.level > Level.LOW`` found ``HIGH`` and ``MID`` on PostgreSQL, ``MID`` on SQLite.
Now each is the step's refusal (as an uncast ``sum`` of a ``Numeric`` of no scale is),
naming the column and the fix; equality, ``in_`` and an ``Enum``
declared ``native_enum=False`` (text on both, ordered by name on both) are read as before.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"
    MID = "mid"


class EoTask(Entity):
    __tablename__ = "eo_task"
    level: Mapped[Level] = mapped_column(sa.Enum(Level))
    plain: Mapped[Level] = mapped_column(sa.Enum(Level, native_enum=False, name="eo_plain"))


@attrs.frozen
class Add:
    level: Level


@attrs.frozen
class Find:
    how: str


QUERIES: dict[str, Callable[[], Any]] = {
    "order_by": lambda: sa.select(EoTask).order_by(EoTask.level),
    "order_by desc": lambda: sa.select(EoTask).order_by(EoTask.level.desc().nulls_last()),
    "greater": lambda: sa.select(EoTask).where(EoTask.level > Level.LOW),
    "between": lambda: sa.select(EoTask).where(EoTask.level.between(Level.LOW, Level.HIGH)),
    "max": lambda: sa.select(EoTask).where(EoTask.level == sa.select(sa.func.max(EoTask.level)).scalar_subquery()),
    "window": lambda: sa.select(EoTask).where(
        EoTask.id.in_(sa.select(sa.func.first_value(EoTask.id).over(order_by=EoTask.level)))
    ),
}
FINE: dict[str, Callable[[], Any]] = {
    "equal": lambda: sa.select(EoTask).where(EoTask.level == Level.MID),
    "in": lambda: sa.select(EoTask).where(EoTask.level.in_([Level.MID, Level.LOW])),
    "text enum": lambda: sa.select(EoTask).where(EoTask.plain > Level.LOW).order_by(EoTask.plain),
}

f = Feature("eo")
f.entity(EoTask)
add = f.write_handler(
    "add",
    f.pipeline(Add)
    .create("x", EoTask, data=lambda c: EoTask(level=c.payload.level, plain=c.payload.level))
    .return_(lambda c: ok(None)),
)
find = f.query_handler(
    "find",
    f.query_pipeline(Find)
    .find_many("xs", lambda c: {**QUERIES, **FINE}[c.payload.how]())
    .return_(lambda c: ok([x.level.name for x in c.steps["xs"]])),
)


@pytest.mark.parametrize("how", list(QUERIES))
def test_ordering_by_a_native_enum_column_is_refused_on_both(app_on: Callable[..., App], user: User, how: str) -> None:
    app = app_on([f])
    for level in Level:
        ok_data(app.dispatch(add, Add(level), user=user))
    refused = failure_of(
        app.query(find, Find(how), user=user), "internal_error"
    )  # the query's fault, as a read's other refusals
    assert 'read.find_many "xs" raised StepRefused: the query ' in refused.message
    assert "eo_task.level, an Enum: PostgreSQL orders its members as the enum declares them" in refused.message
    assert "native_enum=False" in refused.message


def test_comparing_a_native_enum_for_equality_and_a_text_enum_by_order_read_alike(
    app_on: Callable[..., App], user: User
) -> None:
    app = app_on([f])
    for level in Level:
        ok_data(app.dispatch(add, Add(level), user=user))
    assert ok_data(app.query(find, Find("equal"), user=user)) == ["MID"]
    assert sorted(ok_data(app.query(find, Find("in"), user=user))) == ["LOW", "MID"]
    assert ok_data(app.query(find, Find("text enum"), user=user)) == ["MID"]  # by name: HIGH < LOW < MID
