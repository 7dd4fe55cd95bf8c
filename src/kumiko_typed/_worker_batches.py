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

After a batch commits, the next starts plain again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy.exc import IntegrityError

from ._segment_savepoint import Redo

__all__ = ["batches"]

T = TypeVar("T")


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
