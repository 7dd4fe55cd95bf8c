"""A connection the server drops while the App sets its session up (``SET TIME ZONE``, the
first statement of every new PostgreSQL connection) is a lost connection, as one dropped
during any later statement is.

Found by the chaos probe (tests/workflows/test_chaos_workers.py): a worker started while
connections were being cut died with exit status 1.  The setting's ``finally`` restored
``autocommit`` on the dead connection, whose error ("the connection is lost") replaced the
real one, and an error raised while connecting reached the worker without
``connection_invalidated`` (SQLAlchemy asks the psycopg dialect with no connection, which
then never answers "disconnect"), so the worker's first pass took a killed backend for a
wrong URL and stopped instead of trying again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from kumiko_typed import App, Feature
from kumiko_typed._transient import transient

pytestmark = pytest.mark.postgres


@pytest.fixture
def dropping(fresh_postgres_url: str) -> Iterator[tuple[App, list[int]]]:
    """An App whose next ``drops[0]`` new connections the server closes just before their
    session set-up runs (the backend is gone when ``SET TIME ZONE`` is sent)."""
    app = App([Feature("lost")], database_url=fresh_postgres_url)
    app.create_all()  # and the dialect's first connection, which asks the server's version
    app.engine.dispose()  # no pooled connection: the next one is new
    killer = sa.create_engine(fresh_postgres_url)
    drops = [0]

    def drop(dbapi_connection: Any, _record: object) -> None:
        if drops[0] <= 0:
            return
        drops[0] -= 1
        pid = dbapi_connection.info.backend_pid
        with killer.begin() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"
        for _ in range(200):  # until the backend has exited: the socket is closed
            with killer.connect() as conn:
                if not conn.scalar(sa.text(gone), {"pid": pid}):
                    return
            time.sleep(0.01)

    sa.event.listen(app.engine, "connect", drop, insert=True)  # before the App's set-up
    yield app, drops
    app.dispose()
    killer.dispose()


def test_a_connection_dropped_during_its_set_up_is_a_lost_connection(dropping: tuple[App, list[int]]) -> None:
    app, drops = dropping
    drops[0] = 1
    with pytest.raises(sa.exc.OperationalError) as raised, app.engine.connect():
        pass
    assert raised.value.connection_invalidated
    assert transient(raised.value)
    with app.engine.connect() as conn:  # the next connection is a fresh one, set up
        assert conn.scalar(sa.text("SHOW TimeZone")) == "UTC"


def test_a_worker_whose_first_pass_meets_such_a_connection_tries_again(dropping: tuple[App, list[int]]) -> None:
    """A looping worker outlives a lost connection in its very first pass (a wrong URL
    would stop it): here its first connections are dropped while they are set up."""
    app, drops = dropping
    drops[0] = 6  # both sides' LISTEN connections and their first passes' connections
    done: list[dict[str, int]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            done.append(app.run_worker(poll_interval=0.05))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 60
    while drops[0] > 0 and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # passes on good connections
    app.stop_worker()
    worker.join(60)
    assert errors == []
    assert len(done) == 1
