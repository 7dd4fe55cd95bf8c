"""The connection a session's transaction runs on, without ``Session.connection()``'s
state machine on every statement.

A pipeline sends its statements on the session's connection (Core, not the ORM's
execute); asking the session for it costs a dozen Python calls each time.  Once the
transaction has its connection, it is taken from the transaction directly (SQLAlchemy's
own bookkeeping of it, pinned to 2.1); anything else — no transaction yet, a savepoint
that has not used the connection, a transaction that is not active, a session with
several binds — asks the session, as before.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session
from sqlalchemy.orm.session import SessionTransactionState
from sqlalchemy.orm.state_changes import _StateChangeState

__all__ = ["connection_of"]

_ACTIVE: _StateChangeState = SessionTransactionState.ACTIVE


def connection_of(session: Session) -> Connection:
    """``session.connection()``: the connection of its current (sub)transaction."""
    transaction: Any = session._transaction
    if transaction is not None and transaction._state is _ACTIVE:
        held = transaction._connections.get(session.bind)
        if held is not None:
            return held[0]  # type: ignore[no-any-return]
    return session.connection()
