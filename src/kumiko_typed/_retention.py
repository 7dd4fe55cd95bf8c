"""Deleting what an operator no longer needs: expired idempotency keys, delivered outbox
rows, finished workflow runs.

Each grows with every request and is never read again once old; a sent mail's row still
holds its recipients and body.  One batched delete serves all three: ``batch`` rows per
transaction, so a long purge never holds many row locks, nor SQLite's write lock, for long,
and runs beside dispatches and workers.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import ColumnElement, Delete, Engine, Table, bindparam, delete, select, tuple_

from ._interpreter import once_more_if_lost, raised
from ._pages import MOST_ROWS
from ._tables import OUTBOX_SENT, outbox, workflow_runs

__all__ = [
    "FINISHED",
    "checked_age",
    "checked_batch",
    "cutoff",
    "delete_in_batches",
    "purge_outbox",
    "purge_runs",
    "purge_statement",
]

#: Before every row's time: what an age reaching back past the year 1 leaves to delete.
_NEVER: Final = datetime.min.replace(tzinfo=UTC)

#: The run statuses no worker changes again: what ``purge_runs`` may delete.
FINISHED: Final = ("completed", "failed", "cancelled")


def cutoff(now: datetime, age: timedelta) -> datetime:
    """Rows last written at or before this are older than ``age``.  An age longer than the
    calendar behind ``now`` (``timedelta.max``: keep them for good) leaves none; before,
    ``now - age`` overflowed."""
    try:
        return now.astimezone(UTC) - age  # in UTC: the year 1 is stored as it is
    except OverflowError:
        return _NEVER


def checked_age(older_than: object) -> timedelta:
    """``older_than`` of a purge: a ``timedelta`` of 0 or more (0: everything up to now)."""
    if not isinstance(older_than, timedelta):
        raise TypeError(f"older_than must be a datetime.timedelta, not {type(older_than).__name__}")
    if older_than < timedelta(0):
        raise ValueError(f"older_than must not be negative, not {older_than!r}")
    return older_than


def checked_batch(batch: object) -> int:
    if type(batch) is not int or batch < 1:
        raise ValueError(f"batch must be a positive int, not {batch!r}")
    return min(batch, MOST_ROWS)


def purge_statement(table: Table, condition: ColumnElement[bool]) -> Delete:
    """Delete at most ``b_batch`` rows of ``table`` meeting ``condition``, chosen by its
    primary key.  The condition is stated again on the delete itself: on PostgreSQL a row
    changed meanwhile is re-checked against it, so a row that no longer meets it stays."""
    key = list(table.primary_key.columns)
    chosen = select(*key).where(condition).limit(bindparam("b_batch"))
    return delete(table).where(condition, (key[0] if len(key) == 1 else tuple_(*key)).in_(chosen))


def delete_in_batches(engine: Engine, statement: Delete, params: dict[str, Any], batch: int) -> int:
    """Run ``statement`` (a :func:`purge_statement`) one transaction per batch until a batch
    finds fewer rows than it may delete; how many rows were deleted.  A batch whose
    connection was lost under its statement (a pooled one a restart killed) committed
    nothing and runs once more, as a dispatch does."""

    def one_batch() -> int:
        with engine.begin() as conn:
            return int(conn.execute(statement, {**params, "b_batch": batch}).rowcount)

    deleted = 0
    while True:
        n = once_more_if_lost(raised, one_batch)
        deleted += n
        if n < batch:
            return deleted


_O = outbox.c
# Sent rows are never written again (a requeue takes dead ones only).
_PURGE_OUTBOX: Final = purge_statement(outbox, OUTBOX_SENT & (_O.sent_at <= bindparam("b_cutoff")))

_R = workflow_runs.c
# One status at a time, with ``created_at`` bounded as well (a run is changed after it is
# created): the delete reads kumiko_workflow_runs_status_listed's range for that status,
# up to the cutoff, rather than every finished run.
_PURGE_RUNS: Final = purge_statement(
    workflow_runs,
    (_R.status == bindparam("b_status"))
    & (_R.created_at <= bindparam("b_cutoff"))
    & (_R.updated_at <= bindparam("b_cutoff")),
)


def purge_outbox(engine: Engine, before: datetime, batch: int) -> int:
    """Delete the outbox rows sent at or before ``before``; pending and dead rows stay."""
    return delete_in_batches(engine, _PURGE_OUTBOX, {"b_cutoff": before}, batch)


def purge_runs(engine: Engine, before: datetime, statuses: tuple[str, ...], batch: int) -> int:
    """Delete the runs in ``statuses`` (finished ones) last changed at or before ``before``."""
    return sum(
        delete_in_batches(engine, _PURGE_RUNS, {"b_cutoff": before, "b_status": status}, batch) for status in statuses
    )
