"""Operations on stored runs and deliveries, as an acting user: cancelling a run, reading
a completed run's result, requeueing a dead delivery.

Each call names the acting ``user`` (as a dispatch does).  A run or an outbox row of
another tenant is ``not_found`` — the same answer, word for word, as an id that does not
exist, so nothing of it leaks — unless the user has the ``sysadmin`` role, which crosses
tenants as ``call_feature(as_user=...)`` does.  Runs started by a cron trigger, and
outbox rows without a tenant, belong to no tenant: only a sysadmin reaches them.

A cancellation and a worker's segment never interleave: the worker holds the run's row
(``FOR UPDATE`` on PostgreSQL, the one writer's lock on SQLite) from before its segment
until its transaction commits, and :meth:`Operations.cancel` takes the same lock first.
A cancel that arrives during a segment waits for it to commit — the segment's work
stays — and then finds the run where the segment left it: suspended (it is cancelled and
never resumes) or finished (``status_conflict``).  It waits as long as the database waits
for a lock: past SQLite's busy timeout (a worker batch longer than five seconds) or a
PostgreSQL ``lock_timeout`` it is ``unavailable``, and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, TypeVar

from sqlalchemy import Row, delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from ._access import no_tenant
from ._ctx import User
from ._errors import StateError
from ._interpreter import exception_failure, once_more_if_lost, unavailable
from ._notify import notify
from ._outbox import item_of
from ._outbox_types import OutboxItem
from ._poison import storable_text
from ._read_only import reading
from ._results import Failure, Ok, fail, wrong_id
from ._runs import RunInfo, shown_error
from ._tables import outbox, workflow_runs, workflow_waits
from ._workflow_engine import SYSTEM_USER, WorkflowEngine

__all__ = ["MAX_REASON", "Operations"]

#: Only these runs can still change; a cancel stops them.
_CANCELLABLE: Final = frozenset({"running", "suspended"})
#: The longest cancel reason, in characters: a sentence or a ticket reference, not a document.
MAX_REASON: Final = 1000


def _refused(user: object, field: str, value: object) -> Failure | None:
    """The checks every operation starts with: an authenticated user, not of the nil tenant
    unless a sysadmin (as every entry point taking a user: it reaches no run or row, and
    was told ``not_found`` of each), an id that is a UUID."""
    if not isinstance(user, User):
        return fail("access_denied", "an authenticated user is required")
    if (refused := no_tenant(user)) is not None:
        return refused
    if not isinstance(value, uuid.UUID):
        return wrong_id(field, value)
    return None


#: The tenant of a cron-started run (``SYSTEM_USER``'s) and of what it writes: no tenant.
_NO_TENANT: Final = str(SYSTEM_USER.tenant_id)


def _reaches(user: User, tenant: object) -> bool:
    """Whether ``user`` may act on a row of ``tenant`` (``None`` or the nil UUID: of no tenant)."""
    if user.has_role("sysadmin"):
        return True
    return tenant is not None and str(tenant) != _NO_TENANT and str(user.tenant_id) == str(tenant)


def _run_tenant(row: Row[Any]) -> object:
    user = row.user
    return user.get("tenant_id") if isinstance(user, dict) else None


T = TypeVar("T")


def _answered(what: str, attempt: Callable[[], Ok[T] | Failure]) -> Ok[T] | Failure:
    """``attempt``'s answer, as a dispatch answers: a database busy past its wait (a
    segment holding SQLite's write lock longer than the busy timeout, a PostgreSQL
    ``lock_timeout`` on the run's row) or gone is ``unavailable``, any other error
    ``internal_error`` (its traceback logged), never raised; the transaction rolled back.
    Once more if the connection was lost before the COMMIT (``once_more_if_lost``)."""

    def answer() -> Ok[T] | Failure:
        try:
            return attempt()
        except Exception as exc:
            return exception_failure(exc, what, what, {})

    return once_more_if_lost(unavailable, answer)


class Operations:
    """The three calls, over the App's sessions and its workflow engine's codec."""

    def __init__(
        self, sessions: sessionmaker[Session], workflows: WorkflowEngine, clock: Callable[[], datetime]
    ) -> None:
        self._sessions = sessions
        self._workflows = workflows
        self._clock = clock

    def _run(self, session: Session, run_id: uuid.UUID, user: User, *, lock: bool) -> Row[Any] | Failure:
        stmt = select(workflow_runs).where(workflow_runs.c.run_id == run_id)
        row = session.execute(stmt).first()
        if row is not None and _reaches(user, _run_tenant(row)) and lock and self._workflows.postgres:
            # Locked only once it is the user's to act on (a run's tenant never changes):
            # locking first made another tenant's run, busy in a segment, wait and then be
            # ``unavailable`` where an unknown id is ``not_found`` at once.
            row = session.execute(stmt.with_for_update()).first()
        if row is None or not _reaches(user, _run_tenant(row)):
            return fail("not_found", f"no workflow run {run_id}")
        return row

    def cancel(self, run_id: uuid.UUID, user: User, reason: object) -> Ok[RunInfo] | Failure:
        refused = _refused(user, "run_id", run_id)
        if refused is not None:
            return refused
        if not isinstance(reason, str | None):
            return fail("validation_error", "reason must be text", [{"path": "reason", "message": "not text"}])
        if reason is not None and len(reason) > MAX_REASON:  # kept in the run's row, listed with it
            problem = f"must be at most {MAX_REASON} characters long, not {len(reason)}"
            return fail("validation_error", f"reason {problem}", [{"path": "reason", "message": problem}])
        return _answered(f"cancel_run of run {run_id}", lambda: self._cancel(run_id, user, reason))

    def _cancel(self, run_id: uuid.UUID, user: User, reason: str | None) -> Ok[RunInfo] | Failure:
        with self._sessions() as session, session.begin():
            row = self._run(session, run_id, user, lock=True)
            if isinstance(row, Failure):
                return row
            if row.status == "cancelled":  # asked twice: the first reason stands
                return Ok(self._workflows.info(session, row))
            if row.status not in _CANCELLABLE:
                message = f"workflow run {run_id} is {row.status}; only a running or suspended run can be cancelled"
                return fail("status_conflict", message, {"status": row.status})
            error = {"code": "cancelled", "message": storable_text(reason or "cancelled"), "by": str(user.id)}
            columns = {"status": "cancelled", "wake_at": None, "error": error, "updated_at": self._clock()}
            stmt = update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(columns)
            row = session.execute(stmt.returning(*workflow_runs.c)).one()
            session.execute(delete(workflow_waits).where(workflow_waits.c.run_id == run_id))
            return Ok(self._workflows.info(session, row))

    def result(self, workflow: str, run_id: uuid.UUID, user: User) -> Ok[object] | Failure:
        refused = _refused(user, "run_id", run_id)
        if refused is not None:
            return refused
        return _answered(f"result of run {run_id}", lambda: self._result(workflow, run_id, user))

    def _result(self, workflow: str, run_id: uuid.UUID, user: User) -> Ok[object] | Failure:
        with reading(self._sessions) as session:
            row = self._run(session, run_id, user, lock=False)
        if isinstance(row, Failure):
            return row
        if row.workflow != workflow:  # its result is not of the type the caller expects
            return fail("not_found", f"no workflow run {run_id}")
        if row.status != "completed":
            details: dict[str, object] = {"status": row.status}
            if row.error is not None:
                details["error"] = shown_error(row.error)
            return fail("status_conflict", f"workflow run {run_id} is {row.status}, not completed", details)
        if "result" not in row.state:
            return fail("unstorable_state", f"workflow run {run_id} completed before its result was stored")
        try:
            return Ok(self._workflows.codec.decode(row.state["result"]))
        except (StateError, LookupError, TypeError, ValueError) as exc:
            return fail("unstorable_state", f"the result of workflow run {run_id} cannot be read: {exc}")

    def requeue(self, outbox_id: uuid.UUID, user: User) -> Ok[OutboxItem] | Failure:
        refused = _refused(user, "outbox_id", outbox_id)
        if refused is not None:
            return refused
        return _answered(f"requeue of outbox row {outbox_id}", lambda: self._requeue(outbox_id, user))

    def _requeue(self, outbox_id: uuid.UUID, user: User) -> Ok[OutboxItem] | Failure:
        with self._sessions() as session, session.begin():
            row = session.execute(select(outbox).where(outbox.c.id == outbox_id)).first()
            if row is None or not _reaches(user, row.tenant_id):
                return fail("not_found", f"no outbox row {outbox_id}")
            # The status is checked by the update itself: of two requeues at once, one
            # changes the row and the other finds it pending.
            requeued = session.execute(
                update(outbox)
                .where(outbox.c.id == outbox_id, outbox.c.status == "dead")
                .values(status="pending", attempts=0, next_attempt_at=self._clock())
                .returning(*outbox.c)
            ).first()
            if requeued is None:
                message = f"outbox row {outbox_id} is {row.status}; only a dead delivery can be requeued"
                return fail("status_conflict", message, {"status": row.status})
            notify(session)  # a listening worker delivers it now, not at its next poll
        return Ok(item_of(requeued))
