"""What a client learns of a failure (issue 11, item 8): an internal error names the step
and an error id, never SQL, bound parameters or a traceback, which go to the log under that
id; a database that is busy past its wait is ``unavailable`` (503), which a retry may cure."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import error_id, located, said
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok

AppOn = Callable[..., App]


class T8Note(Entity):
    __tablename__ = "t8_note"
    text: Mapped[str] = mapped_column(sa.String(100))


@attrs.frozen
class Say:
    text: str


def _feature() -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("t8")
    f.entity(T8Note)

    def broken_sql(c: Any) -> object:
        insert = sa.text("INSERT INTO t8_missing_table (secret) VALUES (:secret)")
        return c.db.execute(insert, {"secret": c.payload.text})

    leaky = f.write_handler("leaky", f.pipeline(Say).compute("write", broken_sql).return_(lambda c: ok(None)))
    note = f.write_handler(
        "note",
        f.pipeline(Say)
        .create("n", T8Note, data=lambda c: T8Note(text=c.payload.text))
        .return_(lambda c: ok(c.steps["n"].version)),
    )
    return f, leaky, note


def test_an_internal_error_tells_the_client_the_step_and_an_id_and_the_log_the_rest(
    app_on: AppOn, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    f, leaky, _note = _feature()
    app = app_on([f])
    marker = "customer-iban-" + uuid.uuid4().hex
    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        result = app.dispatch(leaky, Say(marker), user=user)
    assert isinstance(result, Failure), result
    assert (result.code, result.http_status) == ("internal_error", 500)
    assert said(result).startswith('step 0 compute "write" raised ')  # ...OperationalError / ProgrammingError
    assert located(result) == {"path": "0", "step": 'compute "write"'}
    shown = repr(result)
    for leak in (marker, "INSERT", "t8_missing_table", "[SQL", "parameters", "Traceback"):
        assert leak not in shown, leak
    # The log has it all, under the id the client was given.
    [record] = [r for r in caplog.records if r.name == "kumiko_typed"]
    assert error_id(result) in record.getMessage()
    assert 'step 0 compute "write"' in record.getMessage()
    assert "INSERT INTO t8_missing_table" in caplog.text and marker in caplog.text
    assert "Traceback" in caplog.text


class _Refusing(sa.TypeDecorator[str]):
    """Text whose binding SQLite's side refuses, as a column type of a driver may."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> str | None:
        if dialect.name == "sqlite":
            raise ValueError(f"{value!r} is refused")
        return value


def test_a_value_the_database_refuses_is_a_validation_error_that_does_not_quote_it(
    app_on: AppOn, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal the framework's own checks do not foresee (PostgreSQL: a cast of the input;
    SQLite: a column type's binding that refuses the text with a ValueError; text that is no
    UUID and an integer wider than its column, once the examples, are refused by the read's
    own checks now, see test_read_values and test_value_parity): the database's reason
    quotes the value, so it goes to the log, under the error id the client gets."""
    f, _leaky, _note = _feature()
    probe = f.write_handler(
        "probe",
        f.pipeline(Say)
        .find_one(
            "n",
            lambda c: sa.select(T8Note).where(
                sa.cast(sa.literal(c.payload.text), sa.Integer) == 1, sa.literal(c.payload.text, _Refusing()) == "x"
            ),
        )
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    marker = "not-a-number-" + uuid.uuid4().hex
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        result = app.dispatch(probe, Say(marker), user=user)
    assert isinstance(result, Failure), result
    assert (result.code, result.http_status) == ("validation_error", 400)
    assert marker not in repr(result)
    assert isinstance(result.details, list)
    [detail] = result.details
    step = '0 read.find_one "n"'
    refused = "the database refused a value"
    assert detail == {"path": "$", "message": refused, "step": step, "error_id": detail["error_id"]}
    assert result.message == f"step {step}: the database refused a value of the input (error id {detail['error_id']})"
    assert detail["error_id"] in caplog.text


# --- the database busy past its wait: unavailable, 503, retryable ----------------------------


@pytest.fixture
def busy_app(db_url: str) -> Iterator[tuple[App, Any]]:
    """An App whose database waits 0.2 s for a lock, and the handler to try."""
    f, _leaky, note = _feature()
    if db_url.startswith("sqlite"):
        app = App([f], database_url=db_url)
        sa.event.listen(app.engine, "connect", lambda conn, _rec: conn.execute("PRAGMA busy_timeout=200"))
    else:
        app = App([f], database_url=db_url + "?options=-c%20lock_timeout%3D200")
    app.create_all()
    try:
        yield app, note
    finally:
        app.dispose()


def _hold_the_write_lock(app: App) -> Callable[[], None]:
    """Another connection takes what a writing dispatch needs first; returns its release."""
    if app.engine.dialect.name == "sqlite":
        raw = sqlite3.connect(Path(str(app.engine.url.database)), isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")

        def release_sqlite() -> None:
            raw.execute("ROLLBACK")
            raw.close()

        return release_sqlite
    conn = sa.create_engine(app.engine.url).connect()
    conn.execute(sa.text("LOCK TABLE kumiko_events IN EXCLUSIVE MODE"))  # no event can be appended

    def release() -> None:
        conn.rollback()
        conn.close()
        conn.engine.dispose()

    return release


def test_a_database_busy_past_its_wait_is_unavailable_and_a_retry_succeeds(
    busy_app: tuple[App, Any], user: User, caplog: pytest.LogCaptureFixture
) -> None:
    app, note = busy_app
    release = _hold_the_write_lock(app)
    try:
        with caplog.at_level(logging.WARNING, logger="kumiko_typed"):
            result = app.dispatch(note, Say("hello"), user=user)
    finally:
        release()
    assert isinstance(result, Failure), result
    assert (result.code, result.http_status) == ("unavailable", 503)
    assert "the database is busy or unreachable, try again" in said(result)
    assert "locked" not in result.message and "lock timeout" not in result.message  # the driver's words: log only
    assert error_id(result) in caplog.text
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(T8Note.__table__)) == 0
    assert app.dispatch(note, Say("hello"), user=user) == Ok(1)


def test_a_database_without_the_apps_tables_names_the_table_and_create_all(db_url: str, user: User) -> None:
    """A new user's first program without ``app.create_all()``: the dispatch was an
    ``internal_error`` saying only that the step "raised OperationalError" (the table and
    the fix in the log's traceback); now its message names the table and the fix.  A read
    of an entity's table says the same of that table."""
    f, _leaky, note = _feature()
    listed = f.query_handler(
        "list", f.query_pipeline(Say).find_many("notes", lambda c: sa.select(T8Note)).return_(lambda c: ok(None))
    )
    app = App([f], database_url=db_url)
    try:
        fix = "create the App's tables with app.create_all() or a migration (docs/operations.md#tables-and-migrations)"
        written = app.dispatch(note, Say("x"), user=user)
        assert isinstance(written, Failure) and written.code == "internal_error", written
        step = f'step 0 aggregate.create "n" raised {_no_table_class(db_url)}'
        assert said(written).startswith(f"{step}: the database has no table kumiko_events: {fix}"), said(written)
        read = app.query(listed, Say("x"), user=user)
        assert isinstance(read, Failure), read
        assert f"the database has no table t8_note: {fix}" in said(read), said(read)
        app.create_all()
        assert app.dispatch(note, Say("x"), user=user) == Ok(1)
    finally:
        app.dispose()


def _no_table_class(db_url: str) -> str:
    """The class SQLAlchemy gives the database's "no such table"."""
    return "OperationalError" if db_url.startswith("sqlite") else "ProgrammingError"
