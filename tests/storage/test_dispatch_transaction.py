"""A dispatch runs in a connection-level transaction of its own (``_connection.Direct``),
not in an ORM ``Session`` transaction; ``c.db`` used after the framework's first statement
joins that transaction: it sees the dispatch's uncommitted writes, commits with an ``Ok``
and rolls back with a ``Failure`` or an exception; ``c.db`` used first keeps the
session's own transaction, which the framework's statements then run in.  On SQLite and
PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data
from sqlalchemy.orm import Mapped, Session, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, fail, ok

AppOn = Callable[..., App]


class TdtCounter(Entity):
    __tablename__ = "tdt_counter"
    count: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Bump:
    id: uuid.UUID
    outcome: str = "ok"  # "ok", "fail" or "raise"


@attrs.frozen
class New:
    pass


def _boom() -> Any:
    raise RuntimeError("a resolver's bug")


def _feature(notes: sa.Table) -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("tdt")
    f.entity(TdtCounter)
    by_id = lambda c: sa.select(TdtCounter).where(TdtCounter.id == c.payload.id)  # noqa: E731

    def outcome(c: Any) -> Any:
        if c.payload.outcome == "raise":
            return _boom()
        if c.payload.outcome == "fail":
            return fail("refused", "told to fail")
        return ok((c.steps["seen"], c.steps["saved"].version))

    handlers = {
        "new": f.write_handler(
            "new",
            f.pipeline(New).create("n", TdtCounter, data=lambda c: TdtCounter()).return_(lambda c: ok(c.steps["n"].id)),
        ),
        # c.db after the framework's read and write: it must see the write and share its fate.
        "after": f.write_handler(
            "after",
            f.pipeline(Bump)
            .get_one("row", by_id)
            .update(
                "saved",
                TdtCounter,
                id=lambda c: c.payload.id,
                changes=lambda c: {"count": c.steps["row"].count + 1},
                version=lambda c: c.steps["row"].version,
            )
            .compute("seen", lambda c: c.db.scalar(sa.select(TdtCounter.count).where(TdtCounter.id == c.payload.id)))
            .compute("noted", lambda c: c.db.execute(notes.insert().values(text=f"after {c.steps['seen']}")))
            .return_(outcome),
        ),
        # c.db first: the session's own transaction, which the framework's statements join.
        "before": f.write_handler(
            "before",
            f.pipeline(Bump)
            .compute("noted", lambda c: c.db.execute(notes.insert().values(text="before")))
            .get_one("row", by_id)
            .update(
                "saved",
                TdtCounter,
                id=lambda c: c.payload.id,
                changes=lambda c: {"count": c.steps["row"].count + 1},
                version=lambda c: c.steps["row"].version,
            )
            .compute("seen", lambda c: c.db.scalar(sa.select(TdtCounter.count).where(TdtCounter.id == c.payload.id)))
            .return_(outcome),
        ),
        "plain": f.write_handler(
            "plain",
            f.pipeline(Bump)
            .get_one("row", by_id)
            .update(
                "saved",
                TdtCounter,
                id=lambda c: c.payload.id,
                changes=lambda c: {"count": 5},
                version=lambda c: c.steps["row"].version,
            )
            .return_(lambda c: ok(c.steps["saved"].version)),
        ),
    }
    return f, handlers


def _count(app: App, row: uuid.UUID) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(TdtCounter.count).where(TdtCounter.id == row)) or 0)


@pytest.mark.parametrize("handler", ["after", "before"])
def test_c_db_shares_the_dispatchs_transaction(
    app_on: AppOn, make_user: Callable[..., User], notes: sa.Table, note_texts: Callable[[App], list[str]], handler: str
) -> None:
    f, h = _feature(notes)
    app = app_on([f])
    notes.create(app.engine, checkfirst=True)
    alice = make_user()
    row = ok_data(app.dispatch(h["new"], New(), user=alice))
    assert app.dispatch(h[handler], Bump(row), user=alice) == Ok((1, 2))
    assert _count(app, row) == 1
    committed = note_texts(app)
    assert committed == (["after 1"] if handler == "after" else ["before"])
    failed = app.dispatch(h[handler], Bump(row, "fail"), user=alice)
    assert not isinstance(failed, Ok) and failed.code == "refused"
    raised = app.dispatch(h[handler], Bump(row, "raise"), user=alice)
    assert not isinstance(raised, Ok) and raised.code == "internal_error"
    assert (_count(app, row), note_texts(app)) == (1, committed)  # neither the write nor c.db's insert
    assert app.dispatch(h[handler], Bump(row), user=alice) == Ok((2, 3))


def test_a_read_and_write_dispatch_begins_no_orm_transaction(
    app_on: AppOn, make_user: Callable[..., User], notes: sa.Table
) -> None:
    """The common dispatch (read, write, no ``c.db``) commits its own connection: the
    ORM's transaction (begin, commit, close of a ``SessionTransaction``) is not paid."""
    f, h = _feature(notes)
    app = app_on([f])
    notes.create(app.engine, checkfirst=True)
    alice = make_user()
    row = ok_data(app.dispatch(h["new"], New(), user=alice))
    begun: list[object] = []

    def record(session: Session, transaction: object, connection: object) -> None:
        begun.append(transaction)

    sa.event.listen(Session, "after_begin", record)
    try:
        assert app.dispatch(h["plain"], Bump(row), user=alice) == Ok(2)
    finally:
        sa.event.remove(Session, "after_begin", record)
    assert begun == []
    assert _count(app, row) == 5
