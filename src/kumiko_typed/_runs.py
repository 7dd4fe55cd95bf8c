"""Public views of workflow runs (filled by the workflow runtime)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal
from uuid import UUID

import attrs

__all__ = ["RunInfo", "RunStatus"]

RunStatus = Literal["running", "suspended", "completed", "failed", "cancelled"]


@attrs.frozen
class RunInfo:
    """A workflow run as stored: where it is and what its steps hold.  ``error`` is why a
    ``failed`` run failed, or a ``cancelled`` run's reason (code ``cancelled``, ``by``
    the cancelling user's id)."""

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
