"""Fault injection at the k-th statement an engine sends, with the database driver's own
errors (no mock of the library): what the statement-fault tests iterate over every k of
an operation.  ``before_cursor_execute`` runs inside SQLAlchemy's wrapping of the driver's
call, so the driver's error raised there is handled as if the server had sent it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

#: What no Failure.message may quote: SQL, bound parameters, a traceback, the driver's text.
LEAKS = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "[SQL", "[parameters", "Traceback", "injected fault")


def _error(engine: sa.Engine, kind: str) -> BaseException:
    """The driver's error for ``kind``: ``error`` (an operational error the library does
    not retry) or ``busy`` (SQLite still locked; PostgreSQL's lock_timeout)."""
    dbapi: Any = engine.dialect.loaded_dbapi
    if kind == "busy":
        if engine.dialect.name == "sqlite":
            return dbapi.OperationalError("database is locked")
        import psycopg.errors

        return psycopg.errors.LockNotAvailable("injected fault: canceling statement due to lock timeout")
    return dbapi.OperationalError("injected fault")


def _terminate(engine: sa.Engine, conn: Any) -> None:
    """Terminate the PostgreSQL backend of ``conn`` from a second connection, as an
    operator or a failover would: the next thing ``conn`` sends meets a dead socket."""
    pid = conn.connection.dbapi_connection.info.backend_pid
    killer = sa.create_engine(engine.url, poolclass=sa.pool.NullPool)
    try:
        with killer.connect() as other:
            other.execute(sa.text("SELECT pg_terminate_backend(:p, 10000)"), {"p": pid})
    finally:
        killer.dispose()


class Fault:
    """Fails the ``at``-th statement (1-based) sent while armed; ``sent`` counts them."""

    def __init__(self, engine: sa.Engine, at: int, kind: str = "error") -> None:
        self.engine, self.at, self.kind = engine, at, kind
        self.sent: list[str] = []
        self.fired = False

    def __call__(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        self.sent.append(" ".join(statement.split()))
        if len(self.sent) != self.at:
            return
        self.fired = True
        if self.kind == "kill":  # a real one: the backend is terminated under the statement
            _terminate(self.engine, conn)
            return
        raise _error(self.engine, self.kind)


@contextmanager
def failing_at(engine: sa.Engine, at: int, kind: str = "error") -> Iterator[Fault]:
    """Fail the ``at``-th statement ``engine`` sends inside the block (``kind``: see
    :func:`_error`; ``kill``: terminate the PostgreSQL backend running it)."""
    fault = Fault(engine, at, kind)
    sa.event.listen(engine, "before_cursor_execute", fault)
    try:
        yield fault
    finally:
        sa.event.remove(engine, "before_cursor_execute", fault)


def counting(engine: sa.Engine) -> Any:
    """``failing_at`` that never fails: how many statements an operation sends."""
    return failing_at(engine, 0)


def snapshot(app: Any) -> dict[str, list[str]]:
    """Every row of every table of ``app`` (framework tables included), comparable."""
    out: dict[str, list[str]] = {}
    with app.engine.connect() as conn:
        for table in app.tables():
            out[table.name] = sorted(repr(tuple(r)) for r in conn.execute(sa.select(table)))
    return out


def counts(app: Any) -> dict[str, int]:
    return {name: len(rows) for name, rows in snapshot(app).items()}


def no_leak(message: str, *, driver_reason: bool = False) -> None:
    """``message`` quotes no SQL, parameters or traceback; nor the driver's text, unless
    ``driver_reason``: a run's ``unstorable_state`` names the database's reason (its first
    line, ``_poison.refusal``)."""
    leaks = LEAKS[:-1] if driver_reason else LEAKS
    leaked = [word for word in leaks if word in message]
    assert not leaked, (leaked, message)


class CommitKill:
    """Terminates the PostgreSQL backend of the ``at``-th COMMIT (1-based) while armed, just
    before it is sent: the COMMIT meets a dead connection, and nothing of it committed."""

    def __init__(self, engine: sa.Engine, at: int) -> None:
        self.engine, self.at = engine, at
        self.commits = 0

    @property
    def fired(self) -> bool:
        return self.commits >= self.at

    def __call__(self, conn: Any) -> None:
        self.commits += 1
        if self.commits != self.at:
            return
        _terminate(self.engine, conn)


@contextmanager
def killed_at_commit(engine: sa.Engine, at: int) -> Iterator[CommitKill]:
    """Kill the backend of the ``at``-th COMMIT ``engine`` sends in the block (0: count them)."""
    kill = CommitKill(engine, at)
    sa.event.listen(engine, "commit", kill)
    try:
        yield kill
    finally:
        sa.event.remove(engine, "commit", kill)
