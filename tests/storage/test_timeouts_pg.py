"""An operator's ``statement_timeout`` (SQLSTATE 57014) or ``lock_timeout`` (55P03) cutting
a handler's statement short is ``unavailable`` (503, "try again"): the database was busy
past the wait it allows, as for a lost deadlock.  The statement timeout was an
``internal_error`` (500).  PostgreSQL only: SQLite has neither setting (its busy timeout is
``test_failure_messages``'s)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import error_id, said
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok

pytestmark = pytest.mark.postgres


class ToCounter(Entity):
    __tablename__ = "to_counter"
    n: Mapped[int] = mapped_column()


@attrs.frozen
class Sleep:
    seconds: float


@attrs.frozen
class Bump:
    id: uuid.UUID


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("timeouts")
    f.entity(ToCounter)
    h = {
        "sleep": f.write_handler(
            "sleep",
            f.pipeline(Sleep)
            .compute("slept", lambda c: c.db.execute(sa.text("SELECT pg_sleep(:s)"), {"s": c.payload.seconds}).all())
            .return_(lambda c: ok(None)),
        ),
        "new": f.write_handler(
            "new",
            f.pipeline(Sleep)
            .create("c", ToCounter, data=lambda c: ToCounter(n=0))
            .return_(lambda c: ok(c.steps["c"].id)),
        ),
        "bump": f.write_handler(
            "bump",
            f.pipeline(Bump)
            .update(
                "c",
                ToCounter,
                id=lambda c: c.payload.id,
                changes=lambda c: {"n": 1},
                skip_optimistic_lock=True,
            )
            .return_(lambda c: ok(c.steps["c"].version)),
        ),
    }
    return f, h


@pytest.fixture
def timed_app(fresh_postgres_url: str) -> Iterator[tuple[App, dict[str, Any]]]:
    """An App whose every connection gives a statement 3 s and a lock wait 200 ms (its
    tables made before: a loaded machine's DDL, or any statement, may take 300 ms, and only
    the tests' own sleeps and held locks are to be cut)."""
    f, h = _feature()
    app = App([f], database_url=fresh_postgres_url)

    def limits(dbapi_connection: Any, _record: object) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 3000")
            cursor.execute("SET lock_timeout = 200")
        dbapi_connection.autocommit = autocommit

    app.create_all()
    sa.event.listen(app.engine, "connect", limits)
    app.engine.dispose()  # the connections made from here on have the limits
    try:
        yield app, h
    finally:
        app.dispose()


def test_a_statement_cut_short_by_statement_timeout_is_unavailable(
    timed_app: tuple[App, dict[str, Any]], user: User, caplog: pytest.LogCaptureFixture
) -> None:
    app, h = timed_app
    with caplog.at_level(logging.WARNING, logger="kumiko_typed"):
        result = app.dispatch(h["sleep"], Sleep(30), user=user)
    failure = failure_of(result, "unavailable")
    assert failure.http_status == 503
    assert said(failure) == 'step 0 compute "slept": the database is busy or unreachable, try again'
    assert "statement timeout" not in failure.message and "pg_sleep" not in failure.message
    assert error_id(failure) in caplog.text and "statement timeout" in caplog.text
    assert app.dispatch(h["sleep"], Sleep(0), user=user) == Ok(None)  # the connection is fine after it


def test_a_row_lock_held_past_lock_timeout_is_unavailable_and_writes_nothing(
    timed_app: tuple[App, dict[str, Any]], user: User
) -> None:
    app, h = timed_app
    counter = ok_data(app.dispatch(h["new"], Sleep(0), user=user))
    with app.engine.connect() as holder:
        holder.execute(sa.select(ToCounter.__table__).where(ToCounter.id == counter).with_for_update()).all()
        result = app.dispatch(h["bump"], Bump(counter), user=user)
        holder.rollback()
    assert failure_of(result, "unavailable").http_status == 503
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(ToCounter.n, ToCounter.version)).one() == (0, 1)
        assert conn.scalar(sa.text("SELECT count(*) FROM kumiko_events")) == 1
    assert app.dispatch(h["bump"], Bump(counter), user=user) == Ok(2)
