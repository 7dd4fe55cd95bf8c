"""``c.db``'s ORM ``update(Entity)`` and ``delete(Entity)`` see only the run's tenant, as
its selects do: another tenant's row is a row that does not match (rowcount 0, nothing
changed), on both databases.  They changed and deleted any tenant's rows by id."""

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


class TwNote(Entity):
    __tablename__ = "tw_note"
    text: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class New:
    text: str


@attrs.frozen
class Ref:
    id: uuid.UUID


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("tw")
    f.entity(TwNote)

    def step(name: str, fn: Callable[[Any], object]) -> Any:
        return f.write_handler(name, f.pipeline(Ref).compute("n", fn).return_(lambda c: ok(c.steps["n"])))

    return f, {
        "new": f.write_handler(
            "new",
            f.pipeline(New)
            .create("note", TwNote, data=lambda c: TwNote(text=c.payload.text))
            .return_(lambda c: ok(c.steps["note"].id)),
        ),
        "update": step(
            "update",
            lambda c: c.db.execute(sa.update(TwNote).where(TwNote.id == c.payload.id).values(text="changed")).rowcount,
        ),
        "update_all": step("update_all", lambda c: c.db.execute(sa.update(TwNote).values(text="changed")).rowcount),
        "delete": step("delete", lambda c: c.db.execute(sa.delete(TwNote).where(TwNote.id == c.payload.id)).rowcount),
        "delete_all": step("delete_all", lambda c: c.db.execute(sa.delete(TwNote)).rowcount),
        "by_key": step(
            "by_key", lambda c: c.db.execute(sa.update(TwNote), [{"id": c.payload.id, "text": "changed"}]).rowcount
        ),
        "crossing": step(
            "crossing",
            lambda c: (
                c.db.execute(
                    sa.update(TwNote)
                    .where(TwNote.id == c.payload.id)
                    .values(text="changed")
                    .execution_options(kumiko_all_tenants=True)
                ).rowcount
            ),
        ),
    }


def _texts(app: App) -> dict[uuid.UUID, str]:
    with app.engine.connect() as conn:
        return {i: t for i, t in conn.execute(sa.select(TwNote.__table__.c.id, TwNote.__table__.c.text))}


def test_orm_update_and_delete_leave_another_tenants_rows_alone(app_on: AppOn, make_user: Callable[..., User]) -> None:
    f, h = _feature()
    app = app_on([f])
    a, b = make_user(), make_user()
    mine = ok_data(app.dispatch(h["new"], New("a"), user=a))
    theirs = ok_data(app.dispatch(h["new"], New("b"), user=b))
    for name in ("update", "delete"):
        assert ok_data(app.dispatch(h[name], Ref(theirs), user=a)) == 0
    assert ok_data(app.dispatch(h["update_all"], Ref(mine), user=a)) == 1
    assert _texts(app) == {mine: "changed", theirs: "b"}
    assert ok_data(app.dispatch(h["delete_all"], Ref(mine), user=a)) == 1
    assert _texts(app) == {theirs: "b"}
    # B's own statement changes B's row.
    assert ok_data(app.dispatch(h["update"], Ref(theirs), user=b)) == 1
    assert ok_data(app.dispatch(h["delete"], Ref(theirs), user=b)) == 1
    assert _texts(app) == {}


def test_an_orm_update_by_primary_key_is_refused_and_crossing_is_said(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """An UPDATE by primary key (a list of rows) takes no filter: refused, naming what to
    write instead; ``kumiko_all_tenants`` crosses on purpose."""
    f, h = _feature()
    app = app_on([f])
    a, b = make_user(), make_user()
    theirs = ok_data(app.dispatch(h["new"], New("b"), user=b))
    refused = failure_of(app.dispatch(h["by_key"], Ref(theirs), user=a), "internal_error")
    assert "UnscopedWrite" in refused.message and "update(...).where(...)" in refused.message, refused
    assert "UPDATE tw_note" not in refused.message
    assert _texts(app) == {theirs: "b"}
    assert ok_data(app.dispatch(h["crossing"], Ref(theirs), user=a)) == 1
    assert _texts(app) == {theirs: "changed"}
