"""A JSON column given a value ``json.dumps`` cannot write (a Decimal, a date, a set, bytes,
an Enum member, a mapping that is no dict, a tuple key) is a ``validation_error`` naming
the column and the place in the document, on create and on update, and nothing is
written.  Before, the INSERT raised inside SQLAlchemy: an ``internal_error``.  Both
databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from enum import Enum
from types import MappingProxyType
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok


class Colour(Enum):
    RED = "red"


class JuDoc(Entity):
    __tablename__ = "ju_doc"
    body: Mapped[object] = mapped_column(sa.JSON, nullable=True, default=None)


#: Values by name: the payload names one (a payload cannot carry these types).
UNWRITABLE: dict[str, tuple[object, str, str]] = {
    "decimal": ({"price": Decimal("1.10")}, "$.price", "is of type Decimal"),
    "date": ([1, date(2020, 1, 2)], "$[1]", "is of type date"),
    "set": ({"tags": {"a"}}, "$.tags", "is of type set"),
    "bytes": (b"raw", "$", "is of type bytes"),
    "enum": ({"c": Colour.RED}, "$.c", "is of type Colour"),
    "mapping": ({"m": MappingProxyType({"x": 1})}, "$.m", "is of type mappingproxy"),
    "tuple key": ({(1, 2): "x"}, "$", "has a key of type tuple"),
}


@attrs.frozen
class Put:
    kind: str


@attrs.frozen
class Change:
    id: uuid.UUID
    version: int
    kind: str


def _value(kind: str) -> Any:
    return UNWRITABLE[kind][0] if kind in UNWRITABLE else {"fine": [1, "two", None]}


ju = Feature("ju")
ju.entity(JuDoc)
put = ju.write_handler(
    "put",
    ju.pipeline(Put)
    .create("doc", JuDoc, data=lambda c: JuDoc(body=_value(c.payload.kind)))
    .return_(lambda c: ok(c.steps["doc"].id)),
)
change = ju.write_handler(
    "change",
    ju.pipeline(Change)
    .update(
        "doc",
        JuDoc,
        id=lambda c: c.payload.id,
        version=lambda c: c.payload.version,
        changes=lambda c: {"body": _value(c.payload.kind)},
    )
    .return_(lambda c: ok(c.steps["doc"].version)),
)


def _counts(app: App) -> tuple[int, int]:
    with app.engine.connect() as conn:
        docs = conn.scalar(sa.select(sa.func.count()).select_from(JuDoc.__table__))
        events = conn.scalar(sa.text("SELECT count(*) FROM kumiko_events"))
    return int(docs or 0), int(events or 0)


@pytest.mark.parametrize("kind", list(UNWRITABLE))
def test_an_unwritable_json_value_is_a_validation_error_and_nothing_is_written(
    app_on: Callable[..., App], user: User, kind: str
) -> None:
    app = app_on([ju])
    _, where, said = UNWRITABLE[kind]
    failure = failure_of(app.dispatch(put, Put(kind), user=user), "validation_error")
    assert said in failure.message and "ju_doc.body" in str(failure.details)
    assert (where == "$") == ("(at " not in failure.message)
    if where != "$":
        assert f"(at {where})" in failure.message
    assert _counts(app) == (0, 0)

    doc_id = ok_data(app.dispatch(put, Put("fine"), user=user))
    before = _counts(app)
    failure = failure_of(app.dispatch(change, Change(doc_id, 1, kind), user=user), "validation_error")
    assert said in failure.message
    assert _counts(app) == before
    # The row was not touched: still at version 1, its body as it was (so this changes nothing).
    assert ok_data(app.dispatch(change, Change(doc_id, 1, "fine"), user=user)) == 1
