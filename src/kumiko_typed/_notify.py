"""Waking idle workers early on PostgreSQL with LISTEN/NOTIFY (polling stays the backstop).

A transaction that appends an event or an outbox row sends one notification, which
PostgreSQL delivers at commit (and drops on rollback); an idle worker listening on
its own connection wakes at once instead of at its next poll.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

CHANNEL = "kumiko_typed"


def notify(session: Session) -> None:
    """Queue one notification for the current transaction (PostgreSQL only)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    transaction = session.get_transaction()
    if session.info.get("kumiko_notified") is not transaction:
        session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
        session.info["kumiko_notified"] = transaction


class Listener:
    """A dedicated autocommit connection that LISTENs; ``wait`` returns early on a NOTIFY."""

    def __init__(self, engine: Engine) -> None:
        self._raw: Any = engine.raw_connection()
        conn: Any = self._raw.driver_connection
        # The pooled connection is ours alone: a LISTEN needs it outside transactions.
        conn.autocommit = True
        self._conn = conn
        self._conn.execute(f"LISTEN {CHANNEL}")

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when a notification arrived."""
        for _ in self._conn.notifies(timeout=timeout, stop_after=1):
            return True
        return False

    def close(self) -> None:
        self._raw.close()
