"""How many due runs a worker's transaction claims at a time, on PostgreSQL.

A transaction resumes up to ``BATCH`` due runs (one COMMIT; the runs' stores sent together
before it).  Claimed all at once (``FOR UPDATE SKIP LOCKED``), the last of them waited,
locked, for the segments of the nine before it, and another worker's claim skips a locked
run: while one worker held runs it had not started, another found nothing to do.  Segments
calling a slow peer made a run wait nine of its latencies with workers idle; at the end of
a backlog, the last batches were worked by one worker each while the others had stopped.

So a transaction claims as many runs at a time as its worker's recent segments run in
``HOLD``, and claims on (after the last run it claimed, in the due order) until it has
resumed ``BATCH``: segments of up to ``HOLD / BATCH`` (10 ms) claim the whole batch at once,
as before; slower ones claim fewer, each further claim a statement in the same transaction,
small beside the segments it stands for.  SQLite has one writer: no other worker could
take a run meanwhile, and there the batch is claimed at once.
"""

from __future__ import annotations

from typing import Final

__all__ = ["HOLD", "ClaimSize"]

#: About how long (seconds) a claimed run may wait for the segments claimed before it.
HOLD: Final = 0.100


class ClaimSize:
    """The size of a worker's next claim, from the wall time its recent segments took."""

    def __init__(self) -> None:
        #: Seconds per resumed run, a running mean weighing the last measure as much as
        #: all before it (a worker whose peer slows down claims less soon); ``None``
        #: before the first.
        self._per_run: float | None = None

    def next(self, left: int) -> int:
        """How many of the ``left`` runs the transaction may still resume to claim now."""
        per_run = self._per_run
        if per_run is None or per_run <= HOLD / left:
            return left
        return min(left, 1 + int(HOLD / per_run))

    def took(self, seconds: float, runs: int) -> None:
        """``runs`` runs (none: nothing to learn) were resumed in ``seconds``."""
        if runs:
            measured = seconds / runs
            self._per_run = measured if self._per_run is None else (self._per_run + measured) / 2
