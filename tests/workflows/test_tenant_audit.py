"""The tenant audit from outside, on SQLite and PostgreSQL: for each entry point that
takes a ``User``, Ada (tenant A) aims at Bob's data (tenant B) — by its id, by the same
idempotency or start key, by an event with the key Bob's run waits for — and gets
exactly what an id that does not exist gets (the id substituted), changes nothing and
wakes nothing; a ``sysadmin`` reaches it where the docs allow."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import Gate, Hook, failure_of, ok_data, run_info, short_lock_wait
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, RetryPolicy, User, manual, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
BOB = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
ROOT = User(id=uuid.uuid4(), tenant_id=ADA.tenant_id, roles={"sysadmin"})
_ERROR_ID = re.compile(r"[0-9a-f]{32}")


class TaCard(Entity):
    __tablename__ = "ta_card"
    title: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class Title:
    title: str


@attrs.frozen
class Ref:
    id: uuid.UUID


@attrs.frozen
class Rang:
    ref: int


@attrs.frozen
class Job:
    n: int


#: Holds a worker in the blocking step of ``slow``.
gate = Gate()


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("ta", requires=["webhook.send"])
    f.entity(TaCard)
    f.event(Rang)
    by_id = lambda c: sa.select(TaCard).where(TaCard.id == c.payload.id)  # noqa: E731
    return f, {
        "new": f.write_handler(
            "new",
            f.pipeline(Title)
            .create("card", TaCard, data=lambda c: TaCard(title=c.payload.title))
            .return_(lambda c: ok(c.steps["card"].id)),
        ),
        "get": f.write_handler(
            "get", f.pipeline(Ref).get_one("card", by_id).return_(lambda c: ok(c.steps["card"].title))
        ),
        "ring": f.write_handler(
            "ring",
            f.pipeline(Ref)
            .append_event(TaCard, id=lambda c: c.payload.id, event=lambda c: Rang(7))
            .return_(lambda c: ok(None)),
        ),
        "look": f.query_handler(
            "look",
            f.query_pipeline(Ref)
            .find_many("cards", lambda c: sa.select(TaCard))
            .return_(lambda c: ok(sorted(card.title for card in c.steps["cards"]))),
        ),
        "hook": f.write_handler(
            "hook",
            f.pipeline(Hook)
            .send_webhook(url=lambda c: c.payload.url, body=lambda c: {}, retry=RetryPolicy(times=1))
            .return_(lambda c: ok(None)),
        ),
        "slow": f.workflow(
            "slow",
            trigger=manual(Job),
            pipeline=f.workflow_pipeline(Job)
            .wait("PT1H")
            .compute("blocked", lambda c: gate.block(c.payload.n))
            .wait("PT1H"),
        ),
        "waits": f.workflow(
            "waits",
            trigger=manual(Job),
            pipeline=f.workflow_pipeline(Job)
            .wait_for_event("rang", Rang, key=lambda c: c.payload.n, event_key=lambda e: e.ref, timeout="P1D")
            .return_(lambda c: ok(c.payload.n)),
        ),
    }


def _same(theirs: object, unknown: object, their_id: uuid.UUID, unknown_id: uuid.UUID) -> None:
    """``theirs`` is the Failure ``unknown`` is, but for the id it names (and the error id
    each failure's log record has)."""
    a, b = failure_of(theirs), failure_of(unknown)

    def swap(text: str) -> str:
        return _ERROR_ID.sub("<error id>", text.replace(str(their_id), str(unknown_id)))

    assert (a.code, swap(a.message), swap(repr(a.details))) == (b.code, swap(b.message), swap(repr(b.details)))


@pytest.fixture
def audit(app_on: AppOn) -> tuple[App, dict[str, Any], FakeClock]:
    clock = FakeClock(T0)
    f, h = _feature()
    return app_on([f], clock=clock), h, clock


def test_bobs_aggregate_is_to_ada_an_id_that_does_not_exist(audit: tuple[App, dict[str, Any], FakeClock]) -> None:
    app, h, _ = audit
    card = ok_data(app.dispatch(h["new"], Title("bob's"), user=BOB))
    unknown = uuid.uuid4()
    for handler in ("get", "ring"):
        _same(
            app.dispatch(h[handler], Ref(card), user=ADA),
            app.dispatch(h[handler], Ref(unknown), user=ADA),
            card,
            unknown,
        )
    assert ok_data(app.query(h["look"], Ref(card), user=ADA)) == []
    for first in (1, 2, 9):  # a page inside the stream, at its end, past it
        _same(
            app.read_stream(TaCard, card, user=ADA, from_version=first),
            app.read_stream(TaCard, unknown, user=ADA, from_version=first),
            card,
            unknown,
        )
    assert [e.version for e in ok_data(app.read_stream(TaCard, card, user=BOB))] == [1]  # nothing appended
    assert [e.tenant_id for e in ok_data(app.read_stream(TaCard, card, user=ROOT))] == [BOB.tenant_id]
    _same(
        app.rebuild_projection(TaCard, user=ADA, tenant=BOB.tenant_id),
        app.rebuild_projection(TaCard, user=ADA, tenant=uuid.uuid4()),
        card,
        unknown,
    )


def test_one_key_in_two_tenants_is_two_requests(audit: tuple[App, dict[str, Any], FakeClock]) -> None:
    app, h, _ = audit
    bobs = ok_data(app.dispatch(h["new"], Title("bob's"), user=BOB, idempotency_key="k-1"))
    # The same key and payload: Ada's own request, run, not Bob's result answered.
    adas = ok_data(app.dispatch(h["new"], Title("bob's"), user=ADA, idempotency_key="k-1"))
    assert adas != bobs
    # Another payload under Bob's key is no conflict for Ada.
    assert isinstance(app.dispatch(h["new"], Title("other"), user=ADA, idempotency_key="k-2"), Ok)
    assert isinstance(app.dispatch_json("ta:new", {"title": "x"}, user=BOB, idempotency_key="k-2"), Ok)
    assert ok_data(app.query(h["look"], Ref(bobs), user=ADA)) == ["bob's", "other"]
    assert ok_data(app.query(h["look"], Ref(bobs), user=BOB)) == ["bob's", "x"]
    assert ok_data(app.dispatch(h["new"], Title("bob's"), user=BOB, idempotency_key="k-1")) == bobs


def test_bobs_run_is_to_ada_a_run_that_does_not_exist(audit: tuple[App, dict[str, Any], FakeClock]) -> None:
    app, h, clock = audit
    bobs = app.start_workflow(h["waits"], Job(7), user=BOB, key="order-7")
    adas = app.start_workflow(h["waits"], Job(7), user=ADA, key="order-7")
    assert adas != bobs and app.start_workflow(h["waits"], Job(7), user=BOB, key="order-7") == bobs
    unknown = uuid.uuid4()
    _same(app.cancel_run(bobs, user=ADA), app.cancel_run(unknown, user=ADA), bobs, unknown)
    _same(app.result(h["waits"], bobs, user=ADA), app.result(h["waits"], unknown, user=ADA), bobs, unknown)
    assert run_info(app, bobs).status == "suspended"
    # Ada's event with the key both runs wait for wakes her run only.
    card = ok_data(app.dispatch(h["new"], Title("ada's"), user=ADA))
    assert app.dispatch(h["ring"], Ref(card), user=ADA) == Ok(None)
    app.run_worker(once=True)
    assert (run_info(app, adas).status, run_info(app, bobs).status) == ("completed", "suspended")
    assert app.result(h["waits"], adas, user=ADA) == Ok(7)
    assert isinstance(app.cancel_run(bobs, user=ROOT), Ok)  # a sysadmin crosses tenants
    clock.advance(days=2)
    app.run_worker(once=True)
    assert run_info(app, bobs).status == "cancelled"


def test_bobs_dead_delivery_is_to_ada_a_row_that_does_not_exist(
    audit: tuple[App, dict[str, Any], FakeClock], receiver: Receiver
) -> None:
    app, h, _ = audit
    receiver.respond = lambda _i, _p: (500, {})
    assert app.dispatch(h["hook"], Hook(receiver.url("/h")), user=BOB) == Ok(None)
    assert app.run_worker(once=True)["dead"] == 1
    (dead,) = app.outbox()
    unknown = uuid.uuid4()
    _same(app.requeue(dead.id, user=ADA), app.requeue(unknown, user=ADA), dead.id, unknown)
    assert app.outbox() == [dead]
    requeued = app.requeue(dead.id, user=ROOT)
    assert isinstance(requeued, Ok) and requeued.data.status == "pending"
    assert failure_of(app.requeue(dead.id, user=BOB), "status_conflict").details == {"status": "pending"}


def test_bobs_run_busy_in_a_segment_is_to_ada_a_run_that_does_not_exist(
    audit: tuple[App, dict[str, Any], FakeClock],
) -> None:
    """On PostgreSQL Ada's cancel took Bob's run's row lock before it looked at the tenant:
    while Bob's worker ran a segment it waited, and was ``unavailable`` past the lock wait,
    where an unknown id is ``not_found`` at once — telling that Bob's run exists, and
    when it runs.  (SQLite serializes every writer: there both wait alike.)"""
    app, h, clock = audit
    short_lock_wait(app)
    bobs = app.start_workflow(h["slow"], Job(5), user=BOB)
    clock.advance(hours=1)
    unknown = uuid.uuid4()
    with gate.holding(lambda: app.run_worker(once=True)):
        _same(app.cancel_run(bobs, user=ADA), app.cancel_run(unknown, user=ADA), bobs, unknown)
    info = run_info(app, bobs)
    assert (info.status, info.path, info.error) == ("suspended", "@wait~2", None)


def test_a_run_busy_in_a_segment_answers_its_owners_result_at_once(
    audit: tuple[App, dict[str, Any], FakeClock],
) -> None:
    """Reading a run's result takes no lock: while a worker runs its segment, its owner
    hears at once that it is not completed, not ``unavailable`` past the lock wait (a
    mutation run found the read's ``lock=False`` untested; on SQLite the read took the
    write lock until it began read-only)."""
    app, h, clock = audit
    short_lock_wait(app)
    bobs = app.start_workflow(h["slow"], Job(5), user=BOB)
    clock.advance(hours=1)
    with gate.holding(lambda: app.run_worker(once=True)):
        answer = app.result(h["slow"], bobs, user=BOB)
    assert failure_of(answer, "status_conflict").details == {"status": "suspended"}
