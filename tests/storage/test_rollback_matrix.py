"""Rollback matrix (DESIGN §3.1, §5): for every data step kind, a pipeline that runs the step
and fails right after — a compute step that raises, or return_ giving fail(...) — leaves every
table exactly as it was, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import said
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, fail, ok
from kumiko_typed._tables import events

AppOn = Callable[..., App]


class T3rItem(Entity):
    __tablename__ = "t3r_item"
    sku: Mapped[str] = mapped_column(sa.String(40), unique=True)
    qty: Mapped[int] = mapped_column(default=0)


class _Projections(MappedAsDataclass, DeclarativeBase):
    pass


class T3rLine(_Projections):
    """A non-aggregate read model (mapped, on its own metadata)."""

    __tablename__ = "t3r_line"
    key: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    qty: Mapped[int]


LINES: sa.Table = T3rLine.__table__  # type: ignore[assignment]


@attrs.frozen
class Bumped:
    delta: int


@attrs.frozen
class Target:
    id: uuid.UUID


@attrs.frozen
class Seed:
    sku: str
    qty: int


KINDS = [
    "find_one",
    "get_one",
    "find_many",
    "create",
    "update",
    "append_event",
    "unsafe_projection_upsert",
    "unsafe_projection_delete",
    "call_feature",
]
WRITE_KINDS = [k for k in KINDS if k not in ("find_one", "get_one", "find_many")]


def _qty(c: Any, sku: str) -> int | None:
    """The item's quantity as this transaction sees it (a column read: never a stale identity)."""
    value: int | None = c.db.execute(sa.select(T3rItem.qty).where(T3rItem.sku == sku)).scalar()
    return value


def _line(c: Any, key: str) -> int | None:
    value: int | None = c.db.execute(sa.select(LINES.c.qty).where(LINES.c.key == key)).scalar()
    return value


def _item_count(c: Any) -> int:
    return int(c.db.execute(sa.select(sa.func.count()).select_from(T3rItem)).scalar_one())


def _build(kind: str, f: Feature[Any], inner: Any) -> tuple[Callable[[Any], Any], Callable[[Any], bool]]:
    """(add the step of ``kind`` to a pipeline, probe: did the step take effect in this transaction?)"""
    by_sku = lambda c: sa.select(T3rItem).where(T3rItem.sku == "seeded")  # noqa: E731
    steps: dict[str, tuple[Callable[[Any], Any], Callable[[Any], bool]]] = {
        "find_one": (
            lambda p: p.find_one("r", by_sku),
            lambda c: c.steps["r"] is not None and c.steps["r"].qty == 10,
        ),
        "get_one": (
            lambda p: p.get_one("r", by_sku),
            lambda c: c.steps["r"].qty == 10,
        ),
        "find_many": (
            lambda p: p.find_many("r", lambda c: sa.select(T3rItem), limit=10),
            lambda c: [i.sku for i in c.steps["r"]] == ["seeded"],
        ),
        "create": (
            lambda p: p.create("r", T3rItem, data=lambda c: T3rItem(sku="fresh", qty=1)),
            lambda c: _item_count(c) == 2 and _qty(c, "fresh") == 1,
        ),
        "update": (
            lambda p: p.update("r", T3rItem, id=lambda c: c.payload.id, changes=lambda c: {"qty": 99}, version=1),
            lambda c: _qty(c, "seeded") == 99,
        ),
        "append_event": (
            lambda p: p.append_event(T3rItem, id=lambda c: c.payload.id, event=lambda c: Bumped(5)),
            lambda c: _qty(c, "seeded") == 15,
        ),
        "unsafe_projection_upsert": (
            lambda p: p.unsafe_projection_upsert(
                T3rLine, on=["key"], row=lambda c: {"key": "seeded", "qty": 77}
            ).unsafe_projection_upsert(T3rLine, on=["key"], row=lambda c: {"key": "fresh", "qty": 1}),
            lambda c: _line(c, "seeded") == 77 and _line(c, "fresh") == 1,
        ),
        "unsafe_projection_delete": (
            lambda p: p.unsafe_projection_delete(T3rLine, where=lambda c: T3rLine.key == "seeded"),
            lambda c: _line(c, "seeded") is None,
        ),
        "call_feature": (
            lambda p: p.call_feature("r", inner, payload=lambda c: c.payload),
            lambda c: _item_count(c) == 2 and _qty(c, "seeded") == 13 and _line(c, "seeded") == 13,
        ),
    }
    return steps[kind]


def _feature() -> tuple[Feature[Any], Any, Any]:
    """The feature, its seed handler and the inner handler that call_feature calls."""
    f: Feature[Any] = Feature("t3r", requires=["call_feature"], projections=[T3rLine])
    f.entity(T3rItem)
    f.event(Bumped, name="t3r-bumped")

    @f.projector(T3rItem, Bumped)
    def apply(row: T3rItem, event: Bumped) -> None:
        row.qty += event.delta

    seed = f.write_handler(
        "seed",
        f.pipeline(Seed)
        .create("item", T3rItem, data=lambda c: T3rItem(sku=c.payload.sku, qty=c.payload.qty))
        .unsafe_projection_upsert(T3rLine, on=["key"], row=lambda c: {"key": c.payload.sku, "qty": c.payload.qty})
        .return_(lambda c: ok(c.steps["item"].id)),
    )
    # Several kinds of writes in one called handler.
    inner = f.write_handler(
        "inner",
        f.pipeline(Target)
        .create("made", T3rItem, data=lambda c: T3rItem(sku="inner", qty=2))
        .append_event(T3rItem, id=lambda c: c.payload.id, event=lambda c: Bumped(3))
        .unsafe_projection_upsert(T3rLine, on=["key"], row=lambda c: {"key": "seeded", "qty": 13})
        .return_(lambda c: ok(c.steps["made"].id)),
    )
    return f, seed, inner


def _snapshot(app: App) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table the App has (framework tables included)."""
    out: dict[str, list[dict[str, Any]]] = {}
    with app.engine.connect() as conn:
        for table in app.tables():
            rows = [dict(r._mapping) for r in conn.execute(sa.select(table))]
            out[table.name] = sorted(rows, key=repr)
    return out


def _seeded(app_on: AppOn, f: Feature[Any], seed: Any, user: User) -> tuple[App, uuid.UUID]:
    app = app_on([f])
    result = app.dispatch(seed, Seed("seeded", 10), user=user)
    assert isinstance(result, Ok), result
    return app, result.data


@pytest.mark.parametrize("variant", ["compute-raises", "return-fail"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_right_after_the_step_leaves_every_table_as_it_was(
    app_on: AppOn, admin: User, kind: str, variant: str
) -> None:
    f, seed, inner = _feature()
    add_step, probe = _build(kind, f, inner)
    probed: list[bool] = []

    def boom(c: Any) -> None:
        probed.append(probe(c))
        raise RuntimeError("broken right after the step")

    def refuse(c: Any) -> Failure:
        probed.append(probe(c))
        return fail("unprocessable", "refused right after the step")

    pipeline = add_step(f.pipeline(Target))
    finished = (
        pipeline.compute("boom", boom).return_(lambda c: ok(None))
        if variant == "compute-raises"
        else pipeline.return_(refuse)
    )
    h = f.write_handler("under-test", finished)
    app, seeded_id = _seeded(app_on, f, seed, admin)
    before = _snapshot(app)
    assert len(before["kumiko_events"]) == 1
    assert len(before["t3r_item"]) == 1
    assert len(before["t3r_line"]) == 1

    result = app.dispatch(h, Target(seeded_id), user=admin)

    assert isinstance(result, Failure), result
    if variant == "compute-raises":
        assert result.code == "internal_error"
        assert said(result).endswith(' compute "boom" raised RuntimeError')
    else:
        assert result == Failure("unprocessable", "refused right after the step")
    assert probed == [True], "the step did not take effect inside the transaction"
    assert _snapshot(app) == before


@pytest.mark.parametrize("kind", WRITE_KINDS)
def test_control_the_same_step_followed_by_ok_commits(app_on: AppOn, admin: User, kind: str) -> None:
    """The matrix above is meaningful: without the failure each write kind changes a table."""
    f, seed, inner = _feature()
    add_step, probe = _build(kind, f, inner)
    h = f.write_handler("under-test", add_step(f.pipeline(Target)).return_(lambda c: ok(probe(c))))
    app, seeded_id = _seeded(app_on, f, seed, admin)
    before = _snapshot(app)
    assert app.dispatch(h, Target(seeded_id), user=admin) == Ok(True)
    after = _snapshot(app)
    assert after != before
    # The events table changes exactly when an aggregate was written.
    appended = len(after[events.name]) - len(before[events.name])
    assert appended == {"create": 1, "update": 1, "append_event": 1, "call_feature": 2}.get(kind, 0)
