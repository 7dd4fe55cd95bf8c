"""Fault injection at every statement (DESIGN §5, §6, §7): a dispatch that creates an
aggregate, appends an event its projector and a read model follow, calls a handler that
appends one more, and sends a mail and a webhook, run after a query (SQLite's connection
then refuses writes until the dispatch lifts that), is failed at its k-th statement, for
every k, by the database driver's own error (``_faults``): the database busy, another
error, and on PostgreSQL the backend killed under the statement.  Whatever k: every table
is as it was, the client gets a Failure that quotes no SQL, parameters or traceback
(``unavailable`` for the busy database), and the same call (the same idempotency key)
run again ends in exactly one effect; a killed connection is run once more at once."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _faults import counting, counts, failing_at, no_leak, snapshot
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok

AppOn = Callable[..., App]


class SfOrder(Entity):
    __tablename__ = "sf_order"
    sku: Mapped[str] = mapped_column(sa.String(40))
    qty: Mapped[int] = mapped_column(default=0)


class _ReadModels(MappedAsDataclass, DeclarativeBase):
    pass


class SfTotal(_ReadModels):
    __tablename__ = "sf_total"
    sku: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    qty: Mapped[int]


@attrs.frozen
class Order:
    sku: str


@attrs.frozen
class Target:
    id: uuid.UUID


@attrs.frozen
class Added:
    qty: int


def _feature() -> tuple[Feature[Any], Any]:
    f: Feature[Any] = Feature("sf", requires=["mail.send", "webhook.send", "call_feature"], projections=[SfTotal])
    f.entity(SfOrder)
    f.event(Added, name="sf-added")

    @f.projector(SfOrder, Added)
    def apply(row: SfOrder, event: Added) -> None:
        row.qty += event.qty

    bump = f.write_handler(
        "bump",
        f.pipeline(Target)
        .append_event(SfOrder, id=lambda c: c.payload.id, event=lambda c: Added(1))
        .return_(lambda c: ok(None)),
    )
    place = f.write_handler(
        "place",
        f.pipeline(Order)
        .create("order", SfOrder, data=lambda c: SfOrder(sku=c.payload.sku, qty=1))
        .append_event(SfOrder, id=lambda c: c.steps["order"].id, event=lambda c: Added(2))
        .call_feature("bumped", bump, payload=lambda c: Target(c.steps["order"].id))
        .unsafe_projection_upsert(SfTotal, on=["sku"], row=lambda c: {"sku": c.payload.sku, "qty": 3})
        .send_mail(to="a@example.com", subject=lambda c: f"order {c.payload.sku}", body="placed")
        .send_webhook(url="http://127.0.0.1:9/orders", body=lambda c: {"sku": c.payload.sku})
        .return_(lambda c: ok(c.steps["order"].id)),
    )
    # A query before each dispatch: SQLite's connection then refuses writes until the
    # dispatch's first statement lifts that, which the faults fail too.
    f.query_handler(
        "count",
        f.query_pipeline(Order).find_many("r", lambda c: sa.select(SfOrder)).return_(lambda c: ok(len(c.steps["r"]))),
    )
    return f, place


def _kinds(db_url: str) -> list[str]:
    return ["error", "busy", "kill"] if db_url.startswith("postgresql") else ["error", "busy"]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_a_dispatch_failed_at_any_statement_writes_nothing_and_its_repeat_writes_once(
    app_on: AppOn, db_url: str, admin: User, keyed: bool
) -> None:
    f, place = _feature()
    app = app_on([f])
    before = counts(app)
    assert isinstance(app.query(f.queries[0], Order("clean"), user=admin), Ok)
    with counting(app.engine) as clean:
        first = app.dispatch(place, Order("clean"), user=admin, idempotency_key="clean" if keyed else None)
    assert isinstance(first, Ok), first
    once = {name: n - before[name] for name, n in counts(app).items()}
    assert once["sf_order"] == once["sf_total"] == once["kumiko_outbox"] - 1 == 1, once
    assert once["kumiko_events"] == 3, once
    assert len(clean.sent) >= 5, clean.sent
    for kind in _kinds(db_url):
        for at in range(1, len(clean.sent) + 1):
            sku = f"{kind}-{at}"
            key = sku if keyed else None
            before = snapshot(app)
            assert isinstance(app.query(f.queries[0], Order(sku), user=admin), Ok)
            with failing_at(app.engine, at, kind) as fault:
                result = app.dispatch(place, Order(sku), user=admin, idempotency_key=key)
            assert fault.fired, (kind, at)
            where = (kind, at, fault.sent[at - 1])
            if kind == "kill":  # lost before the COMMIT: run once more, on a new connection
                assert isinstance(result, Ok), (where, result)
            else:
                assert isinstance(result, Failure), (where, result)
                assert result.code == ("unavailable" if kind == "busy" else "internal_error"), (where, result)
                no_leak(result.message)
                assert snapshot(app) == before, where
                result = app.dispatch(place, Order(sku), user=admin, idempotency_key=key)
                assert isinstance(result, Ok), (where, result)
            if keyed:
                assert app.dispatch(place, Order(sku), user=admin, idempotency_key=key) == result, where
            after = counts(app)
            assert {name: after[name] - len(rows) for name, rows in before.items()} == once, where
            with app.engine.connect() as conn:
                row = conn.execute(sa.select(SfOrder.qty).where(SfOrder.sku == sku)).one()
                assert row.qty == 4, where
            assert uuid.UUID(str(result.data))


# --- A resolver's own statements through ``c.db`` ---------------------------------------


class SfLine(_ReadModels):
    __tablename__ = "sf_line"
    id: Mapped[int] = mapped_column(primary_key=True, init=False)
    sku: Mapped[str] = mapped_column(sa.String(40))
    n: Mapped[int]


def _through_db(c: Any) -> int:
    """What a resolver does with the session: a read, an ORM object flushed, an ORM
    update, a Core insert of two rows, and a read that flushes an object added before it."""
    sku = c.payload.sku
    seen = c.db.scalar(sa.select(sa.func.count()).select_from(SfLine).where(SfLine.sku == sku))
    line = SfLine(sku=sku, n=1)
    c.db.add(line)
    c.db.flush()
    line.n = 2
    c.db.execute(sa.insert(SfLine), [{"sku": sku, "n": 3}, {"sku": sku, "n": 4}])
    c.db.add(SfLine(sku=sku, n=5))
    return int(seen) + len(c.db.scalars(sa.select(SfLine.n).where(SfLine.sku == sku)).all())


def _db_feature() -> tuple[Feature[Any], Any]:
    f: Feature[Any] = Feature("sfdb", projections=[SfLine])
    f.entity(SfOrder)
    place = f.write_handler(
        "place",
        f.pipeline(Order)
        .create("order", SfOrder, data=lambda c: SfOrder(sku=c.payload.sku, qty=1))
        .compute("lines", _through_db)
        # Added in the last step and flushed by the COMMIT, outside every step.
        .compute("late", lambda c: c.db.add(SfLine(sku=c.payload.sku, n=6)))
        .return_(lambda c: ok(c.steps["lines"])),
    )
    return f, place


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_a_resolvers_statement_through_c_db_failed_writes_nothing_and_its_repeat_writes_once(
    app_on: AppOn, db_url: str, admin: User, keyed: bool
) -> None:
    """The statements a resolver sends through ``c.db`` (its reads, the flushes of its ORM
    objects, its Core writes, an object flushed only by the COMMIT) are the dispatch's:
    failed at any of them, nothing of the call is written, the answer quotes no SQL
    (``unavailable`` for the database busy) and the same call run again writes once."""
    f, place = _db_feature()
    app = app_on([f])
    before = counts(app)
    with counting(app.engine) as clean:
        first = app.dispatch(place, Order("clean"), user=admin, idempotency_key="clean" if keyed else None)
    assert first == Ok(4), first
    once = {name: n - before[name] for name, n in counts(app).items()}
    assert once["sf_line"] == 5 and once["sf_order"] == 1, once
    sent = [s for s in clean.sent if "sf_line" in s]
    assert len(sent) >= 5, clean.sent  # the resolver's own: read, flush, update, insert, read and flush
    for kind in _kinds(db_url):
        for at in range(1, len(clean.sent) + 1):
            sku = f"{kind}-{at}"
            key = sku if keyed else None
            before = snapshot(app)
            with failing_at(app.engine, at, kind) as fault:
                result = app.dispatch(place, Order(sku), user=admin, idempotency_key=key)
            assert fault.fired, (kind, at)
            where = (kind, at, fault.sent[at - 1])
            if kind == "kill":  # lost before the COMMIT: run once more, on a new connection
                assert result == Ok(4), (where, result)
            else:
                assert isinstance(result, Failure), (where, result)
                assert result.code == ("unavailable" if kind == "busy" else "internal_error"), (where, result)
                no_leak(result.message)
                assert snapshot(app) == before, where
                result = app.dispatch(place, Order(sku), user=admin, idempotency_key=key)
                assert result == Ok(4), (where, result)
            if keyed:
                assert app.dispatch(place, Order(sku), user=admin, idempotency_key=key) == result, where
            after = counts(app)
            assert {name: after[name] - len(rows) for name, rows in before.items()} == once, where
            with app.engine.connect() as conn:
                ns = sorted(conn.scalars(sa.select(SfLine.n).where(SfLine.sku == sku)))
            assert ns == [2, 3, 4, 5, 6], where
