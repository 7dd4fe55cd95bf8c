"""A resolver that catches a database error from its own ``c.db`` statement and goes on:
before, SQLite went on and committed, while PostgreSQL had aborted the transaction — the
next statement raised ``InFailedSqlTransaction`` in whichever step sent it, and with none
the COMMIT rolled everything back while the caller got ``Ok``.  Now both databases give
the same ``internal_error`` naming the step whose resolver caught it, and write nothing;
a savepoint around the statement (``with c.db.begin_nested():``) is the way to go on
(docs/steps.md).  Both databases."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, manual, ok
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]

_META = sa.MetaData()
_ROWS = sa.Table("lft_rows", _META, sa.Column("id", sa.Integer, primary_key=True), sa.Column("text", sa.String(50)))
_BAD = sa.text("SELECT no_such_column FROM lft_rows")


class LftThing(Entity):
    __tablename__ = "lft_thing"
    text: Mapped[str] = mapped_column(sa.String(50))


@attrs.frozen
class Add:
    text: str


def _swallowing(c: Any) -> int:
    """Writes a row, then catches the error of a bad statement and goes on."""
    c.db.execute(sa.insert(_ROWS).values(text=c.payload.text))
    with contextlib.suppress(DBAPIError):
        c.db.execute(_BAD)
    return 1


def _in_a_savepoint(c: Any) -> int:
    """Writes a row, then sends the bad statement in a savepoint of its own."""
    c.db.execute(sa.insert(_ROWS).values(text=c.payload.text))
    with contextlib.suppress(DBAPIError), c.db.begin_nested():
        c.db.execute(_BAD)
    return 1


def _count(c: Any) -> int:
    return int(c.db.execute(sa.select(sa.func.count()).select_from(_ROWS)).scalar_one())


def _texts(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(_ROWS.c.text).order_by(_ROWS.c.id)))


def _failed(result: object) -> tuple[str, str, dict[str, object]]:
    assert isinstance(result, Failure), result
    message = result.message.rpartition(" (error id ")[0]
    details = {k: v for k, v in dict(result.details or {}).items() if k != "error_id"}
    return result.code, message, details


def _swallowed(where: str) -> str:
    return (
        f"step {where}: its resolver caught a database error from a statement it sent through c.db and "
        "went on, so nothing is written (on PostgreSQL the error ends the transaction); let the error leave "
        "the resolver, or send that statement in a savepoint of its own: with c.db.begin_nested(): ..."
    )


def test_a_caught_database_error_fails_the_handler_naming_its_step_on_both_databases(app_on: AppOn, user: User) -> None:
    f = Feature("lft")
    last = f.write_handler("last", f.pipeline(Add).compute("n", _swallowing).return_(lambda c: ok(c.steps["n"])))
    later = f.write_handler(
        "later",
        f.pipeline(Add).compute("n", _swallowing).compute("m", _count).return_(lambda c: ok(c.steps["m"])),
    )
    armed = f.write_handler(
        "armed",
        f.pipeline(Add)
        .compute("m", _count)
        .branch(when=lambda c: True, on_true=lambda b: b.compute("n", _swallowing), on_false=lambda b: b)
        .return_(lambda c: ok(c.steps["m"])),
    )
    created = f.write_handler(  # the framework's statement first: the dispatch's own connection
        "created",
        f.pipeline(Add)
        .create("t", LftThing, data=lambda c: LftThing(text=c.payload.text))
        .compute("n", _swallowing)
        .return_(lambda c: ok(c.steps["n"])),
    )
    f.entity(LftThing)
    app = app_on([f])
    _META.create_all(app.engine)

    # Before: Ok(1) on both, but on PostgreSQL the row was not committed.
    assert _failed(app.dispatch(last, Add("a"), user=user)) == (
        "internal_error",
        _swallowed('0 compute "n"'),
        {"path": "0", "step": 'compute "n"'},
    )
    # Before: Ok(2) on SQLite; on PostgreSQL step 1 "raised InternalError".
    assert _failed(app.dispatch(later, Add("b"), user=user))[1] == _swallowed('0 compute "n"')
    assert _failed(app.dispatch(armed, Add("c"), user=user))[1:] == (
        _swallowed('1/on_true/0 compute "n"'),
        {"path": "1/on_true/0", "step": 'compute "n"'},
    )
    assert _failed(app.dispatch(created, Add("d"), user=user))[1:] == (
        _swallowed('1 compute "n"'),
        {"path": "1", "step": 'compute "n"'},
    )
    assert _texts(app) == []
    with app.engine.connect() as conn:  # nor the created entity, nor its event
        assert conn.execute(sa.select(sa.func.count()).select_from(LftThing)).scalar_one() == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one() == 0


def test_a_statement_in_a_savepoint_of_its_own_may_fail_and_the_resolver_go_on(app_on: AppOn, user: User) -> None:
    f = Feature("lfs")
    h = f.write_handler(
        "add", f.pipeline(Add).compute("n", _in_a_savepoint).compute("m", _count).return_(lambda c: ok(c.steps["m"]))
    )
    app = app_on([f])
    _META.create_all(app.engine)
    assert app.dispatch(h, Add("a"), user=user) == Ok(1)
    assert app.dispatch(h, Add("b"), user=user) == Ok(2)
    assert _texts(app) == ["a", "b"]


def test_a_database_error_that_leaves_the_resolver_fails_the_step_as_before(app_on: AppOn, user: User) -> None:
    """Itself or as the cause of another exception: the step's crash, not a caught error."""

    def rewrapped(c: Any) -> int:
        try:
            c.db.execute(_BAD)
        except DBAPIError as exc:
            raise ValueError("no such column") from exc
        return 1

    f = Feature("lfl")
    h = f.write_handler("h", f.pipeline(Add).compute("n", rewrapped).return_(lambda c: ok(c.steps["n"])))
    fine = f.write_handler("fine", f.pipeline(Add).compute("m", _count).return_(lambda c: ok(c.steps["m"])))
    app = app_on([f])
    _META.create_all(app.engine)
    assert _failed(app.dispatch(h, Add("a"), user=user))[:2] == (
        "internal_error",
        'step 0 compute "n" raised ValueError',
    )
    assert app.dispatch(fine, Add("b"), user=user) == Ok(0)  # the thread's session kept nothing of it


@attrs.frozen
class Go:
    n: int


def test_a_retry_attempt_whose_database_error_left_it_is_tried_again_and_the_run_completes(
    app_on: AppOn, user: User
) -> None:
    """The failed attempt's savepoint is rolled back with its error: the error was not
    caught by the resolver, and the next attempt's success completes the run."""
    tried: list[int] = []

    def flaky(c: Any) -> int:
        tried.append(1)
        c.db.execute(sa.insert(_ROWS).values(text=f"attempt {len(tried)}"))
        if len(tried) == 1:
            c.db.execute(_BAD)  # leaves the resolver: the attempt fails
        return len(tried)

    f = Feature("lfr")
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).retry(
            times=2, base_delay=timedelta(seconds=10), do=lambda r: r.compute("x", flaky)
        ),
    )
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    _META.create_all(app.engine)
    run_id = app.start_workflow(flow, Go(1), user=user)
    assert getattr(app.get_run(run_id), "status", None) == "suspended"
    clock.advance(seconds=10)
    assert app.run_worker(once=True)["resumed"] == 1
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.error) == ("completed", None)
    assert _texts(app) == ["attempt 2"]


def test_a_resumed_segment_whose_resolver_caught_a_database_error_fails_its_run(app_on: AppOn, user: User) -> None:
    """A resumed run's steps are walked one by one (not the block's generated lines)."""
    f = Feature("lfw")
    flow = f.workflow(
        "flow", trigger=manual(Add), pipeline=f.workflow_pipeline(Add).wait("PT1M").compute("n", _swallowing)
    )
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    _META.create_all(app.engine)
    run_id = app.start_workflow(flow, Add("w"), user=user)
    clock.advance(minutes=2)
    app.run_worker(once=True)
    run = app.get_run(run_id)
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error["code"] == "internal_error"
    assert 'compute "n": its resolver caught a database error' in run.error["message"], run.error
    assert _texts(app) == []
