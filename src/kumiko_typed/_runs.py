"""Public views of workflow runs (filled by the workflow runtime)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import attrs

from ._ctx import User

__all__ = ["RunInfo", "RunStatus", "shown_error", "stranded_by"]

RunStatus = Literal["running", "suspended", "completed", "failed", "cancelled"]


@attrs.frozen
class RunInfo:
    """A workflow run as stored: where it is and what its steps hold.  ``error`` is why a
    ``failed`` run failed, a ``cancelled`` run's reason (code ``cancelled``, ``by`` the
    cancelling user's id), why a ``suspended`` run is stranded (code ``stranded``:
    the deployed definition cannot resume it; it waits, intact, for one that can), why
    a ``suspended`` run waits to try a ``retry``'s body again at ``wake_at`` (its last
    attempt's code and message, with ``attempts`` and ``times``), or
    why a worker tries a ``suspended`` run's segment again at ``wake_at`` (its last try's
    ``version_conflict``, ``unique_violation`` or ``unavailable``, with ``tries``, and
    ``taken``: the id its ``create`` found taken, or the entity and columns of the
    unique constraint its write clashed on)."""

    run_id: UUID
    workflow: str
    status: RunStatus
    path: str | None = None
    steps: Mapping[str, object] = attrs.field(factory=dict)
    wake_at: datetime | None = None
    error: Mapping[str, str] | None = None
    #: When the run was started, and when its row last changed (a step, a wait, the end).
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: The fingerprint of the definition the run started under (a record: whether it
    #: resumes is decided at its step, docs/workflows.md).
    fingerprint: str | None = None
    #: Who started the run, whose tenant and roles its steps act with (a cron-started
    #: run's: the system user, of no tenant: ``uuid.UUID(int=0)``); ``None`` if its stored
    #: user cannot be read (a damaged row is still listed).
    user: User | None = None


def shown_error(error: object) -> dict[str, Any] | None:
    """A run's stored error as callers see it: without the fingerprints of the
    definitions that stranded it (kept for workers, see ``WorkflowEngine.resumable``).  A
    damaged column (not a JSON object) is shown as what it is, not raised: listing runs
    is how an operator finds such a row."""
    if error is None:
        return None
    if not isinstance(error, Mapping):
        return {"code": "unreadable", "message": f"the stored error is a JSON {_json_kind(error)}, not an object"}
    if "stranded_by" not in error:  # most errors: a copy, the caller's own
        return dict(error)
    return {k: v for k, v in error.items() if k != "stranded_by"}


def _json_kind(value: object) -> str:
    kinds = ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string"), (list, "array"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "value")


def stranded_by(error: Mapping[str, Any] | None) -> list[str]:
    """The fingerprints of the definitions that found a run stranded, oldest first (none
    when the stored error is damaged: the worker marks the run again, over it)."""
    marked = error.get("stranded_by") if isinstance(error, Mapping) else None
    return marked.split() if isinstance(marked, str) else []
