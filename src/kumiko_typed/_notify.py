"""Waking idle workers early on PostgreSQL with LISTEN/NOTIFY (polling stays the backstop).

A transaction that appends an event or an outbox row sends one notification, which
PostgreSQL delivers at commit (and drops on rollback); an idle worker listening on
its own connection wakes at once instead of at its next poll.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ._wake import Bell, sleep

__all__ = ["CHANNEL", "Listener", "notify"]

CHANNEL = "kumiko_typed"
logger = logging.getLogger("kumiko_typed")


def notify(session: Session) -> None:
    """Queue one notification for the current transaction (PostgreSQL only)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    if not session.in_transaction():
        session.begin()  # the one the notification is recorded for and commits with
    transaction = session.get_transaction()
    if session.info.get("kumiko_notified") is not transaction:
        session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
        session.info["kumiko_notified"] = transaction


class Listener:
    """A dedicated autocommit connection that LISTENs; ``wait`` returns early on a NOTIFY
    or when one of its bells rings (``_wake``: a stop never needs the database).

    A lost connection (a restarted server) is opened again at the next ``wait``; until
    that succeeds, the bells alone end a wait, as when polling."""

    def __init__(self, engine: Engine) -> None:
        import psycopg  # the PostgreSQL extra: only a PostgreSQL App makes a Listener

        self._engine = engine
        self._errors = (psycopg.Error, DBAPIError)
        self._raw: Any = None
        self._conn: Any = None
        self._open()

    def _open(self) -> bool:
        try:
            raw: Any = self._engine.raw_connection()
            conn: Any = raw.driver_connection
            # The pooled connection is ours alone: a LISTEN needs it outside transactions.
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}")
        except self._errors as exc:
            logger.warning("cannot LISTEN for notifications (polling meanwhile): %s", exc)
            return False
        self._raw, self._conn = raw, conn
        return True

    def wait(self, timeout: float, bells: Sequence[Bell]) -> bool:
        """Block up to ``timeout`` seconds, or until a bell rings; True when a
        notification arrived."""
        if self._conn is None and not self._open():
            sleep(timeout, bells)
            return False
        try:
            # A notification read while the connection did something else (its LISTEN)
            # waits in psycopg, not on the socket: ask for it first, without waiting.
            if self._notified():
                return True
            if not sleep(timeout, bells, self._conn.fileno()):
                return False  # the time is up, or a bell rang
            return self._notified()
        except self._errors as exc:
            logger.warning("lost the LISTEN connection (opening it again): %s", exc)
            with contextlib.suppress(*self._errors):
                self._raw.invalidate()  # dead: not back into the pool
            self._raw = self._conn = None
        return False

    def _notified(self) -> bool:
        """Whether a notification has come, reading what the socket has (no waiting)."""
        return bool(list(self._conn.notifies(timeout=0, stop_after=1)))

    def close(self) -> None:
        if self._raw is not None:
            with contextlib.suppress(*self._errors):
                self._raw.close()
        self._raw = self._conn = None
