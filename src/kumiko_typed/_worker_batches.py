"""How a worker's loop runs its transactions of many segments: one place for the two ways
such a transaction is done again.

A worker resumes due runs, and its event feed starts and wakes runs, many segments to a
transaction.  Two refusals roll the whole transaction back without any run being at fault
yet, and the loop does the same work again, more carefully, before it moves on:

- :class:`~kumiko_typed._segment_savepoint.Redo`: a segment's store was refused outside a
  savepoint; again with a savepoint per segment from the start (``careful``).
- ``IntegrityError`` at the COMMIT: a deferred constraint broke; again with each segment's
  deferred constraints checked where it ends (``checked``, also ``careful``), so the
  segment that broke one fails its run alone.  Refused once more, it is not a segment's:
  it is raised.

After a batch commits, the next starts plain again.  What the batches count is added to
the pass's tally as each commits (:func:`counted`), and so is what each transaction of
a delivery pass records (``_outbox.deliver_due``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from sqlalchemy.exc import IntegrityError

from ._segment_savepoint import Redo

__all__ = ["batches", "counted"]

T = TypeVar("T")
#: What a batch counts: its runs, its (started, resumed) runs, or its deliveries' outcomes
#: (sent, retried, dead).
N = TypeVar("N", int, tuple[int, int], tuple[int, int, int])


def batches(batch: Callable[[bool, bool], tuple[bool, T]], stopping: Callable[[], bool]) -> Iterator[T]:
    """The results of ``batch(careful, checked)`` transactions, each committed, until one
    says there is no more (its first item) or ``stopping()`` says to stop (asked before
    each transaction)."""
    careful = checked = False
    while not stopping():
        try:
            more, result = batch(careful, checked)
        except Redo:
            careful = True
            continue
        except IntegrityError:
            if checked:  # no segment broke a deferred constraint: not one of ours
                raise
            careful = checked = True
            continue
        careful = checked = False
        yield result
        if not more:
            return


def counted(results: Iterable[N], done: dict[str, int] | None, *keys: str) -> Iterator[N]:
    """``results`` as they come, each added to ``done`` under ``keys`` (one per item of a
    tuple) before it is passed on: the counts of a transaction that committed, so that a
    pass the database cuts short later still counts what its committed transactions did.
    Before, such a pass counted none of it (SQLite locked past its busy timeout, say, after
    it had resumed a batch), and its log line and the worker's totals said less than it did."""
    for result in results:
        if done is not None:
            values = result if isinstance(result, tuple) else (result,)
            for key, value in zip(keys, values, strict=True):
                done[key] += value
        yield result
