"""An event (or a JSON column's document) refused for a key or a nesting its column cannot
store names the payload field that held it, as a value's problem does: a key with a NUL
or a lone surrogate was named ``$`` (the key itself is no field of the payload), and so
was a document nested past Python's recursion limit, whose conversion recursed before
any path was known.  The same on both databases; nothing written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, nested_lists, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._tables import events

AppOn = Callable[..., App]


class JpItem(Entity):
    __tablename__ = "jp_item"
    name: Mapped[str] = mapped_column(sa.String(40))


JP_DOCS = sa.Table(
    "jp_docs", Entity.metadata, sa.Column("k", sa.String(10), primary_key=True), sa.Column("doc", sa.JSON)
)


@attrs.frozen
class Tagged:
    note: str
    tags: dict[str, Any]


@attrs.frozen
class Tag:
    note: str
    tags: dict[str, Any]


jp = Feature("jp", projections=[JP_DOCS])
jp.entity(JpItem)
jp.event(Tagged, name="tagged")


@jp.projector(JpItem, Tagged)
def _tagged(row: JpItem, event: Tagged) -> None:
    row.name = event.note


create = jp.write_handler(
    "create",
    jp.pipeline(Tag)
    .create(
        "i", JpItem, data=lambda c: JpItem(name=c.payload.note), event=lambda c: Tagged(c.payload.note, c.payload.tags)
    )
    .return_(lambda c: ok(c.steps["i"].id)),
)
put = jp.write_handler(
    "put",
    jp.pipeline(Tag)
    .unsafe_projection_upsert(JP_DOCS, on=["k"], row=lambda c: {"k": c.payload.note, "doc": c.payload.tags})
    .return_(lambda c: ok(None)),
)

DEEPER_THAN_RECURSION: Any = nested_lists(5000)


def _paths(app: App, handler: Any, tags: dict[str, Any], user: User) -> list[tuple[str, str]]:
    refused = failure_of(app.dispatch(handler, Tag("n", tags), user=user), "validation_error")
    assert isinstance(refused.details, list)
    return [(d["path"], d["column"]) for d in refused.details]


@pytest.mark.parametrize("key", ["a\x00b", "\ud800"], ids=["nul", "lone surrogate"])
def test_an_event_key_it_cannot_store_names_the_field_holding_it(app_on: AppOn, user: User, key: str) -> None:
    app = app_on([jp])
    assert _paths(app, create, {key: 1}, user) == [("$.tags", "kumiko_events.payload")]
    assert _paths(app, put, {key: 1}, user) == [("$.tags", "jp_docs.doc")]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(events)) == 0
        assert conn.scalar(sa.select(sa.func.count()).select_from(JP_DOCS)) == 0


def test_an_event_nested_past_the_recursion_limit_names_the_field_holding_it(app_on: AppOn, user: User) -> None:
    app = app_on([jp])
    tags = {"deep": DEEPER_THAN_RECURSION}
    assert _paths(app, create, tags, user) == [("$.tags", "kumiko_events.payload")]
    assert _paths(app, put, tags, user) == [("$.tags", "jp_docs.doc")]
    held: dict[str, Any] = {}
    held["self"] = held  # holds itself: recurses the same way
    assert _paths(app, create, held, user) == [("$.tags", "kumiko_events.payload")]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(events)) == 0
        assert conn.scalar(sa.select(sa.func.count()).select_from(JP_DOCS)) == 0
    ok_data(app.dispatch(create, Tag("n", {"deep": nested_lists(3)}), user=user))  # the same call, storable
