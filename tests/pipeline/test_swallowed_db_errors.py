"""A resolver that catches a database error from its own ``c.db`` statement and goes on.

Before, SQLite undid that statement alone and committed, while PostgreSQL had aborted the
transaction: the next statement raised ``InFailedSqlTransaction`` in whichever step sent
it, and with none the COMMIT rolled everything back while the caller got ``Ok``.  Now both
databases answer with the same ``internal_error`` naming the step and the fix, and write
nothing; a savepoint around the statement (``with c.db.begin_nested():``) is the way to
go on, and keeps working (docs/steps.md).  Both databases."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, manual, ok
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]

_META = sa.MetaData()
_ROWS = sa.Table(
    "swl_rows",
    _META,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("text", sa.String(50), unique=True),
)
#: The value a duplicate insert binds: it must show in no message.
_SECRET = "s3cret-value"


class SwlThing(Entity):
    __tablename__ = "swl_thing"
    text: Mapped[str] = mapped_column(sa.String(50))


@attrs.frozen
class Add:
    text: str


def _insert(c: Any, text: str) -> None:
    c.db.execute(sa.insert(_ROWS).values(text=text))


def _duplicate(c: Any) -> None:
    """Inserts the same text twice: the second breaks the unique constraint."""
    _insert(c, _SECRET)
    _insert(c, _SECRET)


def _swallowing(c: Any) -> int:
    """Writes a row, then catches the IntegrityError of a duplicate and goes on."""
    _insert(c, c.payload.text)
    with contextlib.suppress(IntegrityError):
        _duplicate(c)
    return 1


def _swallowing_then_sending(c: Any) -> int:
    """Catches the error, then sends another statement in the same resolver (on
    PostgreSQL it raises InFailedSqlTransaction, which leaves the resolver)."""
    _swallowing(c)
    return _count(c)


def _in_a_savepoint(c: Any) -> int:
    """Writes a row, then sends the duplicate in a savepoint of its own."""
    _insert(c, c.payload.text)
    _insert(c, _SECRET + c.payload.text)
    with contextlib.suppress(IntegrityError), c.db.begin_nested():
        _insert(c, _SECRET + c.payload.text)
    return _count(c)


def _count(c: Any) -> int:
    return int(c.db.execute(sa.select(sa.func.count()).select_from(_ROWS)).scalar_one())


def _texts(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(_ROWS.c.text).order_by(_ROWS.c.id)))


def _failed(result: object) -> tuple[str, str, dict[str, object]]:
    """Code, message without its error id, details without it."""
    assert isinstance(result, Failure), result
    message, _, error_id = result.message.rpartition(" (error id ")
    details = dict(result.details or {})
    assert details.pop("error_id") + ")" == error_id
    return result.code, message, details


def _swallowed(where: str, error: str = "IntegrityError") -> str:
    return (
        f"step {where}: its resolver caught {error} from a statement it sent through c.db and went on, so nothing"
        " is written (on PostgreSQL a failed statement ends the transaction); send a statement that may fail in a"
        " savepoint of its own (with c.db.begin_nested(): ...), or let the error leave the resolver"
    )


def test_a_caught_integrity_error_fails_the_handler_naming_its_step_on_both_databases(
    app_on: AppOn, user: User
) -> None:
    """Before: ``Ok(1)`` on both, but on PostgreSQL nothing was committed (``last``); ``Ok``
    on SQLite and ``step 1 ... raised InternalError`` on PostgreSQL (``later``,
    ``then_sends``)."""
    f = Feature("swl")
    last = f.write_handler("last", f.pipeline(Add).compute("n", _swallowing).return_(lambda c: ok(c.steps["n"])))
    later = f.write_handler(
        "later",
        f.pipeline(Add).compute("n", _swallowing).compute("m", _count).return_(lambda c: ok(c.steps["m"])),
    )
    second = f.write_handler(  # a run of computes is checked once, after its last: named by its line
        "second",
        f.pipeline(Add).compute("m", _count).compute("n", _swallowing).compute("k", _count).return_(lambda c: ok(0)),
    )
    then_sends = f.write_handler(
        "then_sends", f.pipeline(Add).compute("n", _swallowing_then_sending).return_(lambda c: ok(c.steps["n"]))
    )
    in_return = f.write_handler("in_return", f.pipeline(Add).return_(lambda c: ok(_swallowing(c))))
    in_arm = f.write_handler(
        "in_arm",
        f.pipeline(Add)
        .compute("m", _count)
        .branch(when=lambda c: True, on_true=lambda b: b.compute("n", _swallowing), on_false=lambda b: b)
        .return_(lambda c: ok(c.steps["m"])),
    )
    in_when = f.write_handler(  # a resolver called by a step (not a fused line): when=
        "in_when",
        f.pipeline(Add)
        .branch(when=lambda c: _swallowing(c) == 1, on_true=lambda b: b, on_false=lambda b: b)
        .return_(lambda c: ok(0)),
    )
    created = f.write_handler(  # the framework's statement first: the dispatch's own connection
        "created",
        f.pipeline(Add)
        .create("t", SwlThing, data=lambda c: SwlThing(text=c.payload.text))
        .compute("n", _swallowing)
        .return_(lambda c: ok(c.steps["n"])),
    )
    f.entity(SwlThing)
    app = app_on([f])
    _META.create_all(app.engine)

    assert _failed(app.dispatch(last, Add("a"), user=user)) == (
        "internal_error",
        _swallowed('0 compute "n"'),
        {"path": "0", "step": 'compute "n"'},
    )
    assert _failed(app.dispatch(later, Add("b"), user=user))[1] == _swallowed('0 compute "n"')
    assert _failed(app.dispatch(second, Add("b2"), user=user))[1:] == (
        _swallowed('1 compute "n"'),
        {"path": "1", "step": 'compute "n"'},
    )
    assert _failed(app.dispatch(then_sends, Add("c"), user=user))[1] == _swallowed('0 compute "n"')
    assert _failed(app.dispatch(in_return, Add("d"), user=user))[1:] == (
        _swallowed("0 return"),
        {"path": "0", "step": "return"},
    )
    assert _failed(app.dispatch(in_arm, Add("e"), user=user))[1:] == (
        _swallowed('1/on_true/0 compute "n"'),
        {"path": "1/on_true/0", "step": 'compute "n"'},
    )
    assert _failed(app.dispatch(in_when, Add("f"), user=user))[1] == _swallowed("0 branch")
    assert _failed(app.dispatch(created, Add("g"), user=user))[1:] == (
        _swallowed('1 compute "n"'),
        {"path": "1", "step": 'compute "n"'},
    )
    assert _texts(app) == []
    with app.engine.connect() as conn:  # nor the created entity, nor its event
        assert conn.execute(sa.select(sa.func.count()).select_from(SwlThing)).scalar_one() == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(events)).scalar_one() == 0


def test_the_message_names_the_step_and_no_sql_or_values_and_the_log_has_the_error(
    app_on: AppOn, user: User, caplog: Any
) -> None:
    f = Feature("swm")
    h = f.write_handler("h", f.pipeline(Add).compute("n", _swallowing).return_(lambda c: ok(c.steps["n"])))
    app = app_on([f])
    _META.create_all(app.engine)
    with caplog.at_level("ERROR", logger="kumiko_typed"):
        result = app.dispatch(h, Add("x"), user=user)
    assert isinstance(result, Failure)
    for leak in (_SECRET, "INSERT", "swl_rows", "UNIQUE", "unique constraint", "duplicate"):
        assert leak not in result.message and leak not in str(result.details)
    error_id = dict(result.details or {})["error_id"]
    (record,) = [r for r in caplog.records if error_id in r.getMessage()]
    assert 'step 0 compute "n": its resolver caught IntegrityError and went on' in record.getMessage()
    assert isinstance(record.exc_info[1], IntegrityError)  # the database's text: the log's only


def test_a_statement_in_a_savepoint_of_its_own_may_fail_and_the_resolver_go_on(app_on: AppOn, user: User) -> None:
    """The savepoint's rollback undoes the failed statement alone on both databases: the
    program goes on and commits; the same catch without the savepoint fails."""
    f = Feature("sws")
    h = f.write_handler(
        "add", f.pipeline(Add).compute("n", _in_a_savepoint).compute("m", _count).return_(lambda c: ok(c.steps["m"]))
    )
    bare = f.write_handler("bare", f.pipeline(Add).compute("n", _swallowing).return_(lambda c: ok(c.steps["n"])))
    app = app_on([f])
    _META.create_all(app.engine)
    assert app.dispatch(h, Add("a"), user=user) == Ok(2)
    assert app.dispatch(h, Add("b"), user=user) == Ok(4)
    assert _failed(app.dispatch(bare, Add("c"), user=user))[1] == _swallowed('0 compute "n"')
    assert _texts(app) == ["a", _SECRET + "a", "b", _SECRET + "b"]


def test_nested_savepoints_forget_only_the_errors_they_undo(app_on: AppOn, user: User) -> None:
    def inner_undone(c: Any) -> int:
        """An error in an inner savepoint rolled back, caught inside the outer one."""
        with c.db.begin_nested():
            _insert(c, "outer " + c.payload.text)
            with contextlib.suppress(IntegrityError), c.db.begin_nested():
                _duplicate(c)
            _insert(c, "after " + c.payload.text)
        return _count(c)

    def outer_undone(c: Any) -> int:
        """Caught inside the outer savepoint (none of its own), which the resolver rolls back."""
        _insert(c, "kept " + c.payload.text)
        outer = c.db.begin_nested()
        _insert(c, "undone " + c.payload.text)
        with contextlib.suppress(IntegrityError):
            _insert(c, "kept " + c.payload.text)
        outer.rollback()
        return _count(c)

    def after_a_rolled_back_savepoint(c: Any) -> int:
        """A savepoint rolled back before the error does not undo it."""
        with contextlib.suppress(IntegrityError), c.db.begin_nested():
            _duplicate(c)
        with contextlib.suppress(IntegrityError):
            _insert(c, _SECRET)
            _insert(c, _SECRET)
        return 1

    def released_around_it(c: Any) -> int:
        """Caught inside a savepoint that is then released, not rolled back: on
        PostgreSQL the RELEASE fails too (the transaction is aborted), on SQLite it
        succeeds; the answer is the same."""
        with c.db.begin_nested():
            _insert(c, "in " + c.payload.text)
            with contextlib.suppress(IntegrityError):
                _duplicate(c)
        return 1

    f = Feature("swn")
    handlers = {
        fn.__name__: f.write_handler(fn.__name__, f.pipeline(Add).compute("n", fn).return_(lambda c: ok(c.steps["n"])))
        for fn in (inner_undone, outer_undone, after_a_rolled_back_savepoint, released_around_it)
    }
    app = app_on([f])
    _META.create_all(app.engine)
    assert app.dispatch(handlers["inner_undone"], Add("a"), user=user) == Ok(2)
    assert app.dispatch(handlers["outer_undone"], Add("b"), user=user) == Ok(3)
    swallowed = _swallowed('0 compute "n"')
    assert _failed(app.dispatch(handlers["after_a_rolled_back_savepoint"], Add("c"), user=user))[1] == swallowed
    assert _failed(app.dispatch(handlers["released_around_it"], Add("d"), user=user))[1] == swallowed
    assert _texts(app) == ["outer a", "after a", "kept b"]


def test_a_database_error_that_leaves_the_resolver_fails_the_step_as_before(app_on: AppOn, user: User) -> None:
    """Itself or raised from: the step's crash (its own code), not a caught error; and
    an error caught on a connection of the resolver's own is none of the run's.  The
    same resolver catching it on ``c.db`` fails (before: ``Ok``)."""

    def rewrapped(c: Any) -> int:
        try:
            _duplicate(c)
        except DBAPIError as exc:
            raise ValueError("no duplicates") from exc
        return 1

    def elsewhere(c: Any) -> int:
        _insert(c, c.payload.text)
        with app.engine.connect() as own, contextlib.suppress(DBAPIError):  # a read: SQLite's write lock is held
            own.execute(sa.text("SELECT no_such_column FROM swl_rows"))
        return _count(c)

    f = Feature("swl2")
    h = f.write_handler("h", f.pipeline(Add).compute("n", rewrapped).return_(lambda c: ok(c.steps["n"])))
    raw = f.write_handler("raw", f.pipeline(Add).compute("n", _duplicate).return_(lambda c: ok(0)))
    other = f.write_handler("other", f.pipeline(Add).compute("n", elsewhere).return_(lambda c: ok(c.steps["n"])))
    here = f.write_handler("here", f.pipeline(Add).compute("n", _swallowing).return_(lambda c: ok(c.steps["n"])))
    app = app_on([f])
    _META.create_all(app.engine)
    rewrapped_failure = _failed(app.dispatch(h, Add("a"), user=user))
    assert rewrapped_failure[:2] == ("internal_error", 'step 0 compute "n" raised ValueError')
    assert getattr(app.dispatch(raw, Add("a"), user=user), "code", None) == "unique_violation"
    assert app.dispatch(other, Add("b"), user=user) == Ok(1)  # its own transaction: not committed
    assert _failed(app.dispatch(here, Add("c"), user=user))[1] == _swallowed('0 compute "n"')
    assert _texts(app) == ["b"]


@attrs.frozen
class Go:
    text: str


def test_a_workflow_step_whose_resolver_caught_a_database_error_fails_its_run(app_on: AppOn, user: User) -> None:
    """A run's first segment, a resumed one (walked step by step) and a retry attempt:
    the run fails with the same error on both databases, nothing of the segment written.
    Before: completed on both, the rows of the segment lost on PostgreSQL."""
    f = Feature("swf")
    first = f.workflow("first", trigger=manual(Go), pipeline=f.workflow_pipeline(Go).compute("n", _swallowing))
    resumed = f.workflow(
        "resumed", trigger=manual(Go), pipeline=f.workflow_pipeline(Go).wait("PT1M").compute("n", _swallowing)
    )
    retried = f.workflow(
        "retried",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).retry(
            times=1, base_delay=timedelta(seconds=10), do=lambda r: r.compute("n", _swallowing)
        ),
    )
    looped = f.workflow(
        "looped",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).for_each("i", over=lambda c: [_swallowing(c)], do=lambda b: b),
    )
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    _META.create_all(app.engine)
    runs = {
        "n": app.start_workflow(first, Go("a"), user=user),
        "wait-n": app.start_workflow(resumed, Go("b"), user=user),
        "retry-n": app.start_workflow(retried, Go("c"), user=user),
        "loop": app.start_workflow(looped, Go("d"), user=user),
    }
    clock.advance(minutes=2)
    app.run_worker(once=True)
    errors = {}
    for name, run_id in runs.items():
        run = app.get_run(run_id)
        assert run is not None and run.status == "failed", (name, run)
        assert run.error is not None
        errors[name] = (run.error["code"], run.error["message"].rpartition(" (error id ")[0])
    assert errors == {
        "n": ("internal_error", _swallowed('n compute "n"')),
        "wait-n": ("internal_error", _swallowed('n compute "n"')),
        "retry-n": ("internal_error", _swallowed('@retry/do/#1/n compute "n"')),
        "loop": ("internal_error", _swallowed('i for_each "i"')),
    }, errors
    assert _texts(app) == []
