"""Aggregate writes go through cached Core statements, not the ORM's flush (issue 13).

The row's UPDATE names the version the write was based on, and a row that moved on is
``version_conflict``; the entity object the pipeline holds is the written row; and a
dispatch that sends no SQL begins no transaction and may dispatch again from a step.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import sqlalchemy as sa
from _sql_log import statements
from _support import failure_of, ok_data
from sqlalchemy import inspect
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, fail, ok
from kumiko_typed._tables import events

T = Any


class TcwCounter(Entity):
    __tablename__ = "tcw_counter"
    label: Mapped[str] = mapped_column(sa.String(40))
    count: Mapped[int] = mapped_column(default=0)


COUNTERS: sa.Table = TcwCounter.__table__  # type: ignore[assignment]


@attrs.frozen
class Added:
    n: int


@attrs.frozen
class Target:
    id: uuid.UUID
    n: int = 1


@attrs.frozen
class Label:
    label: str


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("tcw")
    f.entity(TcwCounter)
    f.event(Added)

    @f.projector(TcwCounter, Added)
    def add(row: TcwCounter, event: Added) -> None:
        row.count += event.n

    def by_id(c: T) -> T:
        return sa.select(TcwCounter).where(TcwCounter.id == c.payload.id)

    def moved_behind(c: T) -> bool:
        """Moves the row on behind the loaded object's back, as a concurrent writer would."""
        c.db.execute(sa.update(COUNTERS).where(COUNTERS.c.id == c.payload.id).values(version=COUNTERS.c.version + 5))
        return True

    handlers = {
        "seed": f.write_handler(
            "seed",
            f.pipeline(Label)
            .create("c", TcwCounter, data=lambda c: TcwCounter(label=c.payload.label))
            .return_(lambda c: ok(c.steps["c"].id)),
        ),
        "set": f.write_handler(
            "set",
            f.pipeline(Target)
            .get_one("c", by_id)
            .update(
                "u",
                TcwCounter,
                id=lambda c: c.payload.id,
                changes=lambda c: {"count": c.payload.n},
                version=lambda c: c.steps["c"].version,
            )
            .get_one("again", by_id)
            .return_(
                lambda c: ok(
                    (
                        c.steps["u"].entity is c.steps["c"] is c.steps["again"],
                        c.steps["again"].count,
                        c.steps["u"].version,
                        inspect(c.steps["u"].entity).modified,
                    )
                )
            ),
        ),
        "add": f.write_handler(
            "add",
            f.pipeline(Target)
            .get_one("c", by_id)
            .append_event(TcwCounter, id=lambda c: c.payload.id, event=lambda c: Added(c.payload.n))
            .return_(lambda c: ok((c.steps["c"].count, c.steps["c"].version, inspect(c.steps["c"]).modified))),
        ),
        "raced": f.write_handler(
            "raced",
            f.pipeline(Target)
            .get_one("c", by_id)
            .compute("moved", moved_behind)
            .append_event(TcwCounter, id=lambda c: c.payload.id, event=lambda c: Added(c.payload.n))
            .return_(lambda c: ok(0)),
        ),
        "create-then-add": f.write_handler(
            "create-then-add",
            f.pipeline(Label)
            .create("c", TcwCounter, data=lambda c: TcwCounter(label=c.payload.label))
            .append_event(TcwCounter, id=lambda c: c.steps["c"].id, event=lambda c: Added(3))
            .return_(lambda c: ok((c.steps["c"].entity.count, c.steps["c"].entity.version))),
        ),
    }
    return f, handlers


def _row(app: App, cid: uuid.UUID) -> tuple[Any, ...]:
    with app.engine.connect() as conn:
        row = conn.execute(
            sa.select(COUNTERS.c.label, COUNTERS.c.count, COUNTERS.c.version).where(COUNTERS.c.id == cid)
        )
        return tuple(row.one())


def _events(app: App, cid: uuid.UUID) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).where(events.c.stream_id == cid)).scalar_one())


def _upper(seen: list[str], start: str) -> list[str]:
    return [s.upper() for s in seen if s.upper().startswith(start)]


def test_an_update_is_one_statement_checking_the_version_and_keeps_the_object(app_on: T, admin: User) -> None:
    f, h = _feature()
    app = app_on([f])
    cid = ok_data(app.dispatch(h["seed"], Label("a"), user=admin))
    with statements(app.engine) as seen:
        same, count, version, dirty = ok_data(app.dispatch(h["set"], Target(cid, 7), user=admin))
    # Saved.entity is the object get_one loaded, and a later get_one of the row gives it
    # back as written, with nothing left for a flush
    assert (same, count, version, dirty) == (True, 7, 2, False)
    (update,) = _upper(seen, "UPDATE")
    assert update.startswith("UPDATE TCW_COUNTER SET COUNT=")
    where = update.split(" WHERE ", 1)[1]
    assert ("TCW_COUNTER.ID =" in where) and ("TCW_COUNTER.TENANT_ID =" in where) and ("TCW_COUNTER.VERSION =" in where)
    assert len(_upper(seen, "SELECT TCW_COUNTER")) == 2, seen  # the two get_ones, no locking re-read
    assert _row(app, cid) == ("a", 7, 2)


def test_an_event_writes_only_what_its_projector_changed(app_on: T, admin: User) -> None:
    f, h = _feature()
    app = app_on([f])
    cid = ok_data(app.dispatch(h["seed"], Label("a"), user=admin))
    with statements(app.engine) as seen:
        assert app.dispatch(h["add"], Target(cid, 4), user=admin) == Ok((4, 2, False))
    (update,) = _upper(seen, "UPDATE")
    assigned = update.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert sorted(part.split("=")[0] for part in assigned.split(", ")) == ["COUNT", "UPDATED_AT", "VERSION"]
    assert _row(app, cid) == ("a", 4, 2)


def test_a_row_moved_on_behind_the_loaded_object_is_a_version_conflict(app_on: T, admin: User) -> None:
    """The version in the UPDATE's WHERE catches a write the object does not know of;
    without it the write would silently overwrite the row."""
    f, h = _feature()
    app = app_on([f])
    cid = ok_data(app.dispatch(h["seed"], Label("a"), user=admin))
    conflict = failure_of(app.dispatch(h["raced"], Target(cid, 2), user=admin))
    assert conflict.code == "version_conflict"
    assert conflict.details == {"entity_id": str(cid), "expected_version": 1, "current_version": 6}
    assert _row(app, cid) == ("a", 0, 1)  # rolled back: the row, and the event with it
    assert _events(app, cid) == 1


def test_a_created_row_is_the_object_a_later_write_of_the_pipeline_uses(app_on: T, admin: User) -> None:
    f, h = _feature()
    app = app_on([f])
    with statements(app.engine) as seen:
        assert app.dispatch(h["create-then-add"], Label("b"), user=admin) == Ok((3, 2))
    assert len(_upper(seen, "INSERT INTO TCW_COUNTER")) == 1
    assert not _upper(seen, "SELECT TCW_COUNTER"), seen  # the created object is used as it is
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(COUNTERS.c.label, COUNTERS.c.count, COUNTERS.c.version)).one() == ("b", 3, 2)


def test_a_dispatch_without_sql_begins_no_transaction(app_on: T, admin: User) -> None:
    f: Feature[Any] = Feature("tcw-nosql")
    h = f.write_handler(
        "h", f.pipeline(Label).compute("n", lambda c: len(c.payload.label)).return_(lambda c: ok(c.steps["n"]))
    )
    app = app_on([f])
    begun: list[object] = []
    sa.event.listen(app._sessions, "after_transaction_create", lambda session, tx: begun.append(tx))
    with statements(app.engine) as seen:
        assert app.dispatch(h, Label("abc"), user=admin) == Ok(3)
    assert (seen, begun) == ([], [])


def test_a_step_may_dispatch_again_with_a_session_of_its_own(app_on: T, admin: User) -> None:
    """The thread's session is taken while a dispatch runs: a dispatch from inside a step
    gets another, whose commit leaves the outer run's transaction alone — the outer's
    failure still rolls its own work back."""
    f, _ = _feature()
    count = f.write_handler(
        "count", f.pipeline(Label).compute("n", lambda c: len(c.payload.label)).return_(lambda c: ok(c.steps["n"]))
    )
    app: App | None = None

    def dispatch_inner(c: T) -> int:
        assert app is not None
        return ok_data(app.dispatch(count, Label("inner"), user=c.user))  # type: ignore[no-any-return]

    def outer(fails: bool) -> Any:
        return f.write_handler(
            f"outer-{fails}",
            f.pipeline(Label)
            .create("c", TcwCounter, data=lambda c: TcwCounter(label=c.payload.label))
            .compute("inner", dispatch_inner)
            .guard(lambda c: not fails, otherwise=lambda c: fail("unprocessable", "no"))
            .append_event(TcwCounter, id=lambda c: c.steps["c"].id, event=lambda c: Added(c.steps["inner"]))
            .return_(lambda c: ok(c.steps["c"].id)),
        )

    failing, passing = outer(True), outer(False)
    app = app_on([f])
    assert app.dispatch(count, Label("first"), user=admin) == Ok(5)  # the thread's session is made
    assert failure_of(app.dispatch(failing, Label("gone"), user=admin)).code == "unprocessable"
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(COUNTERS.c.label)).all() == []
    cid = ok_data(app.dispatch(passing, Label("outer"), user=admin))
    assert _row(app, cid) == ("outer", 5, 2)
