"""Listing workflow runs as an operator asks: of a workflow, in some statuses, only the
stranded ones, a page at a time (``app.runs``, ``kumiko-typed runs``).

The filter, the order and the limit are all the database's (one ``SELECT``): an
operator's database keeps every completed run, so a listing must cost the page it
returns, not the table.  A page goes on from the last run of the previous one (keyset),
not from an offset: the list is newest first, so each run started between two pages
would shift an offset by one and list a run twice, and an offset still reads and skips
every row before it.  The order is ``created_at`` descending, then ``run_id`` ascending:
runs started at the same instant (a clock that did not move, a batch of triggers) are
still in one total order, so no run is skipped or repeated at a page's edge.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final, get_args

import attrs
from sqlalchemy import ColumnElement, Select, false, or_, select

from ._pages import checked_cursor, checked_limit
from ._poison import storable_text
from ._runs import RunStatus
from ._status_filter import chosen_statuses
from ._tables import STRANDED, workflow_runs
from ._trigger_view import EVENT_TRIGGER

__all__ = ["SHOWN", "STATUSES", "RunFilter", "keyed_trigger"]

#: Every status a run can have, in its life's order (what ``--status`` offers).
STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)
#: A word users take for a run status, and where it is.
_HINTS: Final = {"stranded": " (a stranded run is suspended: stranded=True lists those)"}

_runs = workflow_runs.c
#: What a listed run shows, in the order ``WorkflowEngine.shown`` takes it: not its
#: payload or trigger key.
SHOWN: Final = (
    _runs.run_id,
    _runs.workflow,
    _runs.status,
    _runs.path,
    _runs.state,
    _runs.wake_at,
    _runs.error,
    _runs.created_at,
    _runs.updated_at,
    _runs.fingerprint,
    _runs.user,
)


def keyed_trigger(tenant_id: uuid.UUID, key: str) -> str:
    """The trigger key of a run started with ``key`` by a user of ``tenant_id``: a key is
    its tenant's, one run per (workflow, tenant, key) by the runs' unique constraint."""
    return f"key:{tenant_id}:{key}"


@attrs.frozen
class RunFilter:
    """Which runs to list, checked: see :meth:`of`."""

    workflow: str | None = None
    statuses: tuple[str, ...] | None = None
    stranded: bool = False
    limit: int | None = None
    before: uuid.UUID | None = None
    tenant_id: uuid.UUID | None = None
    key: str | None = None
    event_id: uuid.UUID | None = None

    @classmethod
    def of(
        cls,
        workflow: str | None,
        status: object,
        stranded: object,
        limit: object,
        before: object,
        tenant_id: object = None,
        key: object = None,
        event_id: object = None,
    ) -> RunFilter:
        """The filter of ``app.runs``' arguments; a ``TypeError`` or ``ValueError`` naming
        the argument and what it takes, never a filter that quietly matches nothing."""
        if not isinstance(stranded, bool):
            raise TypeError(f"stranded must be a bool, not {type(stranded).__name__}")
        if tenant_id is not None and not isinstance(tenant_id, uuid.UUID):  # a str would match no run
            raise TypeError(f"tenant_id must be a UUID, not {type(tenant_id).__name__}")
        if key is not None:
            if not isinstance(key, str):
                raise TypeError(f"key must be a str, not {type(key).__name__}")
            if tenant_id is None:
                raise ValueError("key needs tenant_id: a key is its tenant's (start_workflow(key=) of a user)")
        if event_id is not None and not isinstance(event_id, uuid.UUID):  # a str would match no run
            raise TypeError(f"event_id must be a UUID, not {type(event_id).__name__}")
        return cls(
            workflow,
            chosen_statuses(status, STATUSES, "a run", _HINTS),
            stranded,
            checked_limit(limit),
            checked_cursor("before", before, "a run_id"),
            tenant_id,
            key,
            event_id,
        )

    def select(self, cursor: datetime | None) -> Select[tuple[object, ...]]:
        """The page's statement; ``cursor`` is the ``created_at`` of the run ``before``."""
        where: list[ColumnElement[bool]] = []
        if any(text is not None and storable_text(text) != text for text in (self.workflow, self.key)):
            # A NUL or a lone surrogate names no run (a start key is printable, a workflow's
            # name its code's), so the list is empty, as for an unknown name; sent, it was
            # PostgreSQL's DataError quoting the SQL (SQLite listed nothing), or either
            # driver's UnicodeEncodeError.
            return select(*SHOWN).where(false())
        if self.workflow is not None:
            where.append(_runs.workflow == self.workflow)
        if self.statuses is not None:
            where.append(_runs.status.in_(self.statuses))
        if self.stranded:  # what WorkflowEngine._strand marks, by its mark, not the code a retry's attempt may share
            where += [_runs.status == "suspended", STRANDED]
        if self.tenant_id is not None:  # the starting user's, as the run stores it (``_user_json``)
            where.append(_runs.user["tenant_id"].as_string() == str(self.tenant_id))
        if self.key is not None and self.tenant_id is not None:  # of (workflow, trigger key)
            where.append(_runs.trigger_key == keyed_trigger(self.tenant_id, self.key))
        if self.event_id is not None:  # the trigger key ``_workflow_feed`` starts the run with
            where.append(_runs.trigger_key == f"{EVENT_TRIGGER}{self.event_id}")
        if cursor is not None:  # the first term alone bounds an index range; the rest breaks ties
            where += [_runs.created_at <= cursor, or_(_runs.created_at < cursor, _runs.run_id > self.before)]
        return select(*SHOWN).where(*where).order_by(_runs.created_at.desc(), _runs.run_id).limit(self.limit)
