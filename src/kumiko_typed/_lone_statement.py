"""A transaction whose one statement is its last, sent alone on PostgreSQL.

psycopg begins a transaction with a ``BEGIN`` of its own round trip before the first
statement, and the ``COMMIT`` is another.  A manual start whose steps send nothing
(compute steps, a wait) writes one row, its run's, with where the run stands: three round
trips for one statement, and psycopg's and SQLAlchemy's work for each, were a third of a
start's wall time and a quarter of its CPU (bench/workflows.py).  Sent in autocommit, that
INSERT is a transaction of its own, as atomic (one row, written whole or not at all), in
one round trip; the session's ``COMMIT`` then finds no transaction and sends nothing.

Only when nothing was sent before it (psycopg's transaction is still idle: a statement of
a step, a claim, a savepoint would have begun it) and nothing can be sent after it: no
ORM change pending that the ``COMMIT``'s flush would send, no deferred constraints checked
where the segment ends (``_deferred_checks``).  SQLite is left as it is: its ``BEGIN
IMMEDIATE`` and ``COMMIT`` are no round trips, and the fsync at the commit is the same.

A connection lost while the statement ran may have committed it, as a lost ``COMMIT``
may: the caller must let a second attempt find it (a start: by its run's own trigger key,
see ``WorkflowEngine.start``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Executable
from sqlalchemy.orm import Session

from ._deferred_checks import checks_deferred
from ._read_only import pending_changes

__all__ = ["alone", "send_alone"]


def alone(session: Session) -> Connection | None:
    """The connection of ``session``'s transaction if a statement sent now, with nothing
    after it, may be sent alone (see the module); else ``None``."""
    conn = session.connection()
    if conn.dialect.name != "postgresql" or checks_deferred(session) or pending_changes(session):
        return None
    from psycopg.pq import TransactionStatus  # the PostgreSQL extra

    driver: Any = conn.connection.driver_connection
    if driver.autocommit or driver.info.transaction_status != TransactionStatus.IDLE:
        return None
    return conn


def send_alone(conn: Connection, statement: Executable, params: dict[str, Any]) -> None:
    """Send ``statement`` on ``conn`` (from :func:`alone`) as a transaction of its own."""
    from psycopg.pq import TransactionStatus

    driver: Any = conn.connection.driver_connection
    driver.autocommit = True
    try:
        conn.execute(statement, params)
    finally:
        # Not on a lost connection (psycopg refuses the change then; SQLAlchemy discards it).
        if driver.info.transaction_status == TransactionStatus.IDLE:
            driver.autocommit = False
