"""An event's value that would not read back is reported at the payload field it came from,
whatever the key of a dict on the way: a key such as ``a-b``, ``a b`` or ``a]b`` was
written into the path as it is, could not be parsed back, and the detail named ``$`` —
the caller was not told which field to fix.  The same on both databases."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class FkDoc(Entity):
    __tablename__ = "fk_doc"
    name: Mapped[str] = mapped_column(sa.String(20))


@attrs.frozen
class Tagged:
    meta: dict[str, Any]
    at: dict[str, dt.datetime]


@attrs.frozen
class Tag:
    id: uuid.UUID
    meta: dict[str, Any] = attrs.Factory(dict)
    at: dict[str, dt.datetime] = attrs.Factory(dict)


fk = Feature("fk")
fk.entity(FkDoc)
fk.event(Tagged, name="tagged")


@fk.projector(FkDoc, Tagged)
def _apply(row: FkDoc, event: Tagged) -> None:
    row.name = "tagged"


new = fk.write_handler(
    "new",
    fk.pipeline(Tag).create("doc", FkDoc, data=lambda c: FkDoc(name="new")).return_(lambda c: ok(c.steps["doc"].id)),
)
tag = fk.write_handler(
    "tag",
    fk.pipeline(Tag)
    .append_event(FkDoc, id=lambda c: c.payload.id, event=lambda c: Tagged(c.payload.meta, c.payload.at))
    .return_(lambda c: ok(None)),
)
NAIVE = dt.datetime(2024, 1, 1, 12, 0)


@pytest.mark.parametrize(
    ("meta", "at", "path"),
    [
        ({"a-b": Decimal("1")}, {}, "$.meta.a-b"),
        ({"a b": Decimal("1")}, {}, "$.meta.a b"),
        ({"x": {"a]b": Decimal("1")}}, {}, "$.meta.x.a]b"),
        ({"x": {"a.b": Decimal("1")}}, {}, "$.meta.x.a.b"),
        ({"a": {"b": 1}, "a.b": Decimal("1")}, {}, "$.meta.a.b"),  # the longer key, as it holds the value
        ({}, {"a]b": NAIVE}, "$.at.a]b"),
        ({}, {"a-b": NAIVE}, "$.at.a-b"),
    ],
)
def test_a_value_that_would_not_read_back_names_its_field_whatever_its_keys(
    app_on: AppOn, user: User, meta: dict[str, Any], at: dict[str, dt.datetime], path: str
) -> None:
    app = app_on([fk])
    doc = ok_data(app.dispatch(new, Tag(uuid.uuid4()), user=user))
    refused = failure_of(app.dispatch(tag, Tag(doc, meta, at), user=user), "validation_error")
    assert isinstance(refused.details, list)
    assert [d["path"] for d in refused.details] == [path], refused.details
    assert len(ok_data(app.read_stream(FkDoc, doc, user=user))) == 1  # nothing appended
