"""Tenant edges probed from outside, on both databases: a create with an id another
tenant's aggregate holds, a projection upsert whose key another tenant's row holds, and
(held before, kept here) another tenant's id read, updated, queried and rebuilt."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok

AppOn = Callable[..., App]


class TeItem(Entity):
    __tablename__ = "te_item"
    name: Mapped[str] = mapped_column(sa.String(40))


#: A read model keyed by a name that is unique across tenants (not made per tenant).
te_board = sa.Table(
    "te_board",
    Entity.metadata,
    sa.Column("name", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.Uuid, nullable=False),
    sa.Column("hits", sa.Integer, nullable=False),
)


@attrs.frozen
class New:
    name: str
    id: uuid.UUID | None = None


@attrs.frozen
class Ref:
    id: uuid.UUID


@attrs.frozen
class Hit:
    name: str
    hits: int


def _made(c: Any) -> TeItem:
    item = TeItem(name=c.payload.name)
    if c.payload.id is not None:
        item.id = c.payload.id  # an id the client chose
    return item


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("te", projections=[te_board])
    f.entity(TeItem)
    return f, {
        "new": f.write_handler(
            "new", f.pipeline(New).create("item", TeItem, data=_made).return_(lambda c: ok(c.steps["item"].id))
        ),
        "get": f.write_handler(
            "get",
            f.pipeline(Ref)
            .get_one("item", lambda c: sa.select(TeItem).where(TeItem.id == c.payload.id))
            .return_(lambda c: ok(c.steps["item"].name)),
        ),
        "rename": f.write_handler(
            "rename",
            f.pipeline(Ref)
            .update(
                "item", TeItem, id=lambda c: c.payload.id, changes=lambda c: {"name": "x"}, skip_optimistic_lock=True
            )
            .return_(lambda c: ok(1)),
        ),
        "look": f.query_handler(
            "look",
            f.query_pipeline(Ref)
            .find_one("item", lambda c: sa.select(TeItem).where(TeItem.id == c.payload.id))
            .return_(lambda c: ok(None if c.steps["item"] is None else c.steps["item"].name)),
        ),
        "hit": f.write_handler(
            "hit",
            f.pipeline(Hit)
            .unsafe_projection_upsert(
                te_board,
                on=["name"],
                row=lambda c: {"name": c.payload.name, "tenant_id": c.tenant_id, "hits": c.payload.hits},
            )
            .return_(lambda c: ok(1)),
        ),
    }


def _board(app: App) -> dict[str, tuple[uuid.UUID, int]]:
    with app.engine.connect() as conn:
        return {r.name: (r.tenant_id, r.hits) for r in conn.execute(sa.select(te_board))}


def _setup(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User, User]:
    f, h = _feature()
    return app_on([f]), h, make_user(), make_user()


def test_a_create_with_an_id_another_tenant_holds_says_only_that_the_id_is_taken(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """It said "is at version None, not 0"; the own tenant's id still says its version."""
    app, h, a, b = _setup(app_on, make_user)
    theirs = ok_data(app.dispatch(h["new"], New("b"), user=b))
    mine = ok_data(app.dispatch(h["new"], New("a"), user=a))
    taken = failure_of(app.dispatch(h["new"], New("a2", theirs), user=a), "version_conflict")
    assert taken.message == f"TeItem {theirs}: the id is taken; create it with another id"
    assert taken.details == {"entity_id": str(theirs), "expected_version": 0, "current_version": None}
    own = failure_of(app.dispatch(h["new"], New("a2", mine), user=a), "version_conflict")
    assert own.message == f"TeItem {mine} is at version 1, not 0"
    assert ok_data(app.dispatch(h["get"], Ref(theirs), user=b)) == "b"


def test_a_projection_upsert_does_not_take_over_another_tenants_row(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """The key is unique across tenants: B's upsert of A's key was an update of A's row
    (its tenant and values replaced).  It is the unique_violation an aggregate's global
    unique constraint gives; A's own upsert still updates."""
    app, h, a, b = _setup(app_on, make_user)
    assert ok_data(app.dispatch(h["hit"], Hit("tea", 1), user=a)) == 1
    clash = failure_of(app.dispatch(h["hit"], Hit("tea", 99), user=b), "unique_violation")
    assert clash.details == {"entity": "te_board", "columns": ["name"], "path": "$.name"}
    assert clash.http_status == 409
    assert _board(app) == {"tea": (a.tenant_id, 1)}
    assert ok_data(app.dispatch(h["hit"], Hit("tea", 2), user=a)) == 1
    assert ok_data(app.dispatch(h["hit"], Hit("pot", 5), user=b)) == 1
    assert _board(app) == {"tea": (a.tenant_id, 2), "pot": (b.tenant_id, 5)}


def test_another_tenants_id_reads_updates_and_queries_as_a_missing_one(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    app, h, a, b = _setup(app_on, make_user)
    theirs = ok_data(app.dispatch(h["new"], New("b"), user=b))
    missing = uuid.uuid4()
    assert failure_of(app.dispatch(h["get"], Ref(theirs), user=a), "not_found") == failure_of(
        app.dispatch(h["get"], Ref(missing), user=a)
    )
    renamed = failure_of(app.dispatch(h["rename"], Ref(theirs), user=a), "not_found")
    assert renamed.message == f"TeItem {theirs} not found"
    assert (
        renamed.message.replace(str(theirs), str(missing))
        == failure_of(app.dispatch(h["rename"], Ref(missing), user=a)).message
    )
    assert ok_data(app.query(h["look"], Ref(theirs), user=a)) is None
    assert ok_data(app.query(h["look"], Ref(theirs), user=b)) == "b"
    stream = failure_of(app.read_stream(TeItem, theirs, user=a), "not_found")
    assert stream.message == f"TeItem {theirs} not found"


def test_a_tenants_rebuild_leaves_another_tenants_rows_alone(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app, h, a, b = _setup(app_on, make_user)
    mine = ok_data(app.dispatch(h["new"], New("a"), user=a))
    theirs = ok_data(app.dispatch(h["new"], New("b"), user=b))
    table = TeItem.__table__
    with app.engine.begin() as conn:  # both rows drift from their streams
        conn.execute(sa.update(table).values(name="drifted"))
    report = ok_data(app.rebuild_projection(TeItem, user=a))
    assert (report.streams, dict(report.changed), report.missing, report.extra) == (1, {mine: ("name",)}, (), ())
    with app.engine.connect() as conn:
        names = dict(conn.execute(sa.select(table.c.id, table.c.name)).all())
    assert names == {mine: "a", theirs: "drifted"}
    denied = failure_of(app.rebuild_projection(TeItem, user=a, tenant=b.tenant_id), "access_denied")
    assert str(b.tenant_id) not in denied.message
