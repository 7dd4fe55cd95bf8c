"""The connection a pipeline's statements run on.

A dispatch runs its statements in a connection-level transaction of its own
(:class:`Direct`), not in a ``Session`` transaction: the ORM's begin, commit and close of
a ``SessionTransaction`` (its state machine, snapshot and events) were a tenth of a
``get_one -> update`` dispatch.  The session is still there — the identity map of what
the pipeline read, ``c.db`` for resolvers: from the moment the dispatch's connection is
open, the session is bound to it, so anything that goes through the ORM (``c.db``, a
read only the ORM can run, a savepoint) joins that transaction.  The ORM then commits
only its own part (a flush of what ``c.db`` changed); the dispatch commits or rolls back
the connection, and a ``session.rollback()`` rolls the connection's transaction back too
(the ``Session``'s default ``conservative_savepoint`` join).  A session that began a
transaction of its own first (``c.db`` before any statement of the framework's) keeps it,
and the statements run on its connection, as before.

:func:`connection_of` takes a transaction's connection from the transaction directly
once it has one (SQLAlchemy's own bookkeeping of it, pinned to 2.1), without
``Session.connection()``'s state machine on every statement.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session
from sqlalchemy.orm.session import SessionTransactionState

__all__ = ["DIRECT", "Direct", "connection_of"]

#: ``session.info`` key: the dispatch's :class:`Direct` transaction, while it runs.
DIRECT: Final = "kumiko_direct"
_ACTIVE: Final[Any] = SessionTransactionState.ACTIVE


class Direct:
    """A dispatch's connection and transaction, opened by its first statement (a run that
    sends none opens nothing, so it takes no lock: SQLite's ``BEGIN IMMEDIATE``)."""

    __slots__ = ("connection", "engine")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.connection: Connection | None = None

    def open(self, session: Session) -> Connection:
        connection = self.engine.connect()
        try:
            connection.begin()
        except BaseException:
            connection.close()
            raise
        self.connection = connection
        session.bind = connection  # the ORM's statements from now on join this transaction
        return connection

    def end(self, commit: bool) -> None:
        """Commit (or roll back) and give the connection back; nothing if none was opened."""
        connection, self.connection = self.connection, None
        if connection is None:
            return
        try:
            if connection.in_transaction():  # a session.rollback() may have ended it
                if commit:
                    connection.commit()
                else:
                    connection.rollback()
        finally:
            connection.close()


def connection_of(session: Session) -> Connection:
    """``session.connection()``: the connection of its current (sub)transaction, or of
    the dispatch's :class:`Direct` transaction (opened now if need be)."""
    transaction: Any = session._transaction
    if transaction is None:
        direct = session.info.get(DIRECT)
        if direct is not None:
            return direct.connection or direct.open(session)  # type: ignore[no-any-return]
    elif transaction._state is _ACTIVE:
        held = transaction._connections.get(session.bind)
        if held is not None:
            return held[0]  # type: ignore[no-any-return]
    return session.connection()
