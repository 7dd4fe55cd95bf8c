"""Runs a finished pipeline's steps against one session: the per-call hot path.

Everything that can be decided once (the step tuple, the keys declared inside
sub-pipelines) was decided at import; a call allocates one ``Ctx``, one values
dict and one scope dict, then walks the steps.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID, uuid4

from sqlalchemy.exc import DataError, DBAPIError

from ._ctx import AnyCtx, Ctx, User
from ._errors import ProgramError
from ._eventstore import lock_append_order
from ._limits import Unfit
from ._results import Failure, Ok, fail
from ._steps import StepCrash, run_block
from ._transient import transient

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ._finished import Program
    from ._runs import RunInfo
    from ._runtime import Runtime

logger = logging.getLogger("kumiko_typed")


class Run:
    """The mutable state of one pipeline run; resolvers see it only through ``ctx``."""

    __slots__ = ("ctx", "refused", "runtime", "scope", "session", "values")

    def __init__(
        self, values: dict[str, object], scope: dict[str, object], ctx: AnyCtx, session: Session, runtime: Runtime
    ) -> None:
        self.values = values
        self.scope = scope
        self.ctx = ctx
        self.session = session
        self.runtime = runtime
        #: The Failure a ``guard`` refused with: a retry body tells it from a failed attempt.
        self.refused: Failure | None = None


def start_run(
    finished: Program[Any, Any],
    *,
    runtime: Runtime,
    handler: str,
    payload: object,
    user: User,
    session: Session,
    now: datetime,
    correlation_id: UUID,
    workflow: RunInfo | None = None,
) -> Run:
    """Begin running ``finished`` in ``session``.  Every run starts here — a dispatch, a
    nested ``call_feature``, a workflow segment — so every one gets the same isolation:
    a pipeline that may write an aggregate takes the append lock before its first read,
    so that what it reads and decides on is still current when it writes."""
    if finished.writes_aggregates:
        lock_append_order(session)
    values: dict[str, object] = dict(finished.initial_values)
    scope: dict[str, object] = {}
    steps, scope_view = MappingProxyType(values), MappingProxyType(scope)
    ctx: AnyCtx = Ctx(payload, user, steps, scope_view, session, now, workflow, handler, correlation_id)
    return Run(values, scope, ctx, session, runtime)


def interpret(finished: Program[Any, Any], run: Run, *, handler: str) -> Ok[object] | Failure:
    """Run the steps; an escaping exception becomes ``internal_error`` naming the step."""
    try:
        result = run_block(finished.block, run)
    except StepCrash as crash:
        return crash_failure(crash, f"handler {handler}")
    if result is None:
        return fail("internal_error", f"handler {handler} ran off the end of its pipeline without return_")
    return result


def crash_failure(crash: StepCrash, who: str) -> Failure:
    """The ``Failure`` for an exception that escaped a step of ``who`` (a handler or run).

    Values the framework found not to fit their columns (:class:`Unfit`) are the input's
    fault: ``validation_error`` naming each value's payload field.  So is a value the
    database itself refused as given (its own type or range): ``validation_error`` with
    path ``$`` and an error id, the database's reason — which may quote the value — in
    the log.  Anything else is ``unavailable`` or ``internal_error`` (see
    :func:`exception_failure`)."""
    where = crash.where()
    if isinstance(crash.cause, Unfit):
        problems = crash.cause.problems
        logger.info("%s: step %s: values do not fit their columns: %s", who, where, problems)
        message = f"step {where}: a value does not fit its column: {problems[0]['message']}"
        return fail("validation_error", message, [{**p, "step": where} for p in problems])
    reason = refused_value(crash)
    if reason is not None:
        error_id = uuid4().hex
        logger.info("%s: step %s: the database refused a value (error id %s): %s", who, where, error_id, reason)
        message = f"step {where}: the database refused a value of the input (error id {error_id})"
        # Shaped like the payload's validation errors; which field it was, only the
        # database's reason could tell.
        detail = {"path": "$", "message": "the database refused a value", "step": where, "error_id": error_id}
        return fail("validation_error", message, [detail])
    details = {"path": "/".join(crash.path), "step": crash.step.describe()}
    return exception_failure(crash.cause, f"{who}: step {where}", f"step {where}", details)


def exception_failure(exc: BaseException, context: str, where: str, details: Mapping[str, object]) -> Failure:
    """What the caller of a handler learns of an exception: safe to show any client.

    The database being busy or gone (SQLite still locked after its busy timeout, a lost
    connection, a deadlock) is ``unavailable``: the same call may succeed later.  Any
    other exception is ``internal_error``.  The message names ``where`` it happened, the
    exception's class and an error id; the exception's text — which may quote SQL, bound
    parameters or data — and the traceback go to the log under that id.  Only the
    framework's own refusals of a program (:class:`ProgramError`) keep their text."""
    error_id = uuid4().hex
    details = {**details, "error_id": error_id}
    if isinstance(exc, DBAPIError) and transient(exc):
        logger.warning("%s: the database is unavailable (error id %s): %s", context, error_id, exc.orig)
        message = f"{where}: the database is busy or unreachable, try again (error id {error_id})"
        return fail("unavailable", message, details)
    logger.error("%s raised (error id %s)", context, error_id, exc_info=exc)
    told = f": {exc}" if isinstance(exc, ProgramError) else ""
    return fail("internal_error", f"{where} raised {type(exc).__name__}{told} (error id {error_id})", details)


def refused_value(crash: StepCrash) -> str | None:
    cause = crash.cause
    if isinstance(cause, DataError):  # PostgreSQL's SQLSTATE class 22, psycopg's adaptation
        return next(iter(str(cause.orig).strip().splitlines()), type(cause.orig).__name__)
    if isinstance(cause, OverflowError) and crash.step.kind in _BINDING_KINDS:
        return str(cause)  # SQLite binds integers of at most 64 bits
    return None


#: Steps whose OverflowError comes from binding a value (not from a computation).
_BINDING_KINDS: Final = frozenset(
    {
        "read.find_one",
        "read.get_one",
        "read.find_many",
        "aggregate.create",
        "aggregate.update",
        "aggregate.append_event",
        "unsafe_projection_upsert",
        "unsafe_projection_delete",
    }
)
