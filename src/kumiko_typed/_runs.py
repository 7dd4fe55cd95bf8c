"""Public views of workflow runs (filled by the workflow runtime)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal
from uuid import UUID

import attrs

from ._ctx import User

__all__ = ["RunInfo", "RunStatus", "is_strand_mark", "put_over", "shown_error", "stranded_by", "unmarked"]

RunStatus = Literal["running", "suspended", "completed", "failed", "cancelled"]


@attrs.frozen
class RunInfo:
    """A workflow run as stored: where it is and what its steps hold.  ``error`` is why a
    ``failed`` run failed, a ``cancelled`` run's reason (code ``cancelled``, ``by`` the
    cancelling user's id), why a ``suspended`` run is stranded (code ``stranded``:
    the deployed definition cannot resume it; it waits, intact, for one that can; the
    error it had before, such as a retry's last failed attempt, is kept beside the
    reason as ``last_code``, ``last_message``, ``last_attempts`` ...), why
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


#: The prefix under which a strand mark keeps the error it was put over (a retry's last
#: failed attempt, a segment's last lost race): what failed last is still told, and
#: comes back when a deploy that can resume the run lifts the mark.
LAST: Final = "last_"


def is_strand_mark(error: object) -> bool:
    """Whether a run's stored error is the library's strand mark.  Told by the member
    only the library writes (``stranded_by``), never by the code: a retry's record has
    its attempt's own code, which may be ``stranded`` too (a called handler's answer)."""
    return isinstance(error, Mapping) and "stranded_by" in error


def put_over(error: object) -> dict[str, str]:
    """What a strand mark keeps of the run's ``error`` it replaces: its members under
    :data:`LAST`; a mark put over a mark (another definition's) keeps what that one kept."""
    if not isinstance(error, Mapping):
        return {}
    if is_strand_mark(error):
        return {k: v for k, v in error.items() if k.startswith(LAST)}
    return {f"{LAST}{k}": v for k, v in error.items() if isinstance(v, str)}


def unmarked(error: Any) -> Any:
    """The error a strand mark was put over, as it was (``None`` if the run had none);
    any other error as it is."""
    if not is_strand_mark(error):
        return error
    return {k[len(LAST) :]: v for k, v in error.items() if k.startswith(LAST)} or None
