"""THE transaction runner and the run state, shared by handlers, ``call_feature`` and
workflow segments.

A finished pipeline is a :class:`~kumiko_typed._steps.Block` of steps compiled once
at import.  A call allocates one :class:`Run` (which is also the ``Ctx`` its resolvers
receive), its values dict and their read-only view, and
the block's generated ``run`` runs the steps; control steps (branch, loop, retry) call
their sub-pipelines' ``run``, and a suspended workflow run re-enters the same
code at a :class:`~kumiko_typed._steps.Resume` position — there is no second copy of the
control flow for workflows.

:func:`run_in_scope` is the one place that opens a transaction (or savepoint) for a
program, applies the tenant filter and the append-lock rule, commits on ``Ok`` or a
suspension and rolls back on a ``Failure`` or an exception.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, TypeVarTuple
from uuid import UUID, uuid4

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError, StatementError

from ._access import TENANT_KEY
from ._ctx import AnyCtx, User, WorkflowCtx, correlation_of
from ._errors import (
    PROGRAM_REFUSALS,
    CaughtDatabaseError,
    OutOfRange,
    Problem,
    ProgramError,
    ProjectorFailed,
    Unfit,
    UnreadableEvent,
)
from ._integrity import constraint_failure
from ._missing_table import missing_table
from ._observe import Trace, span, tracing
from ._observe import outcome as traced_outcome
from ._read_only import begin_read_only, pending_changes, write_refused
from ._results import Failure, Ok, fail
from ._sqlite_functions import refused_here
from ._steps._base import Path, Resume, StepCrash, Suspend, locate
from ._tenant_refs import close_scope, open_scope, settle
from ._transient import LOST, exhausted, lost_in_statements, transient

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, SessionTransaction

    from ._finished import Program
    from ._registry import Registry
    from ._runs import RunInfo

__all__ = [
    "Outcome",
    "Run",
    "SegmentRun",
    "WorkflowRun",
    "crash_failure",
    "exception_failure",
    "once_more_if_lost",
    "raised",
    "run_in_scope",
    "start_run",
    "unavailable",
]

logger = logging.getLogger("kumiko_typed")

#: How a program run ends: its result, or (a workflow) where it suspended.
Outcome: TypeAlias = Ok[object] | Failure | Suspend


class WorkflowRun:
    """What a workflow segment's steps need besides the run: the resume value of an
    event wait, the stored loops to re-enter, and how to store a wait's key."""

    __slots__ = ("codec", "event_name", "loops", "resume_value")

    def __init__(
        self,
        codec: Any,
        event_name: Callable[[type[Any]], str],
        loops: Mapping[str, Mapping[str, Any]],
        resume_value: object,
    ) -> None:
        self.codec = codec
        self.event_name = event_name
        self.loops = loops
        self.resume_value = resume_value


class Run(AnyCtx):
    """One pipeline run: its mutable state, and the ``Ctx`` its resolvers receive.

    One object per call, not a ``Ctx`` beside a state object: every object a call builds
    is a measurable share of what a short pipeline costs (bench/interpreter.py, issue
    13).  Resolvers are typed against ``Ctx``, which declares none of the attributes
    below; what they see of the values (``steps``) and the loop items (``scope``) are
    read-only views.  Built only by :func:`start_run`, which stores the attributes
    itself: a Python ``__init__`` is another call per run.
    """

    __slots__ = ("called", "refused", "registry", "scope_items", "segment", "settled", "trace", "values")
    # Not Ctx's: ``Run()`` then stays one call into C, with nothing to store.
    __init__ = object.__init__

    #: The step values; ``steps`` is their read-only view.
    values: dict[str, object]
    registry: Registry
    #: Per-step spans, while the run's own span is recorded (``_observe``).
    trace: Trace | None
    # The slots below are left unset by start_run (each store is a share of a short
    # run's cost) and read through the methods that give their default.
    #: The items of the enclosing ``for_each`` loops: set by the first :meth:`open_scope`.
    scope_items: dict[str, object]
    #: A workflow segment's state (steps that suspend need it): set for a segment only.
    segment: WorkflowRun
    #: The Failure a ``guard`` refused with: a retry body tells it from a failed attempt.
    refused: Failure
    #: A Failure that trying again cannot change (a version the run states, not one it
    #: read; a ``retry``'s last attempt; a ``return_``'s or ``guard``'s own answer): a
    #: worker fails the run with it rather than try the segment again.
    settled: Failure
    #: Set (``True``) on a handler's run that a ``call_feature`` step runs: a program
    #: refusal of its steps leaves it as the crash it is, for that step to raise.
    called: bool

    def open_scope(self) -> dict[str, object]:
        """The loop items, writable: made, and ``scope`` made a view of them, the first
        time a loop (or a resumed run) sets one.  Until then ``scope`` is an empty view."""
        if self.scope is _NO_SCOPE:
            items: dict[str, object] = {}
            self.scope_items = items
            object.__setattr__(self, "scope", MappingProxyType(items))  # Final to resolvers only
            return items
        return self.scope_items

    def workflow_segment(self) -> WorkflowRun | None:
        """The workflow segment this run is, ``None`` for a handler."""
        return getattr(self, "segment", None)

    def guard_refusal(self) -> Failure | None:
        """The Failure a ``guard`` of this run last refused with, if one did."""
        return getattr(self, "refused", None)

    def settled_failure(self) -> Failure | None:
        """The Failure a step of this run marked as one trying again cannot change, if one did."""
        return getattr(self, "settled", None)

    def answered(self, failure: Failure) -> Failure:
        """``failure``, the program's own answer (a ``return_``'s or a ``guard``'s), marked
        settled: every try of a workflow segment gives it again, so a ``version_conflict``
        or ``unique_violation`` it names is the program's decision, no race a worker could
        win by trying the segment again (the run fails with it at once)."""
        self.settled = failure
        return failure

    def crash_failure(self, crash: StepCrash) -> Failure:
        """What this run fails with for ``crash``: :func:`crash_failure`, which logs the
        details.  A ``retry`` stores its message for an attempt it will try again."""
        return crash_failure(crash, self.event.handler, self.payload)


class SegmentRun(Run, WorkflowCtx[object, Mapping[str, object], Mapping[str, object]]):
    """A workflow segment's run: the ``WorkflowCtx`` its resolvers are typed against (its
    ``workflow`` is always set), so what they are told they receive is what they do."""

    __slots__ = ()


#: ``c.scope`` of a run no loop has set an item in.
_NO_SCOPE: Final[Mapping[str, object]] = MappingProxyType({})


def start_run(
    program: Program[Any, Any],
    session: Session,
    registry: Registry,
    call: tuple[str, object, User, datetime, UUID],
    info: RunInfo | None = None,
    workflow: WorkflowRun | None = None,
) -> Run:
    """A fresh run of ``program``; :func:`run_in_scope` runs it.  ``call`` is (handler
    or workflow name, payload, user, now, correlation id); a workflow segment passes
    ``info`` and ``workflow`` (by name; not keyword-only: on CPython 3.11 a function with
    keyword-only defaults is called through a slower path, on every dispatch)."""
    _handler, payload, user, now, _correlation_id = call
    # Any: Ctx's attributes are Final to type checkers, stored here once.
    run: Any = Run() if info is None else SegmentRun()
    run.values = values = {**program.initial_values}
    run.steps = MappingProxyType(values)
    run.scope = _NO_SCOPE
    run.payload = payload
    run.user = user
    run.db = session
    run.now = now
    run._workflow = info
    run._call = call
    run.registry = registry
    run.trace = None
    if workflow is not None:
        run.segment = workflow
    started: Run = run
    return started


def run_in_scope(
    program: Program[Any, Any],
    run: Run,
    *,
    who: str,
    nested: bool | None,
    resume: Resume | None = None,
    keep: Callable[[Outcome], Failure | None] | None = None,
    span_name: str = "kumiko.dispatch",
    read_only: bool = False,
) -> Outcome:
    """Run ``program`` in the session's transaction (begun if it is not; ``nested``: in a
    savepoint of it; ``None``: in the caller's transaction, which the caller ends — a
    worker's segment, see ``_segment_savepoint``), as the run's user's tenant.

    Every program starts here — a dispatch, a nested ``call_feature``, a workflow
    segment — so every one gets the same isolation: no lock is taken up front; what it
    read and decided on is checked when it writes an aggregate (the version it read
    must still be the stream's, see ``_steps.aggregates``).  ``Ok`` and a suspension
    commit (after ``keep``, which writes what must commit with the work, or refuses it
    with a ``Failure``); a ``Failure`` rolls back.  An exception escaping a step becomes a ``Failure`` naming
    the step; any other exception rolls back and is raised.  ``read_only`` (a query, in
    a session with no transaction yet): the database refuses every write, and the
    transaction is rolled back whatever the outcome."""
    if not tracing():
        return _in_transaction(program, run, who, nested, resume, keep, read_only)
    with span(span_name) as current:
        if current is not None:  # attributes and per-step spans only for a recorded run
            attributes = {
                "kumiko.handler": run.event.handler,
                "kumiko.tenant": str(run.user.tenant_id),
                # What the program's events and outbox rows carry: a trace joins them.
                "kumiko.correlation_id": str(correlation_of(run)),
            }
            if run.workflow is not None:
                attributes["kumiko.workflow.run_id"] = str(run.workflow.run_id)
                attributes["kumiko.workflow.path"] = resume_at(resume)
            current.set_attributes(attributes)
            run.trace = Trace(attributes)
        outcome = _in_transaction(program, run, who, nested, resume, keep, read_only)
        traced_outcome(current, outcome)
    return outcome


R = TypeVar("R")
A = TypeVarTuple("A")


def once_more_if_lost(failed: Callable[[R], bool], attempt: Callable[[*A], R], *args: *A) -> R:
    """Run ``attempt`` — a program's whole outermost transaction, from its first
    statement to its COMMIT, as a dispatch, a query or a manual start runs it — and run
    it once more if its connection was lost while a statement ran: a server restarted or
    a pooled connection killed while idle.  No COMMIT was sent, so nothing of it was
    committed; SQLAlchemy has recycled the pool's connections, so the second attempt gets
    a fresh one (what ``pool_pre_ping`` would buy with a round trip per dispatch).
    ``failed``: whether a result is the attempt's ``unavailable`` (the interpreter makes
    a step's lost connection one); a lost connection that escaped is retried the same.
    A connection lost at the COMMIT is never run again — it may have committed — nor
    one that could not connect at all: both stay ``unavailable``.  The engine's
    ``note_lost`` counts the losses (``_transient.LOST``)."""
    before = LOST.counts
    try:
        result = attempt(*args)
    except DBAPIError as exc:
        if not (exc.connection_invalidated and lost_in_statements(before)):
            raise
    else:
        if LOST.counts is before or not failed(result) or not lost_in_statements(before):
            return result
    logger.warning("the connection to the database was lost before COMMIT: the transaction runs again")
    return attempt(*args)


def raised(_result: object) -> bool:
    """The ``failed`` test of a call that answers a database error by raising it (an
    operator's view, a purge's batch) for :func:`once_more_if_lost`: only a lost
    connection that escaped runs it once more."""
    return False


def unavailable(result: object) -> bool:
    """Whether a dispatch's or a query's result is ``unavailable``: the ``failed`` test
    they give :func:`once_more_if_lost`."""
    return isinstance(result, Failure) and result.code == "unavailable"


def resume_at(resume: Resume | None) -> str:
    return "" if resume is None else str(resume.path)


def _in_transaction(
    program: Program[Any, Any],
    run: Run,
    who: str,
    nested: bool | None,
    resume: Resume | None,
    keep: Callable[[Outcome], Failure | None] | None,
    read_only: bool = False,
) -> Outcome:
    session = run.db
    info = session.info
    previous = info.get(TENANT_KEY)
    info[TENANT_KEY] = run.user.tenant_id
    scope, token = open_scope(run.user.tenant_id, session)
    # Not nested: the session's transaction, begun by the caller for work of its own or
    # else by the first statement — a run that sends none begins and commits nothing.
    savepoint = session.begin_nested() if nested else None
    try:
        if read_only:
            begin_read_only(session)
        outcome = _interpret(program, run, who, resume)
        if read_only and not isinstance(outcome, Failure) and pending_changes(session):
            outcome = fail(
                "internal_error", f"{who} changed ORM objects in its read-only transaction; {_WRITE_ELSEWHERE}"
            )
        if keep is not None and not isinstance(outcome, Failure):
            outcome = keep(outcome) or outcome
        if not isinstance(outcome, Failure):
            settle(scope)
    except BaseException:
        if savepoint is not None:
            if savepoint.is_active:
                savepoint.rollback()
        elif nested is not None:
            session.rollback()
        raise
    finally:
        info[TENANT_KEY] = previous
        close_scope(token)
    if nested is None:
        return outcome
    ending = savepoint if savepoint is not None else session if session.in_transaction() else None
    if ending is not None:
        if isinstance(outcome, Failure) or read_only:
            ending.rollback()
        else:
            try:
                ending.commit()
            except BaseException:
                if savepoint is not None:
                    _undo_unreleased(savepoint)
                raise
    return outcome


def _undo_unreleased(savepoint: SessionTransaction) -> None:
    """Undo a savepoint whose RELEASE failed (the database busy, a lost connection).

    SQLAlchemy leaves it inactive and sends nothing for its rollback: every later
    statement of the enclosing transaction raised ``PendingRollbackError`` — a called
    handler's caller rolling back its own savepoint answered ``internal_error`` instead
    of the busy database's ``unavailable`` — and merely forgetting it kept its writes
    in the enclosing transaction (a failed segment's row committed with its failed
    run).  So its writes are rolled back here, as for any failed program; the caller
    then meets the database's own error.  ``_connections``: SQLAlchemy's record of the
    savepoint's connection and its ``NestedTransaction`` (pinned to 2.1, as in
    ``_connection``)."""
    held: Any = savepoint
    unreleased = [(conn, trans._savepoint) for conn, trans, *_ in set(held._connections.values())]
    savepoint.rollback()  # SQLAlchemy's bookkeeping: the savepoint is off the connection
    for conn, name in unreleased:
        if not conn.invalidated:  # a lost connection took the whole transaction with it
            conn.exec_driver_sql(f"ROLLBACK TO SAVEPOINT {name}")


def _interpret(program: Program[Any, Any], run: Run, who: str, resume: Resume | None) -> Outcome:
    try:
        result = program.block.run(run, resume)
    except StepCrash as crash:
        if isinstance(crash.cause, PROGRAM_REFUSALS) and getattr(run, "called", False):
            # A called handler's refusal of the program is its calling step's
            # (``CallFeature``): a ``retry`` around that step then fails the run at once,
            # as for a refusal of its own steps, and the refusal is logged once.
            raise
        if run.workflow_segment() is not None:
            _named(program, crash)
        failure = crash_failure(crash, who, run.payload)
        if crash.exhausted:
            run.settled = failure
        return failure
    except Suspend as suspend:
        if suspend.failed_attempt is not None:
            suspend.failed_attempt.note(run, suspend.path, lambda crash: _named(program, crash))
        return suspend
    if result is None:
        if program.ends_without_return:
            return Ok(None)
        return fail("internal_error", f"{who} ran off the end of its pipeline without return_")
    return result


def _named(program: Program[Any, Any], crash: StepCrash) -> None:
    """Give a workflow's crash the path its run is stored with (``RunInfo.path``: step
    names, ``@retry/do/#2/charge``), not indexes, for its message and details."""
    with contextlib.suppress(LookupError):  # not a path of the program: left as it is
        crash.path[:] = [str(locate(program.steps, Path(tuple(crash.path)), named=False).by_name)]


def crash_failure(crash: StepCrash, who: str, payload: object) -> Failure:
    """The ``Failure`` for an exception that escaped a step of ``who`` (a handler or run).

    Values the framework found not to fit their columns (:class:`Unfit`) are the input's
    fault: ``validation_error`` naming each value's payload field.  So is a value the
    database itself refused as given (its own type or range): ``validation_error`` with
    path ``$`` and an error id, the database's reason — which may quote the value — in
    the log; and a write that breaks a constraint of its table (``_integrity``).
    Anything else is ``unavailable`` or ``internal_error`` (see
    :func:`exception_failure`)."""
    where = crash.where()
    if isinstance(crash.cause, CaughtDatabaseError):
        details = {"path": "/".join(crash.path), "step": crash.step.describe()}
        return _caught_failure(crash.cause.error, who, where, details)
    if isinstance(crash.cause, IntegrityError):
        step = {"step": where}
        broken = constraint_failure(crash.cause, f"{who}: step {where}", f"step {where}", step, payload)
        if broken is not None:
            return broken
    if isinstance(crash.cause, Unfit):
        problems = crash.cause.problems
        logger.info("%s: step %s: values do not fit their columns: %s", who, where, problems)
        message = _naming_the_value(f"step {where}: {crash.cause.lead}: {problems[0]['message']}", problems[0])
        return fail("validation_error", message, [{**p, "step": where} for p in problems])
    if write_refused(crash.cause):
        # The program's bug, logged as any other (the statement, with its values, is in
        # the exception's text: the traceback's, not the message's).
        error_id = uuid4().hex
        logger.error(
            "%s: step %s tried to write in a read-only transaction (error id %s)",
            who,
            where,
            error_id,
            exc_info=crash.cause,
        )
        message = (
            f"step {where} tried to write, and {who} runs in a read-only transaction; {_WRITE_ELSEWHERE}"
            f" (error id {error_id})"
        )
        details = {"path": "/".join(crash.path), "step": crash.step.describe(), "error_id": error_id}
        return fail("internal_error", message, details)
    if _refused_value(crash):
        error_id = uuid4().hex
        # The database's reason quotes the value: in the exception, not the message.
        logger.info(
            "%s: step %s: the database refused a value (error id %s)", who, where, error_id, exc_info=crash.cause
        )
        message = f"step {where}: the database refused a value of the input (error id {error_id})"
        # Shaped like the payload's validation errors; which field it was, only the
        # database's reason could tell.
        detail = {"path": "$", "message": "the database refused a value", "step": where, "error_id": error_id}
        return fail("validation_error", message, [detail])
    details = {"path": "/".join(crash.path), "step": crash.step.describe()}
    if isinstance(crash.cause, ProjectorFailed):
        details["projector"] = crash.cause.projector
    return exception_failure(crash.cause, f"{who}: step {where}", f"step {where}", details)


def _caught_failure(error: DBAPIError, who: str, where: str, details: Mapping[str, object]) -> Failure:
    """The Failure of a step whose resolver caught ``error`` from its own ``c.db``
    statement and went on (``_swallowed``): ``internal_error`` saying the fix, or, for a
    busy or lost database, the ``unavailable`` the error itself would have been (the same
    call may then succeed).  The error's text, which may quote the statement and its
    values, goes to the log under the error id."""
    if transient(error):
        return exception_failure(error, f"{who}: step {where}", f"step {where}", details)
    error_id = uuid4().hex
    name = type(error).__name__
    logger.error(
        "%s: step %s: its resolver caught %s and went on (error id %s)", who, where, name, error_id, exc_info=error
    )
    message = (
        f"step {where}: its resolver caught {name} from a statement it sent through c.db and went on, so nothing"
        " is written (on PostgreSQL a failed statement ends the transaction); send a statement that may fail in a"
        " savepoint of its own (with c.db.begin_nested(): ...), or let the error leave the resolver"
        f" (error id {error_id})"
    )
    return fail("internal_error", message, {**details, "error_id": error_id})


def _naming_the_value(message: str, problem: Problem) -> str:
    """``message`` naming the value that did not fit: its column, and the payload field it
    came from.  A failed run keeps only its error's code and message, and a client may
    show only the message: the details alone named it, so a run's error said a value of
    the step did not fit, not which (a mail's subject, recipient or sender)."""
    named = [problem["column"]] if problem.get("column") else []
    if problem.get("path", "$") != "$":
        named.append(f"from {problem['path']}")
    return f"{message} ({', '.join(named)})" if named else message


def exception_failure(exc: BaseException, context: str, where: str, details: Mapping[str, object]) -> Failure:
    """What the caller of a handler learns of an exception: safe to show any client.

    The database being busy or gone (SQLite still locked after its busy timeout, a lost
    connection, a deadlock) is ``unavailable``: the same call may succeed later.  Any
    other exception is ``internal_error``.  The message names ``where`` it happened, the
    exception's class and an error id; the exception's text — which may quote SQL, bound
    parameters or data — and the traceback go to the log under that id.  Only the
    framework's own refusals of a program (:class:`ProgramError`) keep their text."""
    if isinstance(exc, IntegrityError):  # a flush or a deferred constraint at commit
        broken = constraint_failure(exc, context, where, details, None)
        if broken is not None:
            return broken
    error_id = uuid4().hex
    details = {**details, "error_id": error_id}
    if isinstance(exc, DBAPIError) and transient(exc):
        logger.warning("%s: the database is unavailable (error id %s): %s", context, error_id, exc.orig)
        why = "out of disk, memory or connections" if exhausted(exc) else "busy or unreachable"
        message = f"{where}: the database is {why}, try again (error id {error_id})"
        return fail("unavailable", message, details)
    if isinstance(exc, UnreadableEvent):
        # Its message is the whole story; its cause (cattrs, a field's validator, an
        # upcaster) quotes the stored values, which no log record holds, as in the feed.
        logger.error("%s raised (error id %s): %s", context, error_id, exc)
    else:
        logger.error("%s raised (error id %s)", context, error_id, exc_info=exc)
    told = f": {exc}" if isinstance(exc, ProgramError) else ""
    if (absent := missing_table(exc)) is not None:
        told = f": {absent}"
    return fail("internal_error", f"{where} raised {type(exc).__name__}{told} (error id {error_id})", details)


def _refused_value(crash: StepCrash) -> bool:
    """Whether the database (or a column type binding for it) refused a value of the input."""
    cause = crash.cause
    if isinstance(cause, (DataError, OutOfRange)):  # PostgreSQL's SQLSTATE class 22, psycopg's adaptation
        return True
    if isinstance(cause, OperationalError):
        if refused_here() and _FUNCTION_RAISED in str(cause.orig):
            return True  # SQLite's cast or division, as PostgreSQL's DataError
        if str(cause.orig) == _INTEGER_OVERFLOW:
            return True  # SQLite's sum() or abs() past 64 bits, PostgreSQL's "bigint out of range"
    if crash.step.kind not in _BINDING_KINDS:
        return False
    if isinstance(cause, OverflowError):
        return True  # SQLite binds integers of at most 64 bits
    # A column type refused to bind the value before the database saw it (SQLite's Uuid
    # given text that is no UUID), where PostgreSQL's own cast raises DataError.
    return (
        isinstance(cause, StatementError) and not isinstance(cause, DBAPIError) and isinstance(cause.orig, ValueError)
    )


#: SQLite's error for a connection function that raised (``_sqlite_functions``'s refusals).
_FUNCTION_RAISED: Final = "user-defined function raised exception"
#: SQLite's error for an integer ``sum()`` or ``abs()`` past 64 bits.
_INTEGER_OVERFLOW: Final = "integer overflow"
_WRITE_ELSEWHERE: Final = "a query only reads: do the change in a write handler (app.dispatch)"

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
