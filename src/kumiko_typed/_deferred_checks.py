"""Deferred constraints checked where a worker's segment ends, once a COMMIT refused one.

A worker runs many segments in one transaction, each in a savepoint, and a deferred
constraint (a foreign key declared ``DEFERRABLE INITIALLY DEFERRED``) is checked at the
COMMIT, not where a savepoint ends: one segment's broken key made the COMMIT refuse the
whole transaction, every run's segment with it, at every pass, and the event feed or a
cron cursor stood still behind it.  A worker's loop that sees its COMMIT refused does that
transaction's work again with :func:`check_deferred` marked on the session: each segment's
deferred constraints are then checked before its savepoint ends
(:func:`deferred_now`), so the segment that broke one fails its run alone, answered as a
dispatch's refused COMMIT is.  Only then: the checks cost two statements a segment on
PostgreSQL and a scan of the foreign keys on SQLite.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

__all__ = ["check_deferred", "checks_deferred", "deferred_now"]

_KEY: Final = "kumiko_check_deferred"


def check_deferred(session: Session) -> None:
    """Check each segment's deferred constraints where it ends, in ``session``'s
    transaction (begun, before its first segment).  On SQLite the violations already
    there are noted first: ``foreign_key_check`` lists every row, and only a segment's
    own are its fault."""
    postgres = session.get_bind().dialect.name == "postgresql"
    session.info[_KEY] = frozenset() if postgres else _violations(session)


def checks_deferred(session: Session) -> bool:
    """Whether :func:`check_deferred` marked ``session``: its segments then end with
    :func:`deferred_now`."""
    return _KEY in session.info


def deferred_now(session: Session) -> None:
    """Raise the ``IntegrityError`` the COMMIT would for what the transaction wrote so far.
    PostgreSQL checks the pending deferred constraints when they are made immediate; the
    mode is set back to deferred for the next segment (a constraint declared ``DEFERRABLE
    INITIALLY IMMEDIATE`` is then checked where each segment ends)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SET CONSTRAINTS ALL IMMEDIATE"))
        session.execute(text("SET CONSTRAINTS ALL DEFERRED"))
        return
    if _violations(session) - session.info[_KEY]:
        error = sqlite3.IntegrityError("FOREIGN KEY constraint failed")
        raise IntegrityError("PRAGMA foreign_key_check", None, error)


def _violations(session: Session) -> frozenset[tuple[object, ...]]:
    return frozenset(tuple(row) for row in session.execute(text("PRAGMA foreign_key_check")))
