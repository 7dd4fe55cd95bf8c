"""Query handlers (issue 14.3): a read-only builder, ``app.query``/``query_json`` in a
read-only transaction that is never committed, filtered to the user's tenant; neither
kind of handler runs as the other.  On SQLite and PostgreSQL."""

from __future__ import annotations

import inspect
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, BootError, Entity, Failure, Feature, Ok, QueryFinished, User, fail, ok

AppOn = Callable[..., App]


class QryItem(Entity):
    __tablename__ = "qry_item"
    label: Mapped[str]
    stock: Mapped[int]


@attrs.frozen
class NewItem:
    label: str
    stock: int


@attrs.frozen
class Lookup:
    label: str
    minimum: int = 0


def _feature() -> Feature[Any]:
    f = Feature("qry")
    f.entity(QryItem)
    return f


f = _feature()
add = f.write_handler(
    "add",
    f.pipeline(NewItem)
    .create("item", QryItem, data=lambda c: QryItem(label=c.payload.label, stock=c.payload.stock))
    .return_(lambda c: ok(c.steps["item"].id)),
)
by_label = f.query_handler(
    "by-label",
    f.query_pipeline(Lookup)
    .find_many("items", lambda c: sa.select(QryItem).where(QryItem.label == c.payload.label))
    .guard(lambda c: c.payload.minimum >= 0, otherwise=lambda c: fail("unprocessable", "minimum must be >= 0"))
    .for_each(
        "item",
        over=lambda c: c.steps["items"],
        do=lambda b: b.branch(
            when=lambda c: c.scope["item"].stock >= c.payload.minimum,
            on_true=lambda b: b.compute("last_enough", lambda c: c.scope["item"].stock),
        ),
    )
    .return_(lambda c: ok(sorted(i.stock for i in c.steps["items"] if i.stock >= c.payload.minimum))),
    roles=["Admin", "Viewer"],
)
one = f.query_handler(
    "one",
    f.query_pipeline(Lookup)
    .get_one("item", lambda c: sa.select(QryItem).where(QryItem.label == c.payload.label))
    .return_(lambda c: ok(c.steps["item"].stock)),
)
raw_write = f.query_handler(
    "raw-write",
    f.query_pipeline(Lookup)
    .compute(
        "wrote",
        lambda c: c.db.execute(sa.update(QryItem.__table__).values(label=c.payload.label)).rowcount,
    )
    .return_(lambda c: ok(c.steps["wrote"])),
)
orm_change = f.query_handler(
    "orm-change",
    f.query_pipeline(Lookup)
    .get_one("item", lambda c: sa.select(QryItem).where(QryItem.label == c.payload.label))
    .compute("renamed", lambda c: setattr(c.steps["item"], "label", "renamed"))
    .return_(lambda c: ok(None)),
)


def _labels(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return sorted(conn.scalars(sa.select(QryItem.__table__.c.label)))


def _seed(app: App, user: User, *items: tuple[str, int]) -> None:
    for label, stock in items:
        assert isinstance(app.dispatch(add, NewItem(label, stock), user=user), Ok)


def test_a_query_reads_and_returns_its_typed_result(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app = app_on([f])
    admin = make_user("Admin")
    _seed(app, admin, ("bolt", 3), ("bolt", 9), ("nut", 1))
    assert app.query(by_label, Lookup("bolt", minimum=4), user=admin) == Ok([9])
    assert app.query_json("qry:by-label", {"label": "bolt"}, user=admin) == Ok([3, 9])
    assert app.query(one, Lookup("nut"), user=admin) == Ok(1)
    missing = app.query(one, Lookup("washer"), user=admin)
    assert isinstance(missing, Failure) and missing.code == "not_found"
    refused = app.query(by_label, Lookup("bolt", minimum=-1), user=admin)
    assert refused == Failure("unprocessable", "minimum must be >= 0")


def test_other_tenants_rows_are_invisible(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app = app_on([f])
    mine, theirs = make_user("Admin"), make_user("Admin")
    _seed(app, mine, ("bolt", 3))
    _seed(app, theirs, ("bolt", 7), ("nut", 2))
    assert app.query(by_label, Lookup("bolt"), user=mine) == Ok([3])
    assert app.query(by_label, Lookup("bolt"), user=theirs) == Ok([7])
    hidden = app.query(one, Lookup("nut"), user=mine)
    assert isinstance(hidden, Failure) and hidden.code == "not_found"


def test_a_raw_write_through_c_db_is_refused_and_nothing_is_written(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    app = app_on([f])
    admin = make_user("Admin")
    _seed(app, admin, ("bolt", 3))
    result = app.query(raw_write, Lookup("hacked"), user=admin)
    assert isinstance(result, Failure)
    assert result.code == "internal_error"
    assert isinstance(result.details, dict)
    error_id = result.details["error_id"]
    assert result.message == (
        'step 0 compute "wrote" tried to write, and query qry:raw-write runs in a read-only transaction; '
        f"a query only reads: do the change in a write handler (app.dispatch) (error id {error_id})"
    )
    assert result.details == {"path": "0", "step": 'compute "wrote"', "error_id": error_id}
    assert _labels(app) == ["bolt"]
    # The connection is a writer again afterwards (SQLite resets the pragma as a writer begins).
    _seed(app, admin, ("nut", 1))
    assert _labels(app) == ["bolt", "nut"]


def test_an_orm_change_in_a_query_is_a_failure_and_not_written(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app = app_on([f])
    admin = make_user("Admin")
    _seed(app, admin, ("bolt", 3))
    result = app.query(orm_change, Lookup("bolt"), user=admin)
    assert isinstance(result, Failure)
    assert (result.code, result.message) == (
        "internal_error",
        "query qry:orm-change changed ORM objects in its read-only transaction; "
        "a query only reads: do the change in a write handler (app.dispatch)",
    )
    assert _labels(app) == ["bolt"]


def test_roles_and_payloads_are_checked_like_a_dispatch(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app = app_on([f])
    denied = app.query(by_label, Lookup("bolt"), user=make_user())
    assert isinstance(denied, Failure) and denied.code == "access_denied"
    invalid = app.query_json("qry:by-label", {"label": 5}, user=make_user("Viewer"))
    assert isinstance(invalid, Failure) and invalid.code == "validation_error"
    wrong = app.query(by_label, NewItem("x", 1), user=make_user("Viewer"))  # type: ignore[arg-type]
    assert isinstance(wrong, Failure) and wrong.code == "validation_error"


def test_neither_kind_of_handler_runs_as_the_other(app_on: AppOn, make_user: Callable[..., User]) -> None:
    app = app_on([f])
    admin = make_user("Admin")
    as_write = app.dispatch(by_label, Lookup("bolt"), user=admin)  # type: ignore[arg-type]
    assert as_write == Failure(
        "not_found", "qry:by-label is a query handler: run it with app.query(...)", {"handler": "qry:by-label"}
    )
    as_write_json = app.dispatch_json("qry:by-label", {"label": "bolt"}, user=admin)
    assert isinstance(as_write_json, Failure)
    assert as_write_json.message == "qry:by-label is a query handler: run it with app.query_json(...)"
    as_query = app.query(add, NewItem("x", 1), user=admin)  # type: ignore[arg-type]
    assert as_query == Failure(
        "not_found", "qry:add is a write handler: run it with app.dispatch(...)", {"handler": "qry:add"}
    )
    as_query_json = app.query_json("qry:add", {"label": "x", "stock": 1}, user=admin)
    assert isinstance(as_query_json, Failure)
    assert as_query_json.message == "qry:add is a write handler: run it with app.dispatch_json(...)"
    unknown = app.query_json("qry:nope", {}, user=admin)
    assert isinstance(unknown, Failure) and unknown.code == "not_found"
    assert unknown.details == {"known": ["qry:by-label", "qry:one", "qry:orm-change", "qry:raw-write"]}
    assert _labels(app) == []


def test_idempotency_keys_do_not_apply_to_queries() -> None:
    """A query changes nothing, so repeating it is safe: there is no key to pass."""
    assert "idempotency_key" not in inspect.signature(App.query).parameters
    assert "idempotency_key" not in inspect.signature(App.query_json).parameters


def test_boot_refuses_writes_outbox_and_workflow_steps_in_a_query() -> None:
    g = Feature("qryboot", requires=["mail.send"])
    g.entity(QryItem)
    p: Any = g.query_pipeline(Lookup)
    g.query_handler(
        "bad",
        p.create("made", QryItem, data=lambda c: QryItem(label="x", stock=1))
        .send_mail(to="a@example.com", subject="s", body="b")
        .branch(when=lambda c: True, on_true=lambda b: b.wait("PT1H"))
        .return_(lambda c: ok(None)),
    )
    g.query_handler("unfinished", p.compute("x", lambda c: 1))
    g.write_handler("q-as-write", p.return_(lambda c: ok(1)))
    g.write_handler("unended-q-as-write", p.compute("x", lambda c: 1))
    with pytest.raises(BootError) as raised:
        App([g], database_url="sqlite://")
    problems = raised.value.problems
    assert (
        'query qryboot:bad, step 0 (aggregate.create "made"): Step "create" (aggregate.create) does more than read, '
        "and a QueryPipeline only reads (a query runs in a read-only transaction); do it in a write handler built "
        "with feature.pipeline(P) (or a workflow), and keep the query to reads, compute, branch, for_each and guard"
    ) in problems
    assert any(
        p.startswith('query qryboot:bad, step 1 (mail.send): Step "send_mail" (mail.send) does more') for p in problems
    )
    assert any(
        p.startswith('query qryboot:bad, step 2/on_true/0 (workflow.wait): Step "wait"')
        and "a QuerySubPipeline only" in p
        and "do it in a workflow built with feature.workflow_pipeline(P)," in p  # a write handler refuses it too
        for p in problems
    )
    assert (
        "query qryboot:unfinished: A query handler needs a pipeline built with feature.query_pipeline(P) and ended "
        "with .return_(...), got a QueryPipeline that is not ended; end it with .return_(lambda c: ok(...))"
    ) in problems
    assert (
        "handler qryboot:q-as-write: A write handler needs a pipeline built with feature.pipeline(P), got a query "
        "pipeline (QueryFinished); register it with feature.query_handler(...) and run it with app.query(...)"
    ) in problems
    assert (
        "handler qryboot:unended-q-as-write: A write handler needs a pipeline built with feature.pipeline(P), got a "
        "query pipeline (QueryPipeline); register it with feature.query_handler(...) and run it with app.query(...)"
    ) in problems


def test_call_feature_of_a_query_is_refused_at_boot() -> None:
    g = Feature("qrycall", requires=["call_feature"])
    looked = g.query_handler("look", g.query_pipeline(Lookup).return_(lambda c: ok(1)))
    step: Any = looked  # written without mypy, which wants a WriteHandler here
    g.write_handler(
        "calls", g.pipeline(Lookup).call_feature("x", step, payload=lambda c: c.payload).return_(lambda c: ok(1))
    )
    with pytest.raises(BootError) as raised:
        App([g], database_url="sqlite://")
    assert raised.value.problems == [
        'handler qrycall:calls, step 0 (call_feature "x"): call_feature targets qrycall:look, a query handler; '
        "call_feature runs write handlers only: read what the pipeline needs with find_one/get_one/find_many"
    ]


def test_a_query_on_sqlite_takes_no_write_lock(tmp_path: Path, make_user: Callable[..., User]) -> None:
    """A write's BEGIN IMMEDIATE waits for another writer; a query's deferred BEGIN reads
    beside it (WAL), so a long write does not hold up the queries."""
    app = App([f], database_url=f"sqlite:///{tmp_path / 'q.sqlite3'}")
    app.create_all()
    admin = make_user("Admin")
    _seed(app, admin, ("bolt", 3))
    other = sqlite3.connect(tmp_path / "q.sqlite3", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        started = time.monotonic()
        assert app.query(by_label, Lookup("bolt"), user=admin) == Ok([3])
        assert time.monotonic() - started < 4.5  # not the 5 s busy timeout (margin for a loaded CI)
    finally:
        other.execute("ROLLBACK")
        other.close()
        app.dispose()


def test_query_and_handler_names_share_one_namespace() -> None:
    g = Feature("qryname")
    g.write_handler("same", g.pipeline(Lookup).return_(lambda c: ok(1)))
    g.query_handler("same", g.query_pipeline(Lookup).return_(lambda c: ok(1)))
    with pytest.raises(BootError) as raised:
        App([g], database_url="sqlite://")
    assert raised.value.problems == [
        "query qryname:same: the name is registered twice; handler and query names must be unique"
    ]


def test_a_query_pipeline_finishes_as_a_query_finished() -> None:
    finished = f.query_pipeline(Lookup).return_(lambda c: ok(uuid.uuid4()))
    assert isinstance(finished, QueryFinished)
    assert finished.builder == "QueryPipeline"
