"""Durable workflows, running side: starting runs, running a segment (from where the
run stands to its next suspension or its end), storing where it stopped, resuming the
due runs, and reading runs back.  The event feed (event triggers and ``wait_for_event``)
is :mod:`kumiko_typed._workflow_feed`, the cron triggers :mod:`kumiko_typed._workflow_cron`.

Every change of a run happens in one transaction together with the work of the
segment it ran, so a worker killed at any instant loses nothing: what it had not
committed is redone by another.  On PostgreSQL, due runs are claimed with
``FOR UPDATE SKIP LOCKED``.  Starts are unique per (workflow, trigger key), so an event
or a cron tick starts one run whatever the number of workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from operator import is_
from types import MappingProxyType
from typing import Any, Final, TypeAlias, TypeVar

import cattrs
from sqlalchemy import (
    Column,
    ColumnElement,
    Integer,
    Row,
    and_,
    bindparam,
    delete,
    false,
    func,
    insert,
    not_,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError, NoResultFound
from sqlalchemy.orm import Session, sessionmaker

from . import _rules
from ._claim_size import ClaimSize
from ._compat import SIBLINGS, Compat, Plan, Stored
from ._ctx import User
from ._deferred_checks import check_deferred, checks_deferred, deferred_now
from ._errors import ClassMismatch, NewerFormat, ProgramError, StateError, UnreadableEvent
from ._eventstore import EventRow
from ._feature import Workflow
from ._fingerprint import fingerprint
from ._finished import Program, WorkflowFinished
from ._idempotency import key_problem
from ._integrity import constraint_failure
from ._interpreter import Outcome, Run, WorkflowRun, once_more_if_lost, run_in_scope, start_run
from ._lazy_parts import PAGE, LateUnreadable, LazyValues, PagedItems, Unread, page_name, pages
from ._limits import json_problems
from ._lone_statement import alone, send_alone
from ._poison import refusal, storable_text
from ._read_only import reading
from ._registry import Registry
from ._results import Failure, Ok
from ._run_listing import SHOWN, RunFilter, keyed_trigger
from ._runs import RunInfo, is_strand_mark, put_over, shown_error, stranded_by, unmarked
from ._segment_savepoint import Redo, SegmentSavepoint, allow_lazy, lazy_savepoint
from ._serialization import FORMAT, FORMAT_KEY, TAG, WITHOUT_VALUE_PAGES, Codec
from ._steps import Path, Resume, Step, Suspend, WaitForEvent, called, locate, unnamed_siblings
from ._steps._block import NOT_A_STEPS_FAILURE
from ._steps.aggregates import taken_id
from ._stored_classes import (
    PAGED,
    PARTS,
    UNREADABLE,
    VALUE_PAGES,
    WOKEN_BY,
    Rebuilt,
    expanded,
    mismatch,
    parts_of,
    read_first,
    read_parts,
    readable_format,
    rebuild,
    unreadable,
)
from ._tables import MAX_STEP_PATH, consumers, events, workflow_parts, workflow_runs, workflow_waits
from ._transient import lost_connection, transient
from ._worker_batches import batches, counted

__all__ = ["BATCH", "SYSTEM_USER", "Definition", "WorkflowEngine"]

logger = logging.getLogger("kumiko_typed")

K = TypeVar("K")
V = TypeVar("V")

BATCH = 10

# Built once: each write passes its row as parameters (no statement built per call).
_INSERT_RUN: Final = insert(workflow_runs)
#: How long (seconds, drawn uniformly) a segment that lost a race waits before it is
#: tried again the first time; each next wait is twice as long, up to ``2**6`` times.
CONFLICT_RETRY_S: Final = (0.2, 1.0)
_LONGEST_WAIT: Final = 6
#: How many tries in a row of a segment that lose a race fail its run (about two and a
#: half minutes of trying): a conflict that no re-read resolves would else be tried for
#: good, and an operator never told.
CONFLICT_TRIES: Final = 10
#: How many tries in a row that the database refuses for now (``unavailable``: a lock
#: another transaction holds, a failover, a lost deadlock) fail its run: about an hour,
#: nine growing waits and then 13-64 s each.  An outage lasts longer than a race; a run
#: failed by one would have to be started again, its steps done again.
UNAVAILABLE_TRIES: Final = 100
#: The codes of a worker's segment that is tried again, not the end of its run: it lost a
#: race on an aggregate or on a unique value, or the database refused it for now
#: (``isolated_segment``).  A clash on a unique value, as a create's on its id, only once
#: for the same constraint (``_try_again``).
_TRIED_AGAIN: Final = frozenset({"version_conflict", "unavailable", "unique_violation"})
#: SQLite's rowid of the one table a statement reads: a NOT NULL column, so that the
#: NULL order SQLite is given for PostgreSQL's (``_sqlite_sql``) is not written for it, which
#: would make SQLite sort what it reads from an index in order.
_ROWID: Final = Column("rowid", Integer(), nullable=False)
#: The SET clause follows the parameters given, besides ``b_run_id``.
_UPDATE_RUN: Final = update(workflow_runs).where(workflow_runs.c.run_id == bindparam("b_run_id"))
#: When the run a page goes on from was started (``list``).
_CREATED: Final = select(workflow_runs.c.created_at).where(workflow_runs.c.run_id == bindparam("b_run_id"))
_INSERT_WAIT: Final = insert(workflow_waits)
_PART: Final = and_(workflow_parts.c.run_id == bindparam("b_run_id"), workflow_parts.c.name == bindparam("b_name"))
_INSERT_PART: Final = insert(workflow_parts)
_READ_PART: Final = select(workflow_parts.c.value).where(_PART)
_UPDATE_PART: Final = update(workflow_parts).where(_PART)
_DELETE_PART: Final = delete(workflow_parts).where(_PART)
_DELETE_PARTS: Final = delete(workflow_parts).where(workflow_parts.c.run_id == bindparam("b_run_id"))
#: A value whose JSON is longer is stored as a part of its own (a loop's items as pages,
#: ``_lazy_parts``), written when it first is and then left as it is: a segment writes
#: what it changed.
PART_MIN: Final = 2048
#: The names of parts one query reads at most (a value's pages): far below the bound
#: parameters a statement may take (SQLite's 32,766).
_READ_AT_ONCE: Final = 500
_DELETE_WAITS: Final = delete(workflow_waits).where(workflow_waits.c.run_id == bindparam("b_run_id"))
_DISARM: Final = (
    update(workflow_waits)
    .where(workflow_waits.c.run_id == bindparam("b_run_id"), workflow_waits.c.armed.is_(True))
    .values(armed=False)
)
#: The definitions a stranded run remembers finding it so (a rolling deploy has two).
_STRANDERS: Final = 8
#: The user of a cron-started run: no person, no tenant.
SYSTEM_USER = User(id=uuid.UUID(int=0), tenant_id=uuid.UUID(int=0), roles=frozenset({"system"}))


class Definition:
    """A registered workflow, compiled: its program, its resume rule and fingerprint."""

    def __init__(self, workflow: Workflow[Any], event_name: Callable[[type[Any]], str]) -> None:
        self.workflow = workflow
        self.name = workflow.name
        pipeline = workflow.pipeline
        if isinstance(pipeline, WorkflowFinished):
            self.program: Program[Any, Any] = pipeline
        else:
            self.program = WorkflowFinished(pipeline.feature, pipeline.payload_type, pipeline.steps, "WorkflowPipeline")
        steps, builder = self.program.steps, self.program.builder
        self.compat = Compat(steps, builder, workflow.renamed, workflow.fill, event_name)
        self.fingerprint = fingerprint(steps, builder, workflow.renamed, workflow.fill, event_name)
        # Finding a step by name scans its block's names: every segment of a run asks
        # for the same few paths, so each answer is kept (bounded: loop iterations make
        # paths many).  The program does not change.
        self._steps: dict[str, Step] = {}
        self._stored: dict[tuple[str, ...], tuple[str, Step, tuple[int | None, ...]]] = {}

    def step_at(self, path: str) -> Step:
        """The step of a stored path (by name; a path stored before names, by index)."""
        step = self._steps.get(path)
        if step is None:
            try:
                step = locate(self.program.steps, self.compat.rename(path), named=True).step
            except LookupError:
                step = locate(self.program.steps, Path.parse(path), named=False).step
            _keep(self._steps, path, step)
        return step

    def stored_at(self, path: Sequence[str]) -> tuple[str, Step, tuple[int | None, ...]]:
        """The stored form (by name) of a path by index in this definition, its step, and
        the count of unnamed siblings at each level (:func:`unnamed_siblings`)."""
        key = tuple(path)
        found = self._stored.get(key)
        if found is None:
            at = locate(self.program.steps, Path(key), named=False)
            found = _keep(self._stored, key, (str(at.by_name), at.step, unnamed_siblings(at)))
        return found

    def stored_path(self, path: Sequence[str]) -> str:
        """The stored form (by name) of a path by index in this definition."""
        return self.stored_at(path)[0]

    def stored_records(self, records: Mapping[str, Any]) -> dict[str, Any]:
        """Loop or retry records keyed by their stored paths."""
        return {self.stored_path(k.split("/")): v for k, v in records.items()}


#: How many answers a definition keeps per question (see ``Definition.step_at``).
_KEPT: Final = 1024


def _keep(answers: dict[K, V], key: K, value: V) -> V:
    """Keep ``value`` as the answer for ``key``, forgetting all once there are too many."""
    if len(answers) >= _KEPT:
        answers.clear()
    answers[key] = value
    return value


def _unavailable(failure: uuid.UUID | dict[str, Any] | None) -> bool:
    """A first segment that failed its run as ``unavailable``."""
    return isinstance(failure, dict) and failure["error"]["code"] == "unavailable"


def _checking(keep: Callable[[Outcome], Failure | None], session: Session) -> Callable[[Outcome], Failure | None]:
    """``keep``, then the deferred constraints of the segment checked inside its savepoint
    (:mod:`kumiko_typed._deferred_checks`): a broken one fails this run alone."""

    def kept(outcome: Outcome) -> Failure | None:
        refused = keep(outcome)
        if refused is None:
            deferred_now(session)
        return refused

    return kept


class Settled(dict[str, Any]):
    """A failed run's columns (:func:`failed`) that trying its segment again cannot
    change, whatever the code (``Run.settled``): a worker stores them rather
    than try the segment again."""


class Taken(dict[str, Any]):
    """A failed run's columns whose segment's write found something ``taken``: a
    ``create`` its id (:func:`~kumiko_typed._steps.aggregates.taken_id`), or a write a
    unique value (:func:`_unique_taken`)."""

    def __init__(self, columns: dict[str, Any], taken: str) -> None:
        super().__init__(columns)
        self.taken = taken


def _raise_damage(stored: Rebuilt | None) -> None:
    """Raise again what a resumed segment's reads found unreadable, though a step caught
    it (a bare ``except:``): the segment is undone, not stored as if it had read."""
    if stored is not None and stored.damage.found is not None:
        raise stored.damage.found


def _run_failed(failure: Failure, run: Run) -> dict[str, Any]:
    columns = failed(failure.code, failure.message)
    if failure is run.settled_failure():
        return Settled(columns)
    taken = taken_id(failure) if failure.code == "version_conflict" else _unique_taken(failure)
    return columns if taken is None else Taken(columns, taken)


def _unique_taken(failure: Failure) -> str | None:
    """The constraint a write's ``unique_violation`` clashed on, as its entity and columns
    (``Customer (email)``): that failure's details, the same on both databases."""
    details = failure.details
    if failure.code != "unique_violation" or not isinstance(details, Mapping):
        return None
    entity, columns = details.get("entity"), details.get("columns")
    if not isinstance(entity, str) or not isinstance(columns, list):  # no write's clash: a step's own answer
        return None
    on = f" ({', '.join(map(str, columns))})" if columns else ""
    return f"{entity}{on}"


def _tries(error: object) -> tuple[int, str | None]:
    """How many tries in a row of its segment a suspended run's stored ``error`` counts
    (:meth:`WorkflowEngine._try_again`'s record), and the id its last try's ``create``
    found taken; ``(0, None)`` for any other error (none, a strand mark)."""
    if not isinstance(error, Mapping) or error.get("code") not in _TRIED_AGAIN:
        return 0, None
    tries, taken = error.get("tries"), error.get("taken")
    counted = int(tries) if isinstance(tries, str) and tries.isascii() and tries.isdigit() else 0
    return counted, taken if isinstance(taken, str) else None


def failed(code: str, message: str) -> dict[str, Any]:
    """The columns of a run that failed (its last state is kept, for inspection).  The
    message is made storable: failing a run must not fail in turn."""
    return {"status": "failed", "error": {"code": code, "message": storable_text(message)}, "wake_at": None}


def _path_too_long(path: str) -> Failure | None:
    """A path its column cannot hold: PostgreSQL refuses it, SQLite would keep it whole."""
    if len(path) <= MAX_STEP_PATH:
        return None
    shown = path if len(path) <= 80 else f"{path[:40]}...{path[-37:]}"
    return Failure("unstorable_state", f"at step {shown}: the path is longer than {MAX_STEP_PATH} characters")


def _unreadable(path: str | None, exc: Exception) -> dict[str, Any]:
    """A stored run this App cannot read (a damaged row) fails; raising instead would
    fail every worker pass that reaches it.  The reason after the path is
    :func:`~kumiko_typed._stored_classes.unreadable`'s, word for word what the
    pre-deploy check reports."""
    return failed("unstorable_state", f"at step {path}: {unreadable(exc)}")


def _before_store(session: Session, outcome: Outcome, *, alone: bool) -> tuple[Suspend | None, SegmentSavepoint | None]:
    """Ready a segment's store: the suspension it stores (``None``: the run completed),
    and the savepoint to hold the store with, if it may be held (``_segment_savepoint``).

    A worker's segment with a lazy savepoint (none else has one): what its steps left
    pending is sent first (in the savepoint, taken now if not yet); a store of one
    statement goes without one if the segment sent nothing else (a refused statement
    is undone alone), a store with an event wait or parts to write (``alone`` false:
    more than one) takes it."""
    suspend = outcome if isinstance(outcome, Suspend) else None
    guard = lazy_savepoint(session)
    if guard is not None:
        session.flush()
        if alone and (suspend is None or suspend.wait is None):
            guard.disarm()
            if guard.may_hold():
                return suspend, guard
    return suspend, None


def _send_held(session: Session, held: list[dict[str, Any]]) -> None:
    """Send a batch's held stores (``_segment_savepoint``): one ``executemany`` per set
    of columns (a suspension sets the path, a completion does not).  One the database
    refuses raises :class:`Redo`: the batch is done again, each store in its segment's
    savepoint, where a refused one fails its run alone."""
    by_columns: dict[frozenset[str], list[dict[str, Any]]] = {}
    for params in held:
        by_columns.setdefault(frozenset(params), []).append(params)
    try:
        for stores in by_columns.values():
            session.execute(_UPDATE_RUN, stores)
    except Exception as exc:
        _raise_for_the_pass(session, exc)
        raise Redo from exc


def _raise_for_the_pass(session: Session, exc: Exception) -> None:
    """Raise what is the worker pass's to handle, not one run's: a transient error (the
    pass is tried again) or a lost connection (it reconnects)."""
    if isinstance(exc, DBAPIError) and transient(exc):
        raise exc
    lost = lost_connection(session)
    if lost is not None:
        raise lost from exc


#: A value no stored part is (``before.get``'s default: ``None`` may be a step's value).
_NOTHING: Final = object()


def _long(encoded: object) -> bool:
    """Whether an encoded value is long enough to be stored as a part of its own."""
    return isinstance(encoded, (list, dict)) and len(json.dumps(encoded)) > PART_MIN


#: A part to write: its name, its value (encoded), and whether it is stored already
#: (then updated, else inserted).
Write: TypeAlias = tuple[str, Any, bool]


def _same_items(loop: Mapping[str, Any], value: object) -> bool:
    """Whether a loop's items are the list ``value``'s, object for object."""
    items = loop["items"]
    return type(value) is list and type(items) is list and len(items) == len(value) and all(map(is_, items, value))


def _as_part(name: str, encoded: object, parts: _Parts) -> bool:
    """Whether the value ``encoded`` is stored as the part ``name`` (then named in
    ``parts.names``, and in its writes unless it is stored so already); else it stays inline."""
    if parts.before.get(name, _NOTHING) == encoded:
        parts.names.append(name)
        return True
    if _long(encoded):
        parts.names.append(name)
        parts.writes.append((name, encoded, name in parts.named))
        return True
    return False


class _Parts:
    """What a suspension stores beside its run's row: the names its state gives the parts
    (``names``), the parts to write and the pages to drop (loops done with, or re-run
    shorter).  ``before``: the parts the segment was resumed with, as stored (pages
    aside; those read, and a value stored as pages read whole, joined, under its
    ``p/<key>``), ``named`` all it names (pages aside); ``paged``: its loops and values
    stored as pages, by name, and their page counts; ``shared``: its values stored as
    pages, by key as stored: their pages' name, count and page size."""

    def __init__(
        self,
        before: Mapping[str, Any],
        named: Collection[str],
        paged: Mapping[str, int],
        shared: Mapping[str, tuple[str, int, int]],
    ) -> None:
        self.before, self.named, self.paged, self.shared = before, named, paged, shared
        self.names: list[str] = []
        self.writes: list[Write] = []
        #: The page count each loop or value stored as pages keeps (one not here keeps none).
        self.kept: dict[str, int] = {}
        #: The values this suspension stores as pages: the state's ``value_pages``.
        self.value_pages: dict[str, dict[str, Any]] = {}

    def dropped(self) -> list[str]:
        """The parts the run stored that it no longer names, pages included."""
        named = set(self.names)
        gone = [name for name in self.named if name not in named]
        for name, had in self.paged.items():
            gone.extend(page_name(name, k) for k in range(self.kept.get(name, 0), had))
        return gone


def _user_json(user: User) -> dict[str, Any]:
    return {"id": str(user.id), "tenant_id": str(user.tenant_id), "roles": sorted(user.roles)}


def _user(data: Mapping[str, Any]) -> User:
    return User(id=uuid.UUID(data["id"]), tenant_id=uuid.UUID(data["tenant_id"]), roles=frozenset(data["roles"]))


def _shown_user(data: object) -> User | None:
    """A listed run's user; ``None`` for a damaged column, which is listed, not raised."""
    if not isinstance(data, Mapping):
        return None
    try:
        return _user(data)
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def _loops(stored: Rebuilt | None, plan: Plan | None) -> dict[str, dict[str, Any]]:
    """The stored loop records, keyed by the path by index a resumed loop looks them up by."""
    if stored is None:
        return {}
    return stored.loops if plan is None else {plan.loops.get(key, key): record for key, record in stored.loops.items()}


def _across(d: Definition, plan: Plan, values: dict[str, Any], scope: dict[str, Any], who: str) -> str | None:
    """Carry a run's stored values over to this definition: renamed keys, filled keys
    (the definition's ``fill`` functions read the values as stored, renamed).  A fill
    that raises is user code failing: what to say of it (its traceback is logged)."""
    for old, new in plan.renamed.items():
        for stored in (values, scope):
            if old in stored:
                stored[new] = stored.pop(old)
    for key in plan.fills:
        try:
            values[key] = called(d.workflow.fill[key], MappingProxyType(LazyValues(values)), "the function")
        except BaseException as exc:
            if isinstance(exc, NOT_A_STEPS_FAILURE):
                raise
            logger.error("%s: fill= for %r raised", who, key, exc_info=exc)
            told = f": {exc}" if isinstance(exc, ProgramError) else ""  # the framework's own text (a coroutine)
            return f'fill= for "{key}" raised {type(exc).__name__}{told} (see the worker\'s log)'
    return None


def _given(d: Definition, plan: Plan | None, run: Run, stored: Rebuilt, who: str) -> str | None:
    """Give a resumed ``run`` the values and scope its run stored, carried over to this
    definition (``plan``); what to say of a ``fill=`` that raised."""
    if not stored.parts:
        return None
    # A part not stored reads as empty, as the plan's shape check reads it.
    values, scope = stored.parts.get("values", {}), stored.parts.get("scope", {})
    problem = None if plan is None else _across(d, plan, values, scope, who)
    if problem is not None:
        return problem
    if any(type(value) is Unread for value in values.values()):
        _read_as_asked(run, values)
    else:
        run.values.update(values)
    run.open_scope().update(scope)
    return None


def _read_as_asked(run: Run, values: Mapping[str, Any]) -> None:
    """Give ``run`` its stored ``values``, those stored as parts read when a step asks
    for them (:class:`LazyValues`, its ``c.steps`` a view of them)."""
    lazy = LazyValues(run.values)
    lazy.update(values)
    resumed: Any = run  # Ctx's steps is Final to resolvers; set as start_run sets it
    resumed.values = lazy
    resumed.steps = MappingProxyType(lazy)


class WorkflowEngine:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: Registry,
        codec: Codec,
        converter: cattrs.Converter,
        workflows: Sequence[Workflow[Any]],
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self.registry = registry
        self.codec = codec
        self.converter = converter
        self.clock = clock
        self.defs = {w.name: Definition(w, registry.event_name) for w in workflows}
        # The schema versions events are read at: a deploy that adds a version (and its
        # upcaster) reads events another could not, with the same classes.
        schemas = sorted((name, registry.schema_version(cls)) for cls, name in registry.event_names.items())
        self._schemas = hashlib.sha256(repr(schemas).encode()).hexdigest()[:8]
        self.postgres = sessions.kw["bind"].dialect.name == "postgresql"
        dialect_insert = postgresql.insert if self.postgres else sqlite.insert
        #: A start claims its trigger key; a second claim of it inserts nothing.
        self._claim_run = (
            dialect_insert(workflow_runs)
            .on_conflict_do_nothing(index_elements=["workflow", "trigger_key"])
            .returning(workflow_runs.c.run_id)
        )
        #: A consumer cursor row (the event feed's, a cron workflow's) made once.
        self.new_consumer = dialect_insert(consumers).on_conflict_do_nothing(index_elements=["name"])
        #: The due runs a pass claims, built once (the definitions do not change), in one
        #: total order, so that a pass can go on past those it has claimed: by ``wake_at``,
        #: ties by ``kumiko_tie``.  That is the run id on PostgreSQL (an incremental sort
        #: over the index's ``wake_at`` order) and SQLite's ``rowid``, which ends every entry
        #: of its index (``status, workflow, wake_at``): by the run id, SQLite sorted every
        #: due run for a batch (180 ms beside 60,000, bench/due_runs.py), by ``rowid`` it
        #: reads the index in order and stops at the batch, as before ties were broken.
        tie: ColumnElement[Any] = workflow_runs.c.run_id if self.postgres else _ROWID
        due = (
            select(workflow_runs, tie.label("kumiko_tie"))
            .where(
                workflow_runs.c.status == "suspended",
                workflow_runs.c.wake_at <= bindparam("now"),
                self.resumable(),
            )
            .order_by(workflow_runs.c.wake_at, tie)
            .limit(BATCH)
        )
        #: The same, after the last run of the pass's previous batch in that order.
        due_after = due.where(
            tuple_(workflow_runs.c.wake_at, tie)
            > tuple_(
                bindparam("after_wake", type_=workflow_runs.c.wake_at.type),
                bindparam("after_tie", type_=tie.type),
            )
        )
        if self.postgres:
            due, due_after = due.with_for_update(skip_locked=True), due_after.with_for_update(skip_locked=True)
        self._due, self._due_after = due, due_after
        #: The same, claiming fewer (``_claim_size``): by how many and whether after a run.
        self._claims = {(BATCH, False): due, (BATCH, True): due_after}
        self._claim_size = ClaimSize()
        #: Before a due run's event-wait timeout is taken: resume the run (locked) with an
        #: answer the feed has not handed it yet, if one came in time; ``True`` if it did.
        #: The event feed's look-back (``EventFeed.answer_before_timeout``), set by it.
        self.answer_before_timeout: Callable[[Session, Row[Any]], bool] = lambda session, run: False

    def _encode(self, value: object) -> Any:
        """``value`` as the run's state stores it; ``StateError`` for a value the codec
        cannot encode, or a string one of the databases cannot store (PostgreSQL refuses a
        NUL and a lone surrogate, SQLite keeps them): refused alike on both."""
        encoded = self.codec.encode(value)
        for _where, problem, _value in json_problems(encoded):
            raise StateError(f"a value cannot be stored: it {problem}")
        return encoded

    def _completed(self, run: Run, outcome: Ok[Any]) -> dict[str, Any] | Failure:
        """The columns of a run that completed, its values all in its row."""
        every = run.values.read_all() if isinstance(run.values, LazyValues) else run.values
        try:
            values = self._encode(dict(every))
        except StateError:
            values = {}
        try:  # what app.result returns: a run completes only with it stored
            result = self._encode(outcome.data)
        except StateError as exc:
            return Failure("unstorable_state", f"the result of return_ cannot be stored: {exc}")
        state = {"values": values, "result": result}
        # A completed run stands at no step: its last wait's path would read as one.
        return {"status": "completed", "path": None, "error": None, "wake_at": None, "state": state}

    def _suspension(
        self,
        d: Definition,
        run: Run,
        outcome: Suspend,
        step: tuple[str, tuple[int | None, ...]],
        parts: _Parts,
    ) -> dict[str, Any]:
        """The state a suspended run stores (``StateError`` for a value it cannot), its
        long values and loop items left out as parts: what to write of them goes to ``parts``.
        ``step``: the kind of the step it stopped at, and the unnamed siblings on its path."""
        kind, siblings = step
        loops = d.stored_records(outcome.records(outcome.loops))
        changed = {at: self._changed_pages(loop["items"]) for at, loop in loops.items()}
        values, joins = self._split_values(dict(run.values), loops, changed, parts)
        state = {
            "values": values,
            "scope": self._encode(dict(run.scope)),
            "loops": self._split_loops(loops, changed, joins, parts),
            "retries": d.stored_records(outcome.records(outcome.retries)),
            "event_wait": outcome.wait is not None,
            "addressing": "name",
            "kind": kind,
            FORMAT_KEY: FORMAT if parts.value_pages else WITHOUT_VALUE_PAGES,
        }
        if parts.names:
            state[PARTS] = list(dict.fromkeys(parts.names))  # a value's pages a loop reads too: once
        if parts.value_pages:
            state[VALUE_PAGES] = parts.value_pages
        if outcome.wait is not None:  # what the deployed definition must still wait for
            state["event"] = outcome.wait.event_type
        if any(n is not None for n in siblings):  # steps found by their order: how many there were
            state[SIBLINGS] = list(siblings)
        return state

    def _changed_pages(self, items: object) -> list[tuple[int, Any]]:
        """The pages of a loop's items stored as pages that the segment read and that now
        encode otherwise (an item changed in place), encoded; none for other items."""
        if not isinstance(items, PagedItems):
            return []
        encoded = ((k, self._encode(page)) for k, page in items.pages.items())
        return [(k, page) for k, page in encoded if page != items.stored[k]]

    def _split_values(
        self,
        values: dict[str, Any],
        loops: Mapping[str, Mapping[str, Any]],
        changed: Mapping[str, list[tuple[int, Any]]],
        parts: _Parts,
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """A suspension's ``values`` encoded as the codec encodes the dict, but a long one
        left out of it as a part (named in ``parts``): written unless it encodes to what
        is stored (``parts.before``: the parts the segment read, as stored).  Compared by
        encoding, not by object: a step that changed a value in place, rather than
        returning a new one, keeps its change, as when the run stored all its values in
        its row.  A value no step read (:class:`Unread`) is as stored: neither encoded
        nor written.

        A long list that a loop of the suspension runs over (``over=`` returned it, and
        its items are its items, object for object: neither changed since but in place,
        which changes both) is stored once, as pages ``p/<key>`` that the loop reads as
        its items: the second value of the pair returns those loops' pages by the loop's
        path.  It stays so while it encodes to what is stored; a value that changed, or
        whose loop changed a page, is stored on its own again (the loop keeps the pages):
        a resumed segment decodes the value and the items apart, as it did when each was
        stored apart, so what a step changes in one is not seen in the other."""
        leaving = {loop["items"].name for at, loop in loops.items() if changed[at]}
        stored = {group[0]: group for group in parts.shared.values()}
        # The values stored as pages, by key, and their pages' names (a read value is no
        # longer an Unread: it is found by its key, as a value's part is).
        groups = {key: group[0] for key, group in parts.shared.items() if key in values}
        held = {}
        for key, value in values.items():
            if type(value) is not Unread:
                held[key] = value
                continue
            if value.name in stored:  # a key renamed since (``_across``)
                groups[key] = value.name
            if value.loaded or value.name in leaving:  # read; or read now, before its loop writes a page
                held[key] = value.get()
            elif value.name in stored:  # as stored: not read, so not changed
                parts.value_pages[key] = self._paged(*stored[value.name], parts)
            else:
                parts.names.append(value.name)
        encoded: dict[str, Any] = self._encode(held)["v"] if held else {}
        # The loops that may read a value's pages: those whose over= returned a list; one
        # loop a value (a page a loop changes must be no other's), and no value's pages
        # but its own (a renamed key's keep their name).
        read_by_loops = {loop["items"].name for loop in loops.values() if isinstance(loop["items"], PagedItems)}
        over = {id(loop["over"]): at for at, loop in loops.items() if type(loop.get("over")) is list}
        joins: dict[str, dict[str, Any]] = {}
        inline: dict[str, Any] = {}
        for key, value in encoded.items():
            group = groups.get(key)
            name = group or f"p/{key}"
            at = over.get(id(held[key]))
            loop = loops[at] if at is not None else None
            free = name not in read_by_loops and (name == group or name not in stored)
            joined = loop is not None and free and _same_items(loop, held[key])
            if group is not None and group not in leaving and parts.before.get(group, _NOTHING) == value:
                desc = self._paged(*stored[group], parts)  # as stored
            elif joined and _long(value):
                desc = self._paginate(name, value, parts)
            else:
                if not _as_part(f"v/{key}", value, parts):
                    inline[key] = value
                continue
            parts.value_pages[key] = desc
            if joined:
                assert at is not None
                joins[at] = desc
                read_by_loops.add(name)
        # The codec's form of a dict (its keys' order with two or more): the parts go back
        # in that order (``_stored_classes.expanded``).
        split = {TAG: "dict", "v": inline, "k": list(values)} if len(values) > 1 else {TAG: "dict", "v": inline}
        return split, joins

    def _split_loops(
        self,
        loops: Mapping[str, Mapping[str, Any]],
        changed: Mapping[str, list[tuple[int, Any]]],
        joins: Mapping[str, dict[str, Any]],
        parts: _Parts,
    ) -> dict[str, dict[str, Any]]:
        """A suspension's loop records encoded, long items left out as pages: a loop's
        items are written at the loop's first suspension (unless they are the pages of
        the value it runs over, ``joins``), and then only the pages a segment read (its
        iterations' items) that now encode otherwise (``changed``: changed in place); the
        pages it did not read are as stored."""
        records: dict[str, dict[str, Any]] = {}
        for at, loop in loops.items():
            record = {"shadows": loop["shadows"], "shadowed": self._encode(loop["shadowed"])}
            items = loop["items"]
            if at in joins:
                record["pages"] = joins[at]
            elif isinstance(items, PagedItems):
                parts.writes.extend((page_name(items.name, k), page, True) for k, page in changed[at])
                record["pages"] = self._paged(items.name, items.length, items.size, parts)
            else:
                encoded_items = self._encode(items)
                if _long(encoded_items):
                    record["pages"] = self._paginate(f"i/{at}", encoded_items, parts)
                else:
                    record["items"] = encoded_items
            records[at] = record
        return records

    @staticmethod
    def _paged(name: str, count: int, size: int, parts: _Parts) -> dict[str, Any]:
        """The ``pages`` of a loop's items or a value stored as the pages of ``name``."""
        parts.names.append(name)
        parts.kept[name] = pages(count, size)
        return {"name": name, "count": count, "size": size}

    def _paginate(self, name: str, items: list[Any], parts: _Parts) -> dict[str, Any]:
        """Store ``items`` (encoded: a loop's, or a value's) as new pages of ``name``: over
        the pages stored so before (a ``retry`` ran the loop again; the value changed), if
        any."""
        had = parts.paged.get(name, 0)
        for k, start in enumerate(range(0, len(items), PAGE)):
            parts.writes.append((page_name(name, k), items[start : start + PAGE], k < had))
        return self._paged(name, len(items), PAGE, parts)

    @staticmethod
    def _store_parts(
        session: Session, run_id: uuid.UUID, writes: Sequence[Write], dropped: Sequence[str], *, everything: bool
    ) -> None:
        """Write the parts a segment produced, drop those its run no longer names (in the
        segment's transaction, with its row); ``everything``: drop all the run's parts."""
        updates = [{"b_run_id": run_id, "b_name": name, "value": value} for name, value, stored in writes if stored]
        inserts = [{"run_id": run_id, "name": name, "value": value} for name, value, stored in writes if not stored]
        if updates:
            session.execute(_UPDATE_PART, updates)
        if inserts:
            session.execute(_INSERT_PART, inserts)
        if everything:
            session.execute(_DELETE_PARTS, {"b_run_id": run_id})
        elif dropped:
            session.execute(_DELETE_PART, [{"b_run_id": run_id, "b_name": name} for name in dropped])

    def parts(self, session: Session, row: Row[Any]) -> dict[str, Any]:
        """The stored parts of a run's row a worker reads before it resumes the run: the
        items of a loop stored whole (form 2).  Its values stored as parts and its loops'
        pages are read as its steps ask for them (:meth:`reader`).  None read for a state
        that names none, nor for one a newer release wrote: :meth:`plan` strands it,
        whatever its parts."""
        try:
            readable_format(row.state)
        except NewerFormat:
            return {}
        names = read_first(row.state)
        return read_parts(session, [row.run_id], names=names)[row.run_id] if names else {}

    @staticmethod
    def reader(session: Session, run_id: uuid.UUID) -> Callable[[str], Any]:
        """How a resumed segment reads a part of its run by name (``None`` if missing)."""

        def read(name: str) -> Any:
            return session.execute(_READ_PART, {"b_run_id": run_id, "b_name": name}).scalar_one_or_none()

        return read

    @staticmethod
    def many_reader(session: Session, run_id: uuid.UUID) -> Callable[[list[str]], Mapping[str, Any]]:
        """How a resumed segment reads parts of its run by their names (a value's pages):
        a query per :data:`_READ_AT_ONCE` names, those missing left out."""

        def read_many(names: list[str]) -> Mapping[str, Any]:
            found: dict[str, Any] = {}
            for start in range(0, len(names), _READ_AT_ONCE):
                chunk = names[start : start + _READ_AT_ONCE]
                found.update(read_parts(session, [run_id], names=chunk)[run_id])
            return found

        return read_many

    # --- starting ------------------------------------------------------------------

    def start(self, workflow: Workflow[Any], payload: object, user: User, key: str | None = None) -> uuid.UUID:
        d = self.defs[workflow.name]  # App.start_workflow took only its own workflows
        trigger = workflow.trigger
        if trigger.kind != "manual":
            # A second run for a tick, or one for an event never appended, as the caller.
            # The words are the rule table's: the plugin says them at the call (kumiko-started-by-trigger).
            started = _rules.trigger_call(trigger.kind, trigger.payload_type.__name__, trigger.cron, trigger.timezone)
            raise TypeError(f"workflow {workflow.name} {_rules.msg_started_by_trigger(started)}")
        if not isinstance(payload, workflow.trigger.payload_type):
            raise TypeError(f"workflow {workflow.name} takes a {workflow.trigger.payload_type.__name__}")
        problem = key_problem(key) if key is not None else None
        if problem is not None:
            raise ValueError(f"workflow {workflow.name}: {problem}")
        run_id = uuid.uuid4()
        # A key is the tenant's: one run per (workflow, tenant, key), by the trigger key's
        # unique constraint.  Without one the trigger key is new by construction.
        trigger_key = f"manual:{run_id}" if key is None else keyed_trigger(user.tenant_id, key)
        try:
            row = self._new_row(d, payload, user, trigger_key, run_id)
        except StateError as exc:
            raise StateError(f"workflow {d.name}: the payload cannot be stored: {exc}") from None

        def first_segment() -> uuid.UUID | dict[str, Any] | None:
            """The run's first segment (its run id if another start claimed the key)."""
            with self.sessions() as session:
                # Begin now, before any step: on SQLite that takes the write lock (BEGIN
                # IMMEDIATE), so nothing commits while the segment runs that it did not see.
                session.connection()
                if key is None:  # nothing to claim: the row is written once, after the segment
                    return self.segment(session, d, run_id, payload, user, None, None, None, nested=False, new_row=row)
                if session.execute(self._claim_run, row).first() is None:
                    # Claimed by a start that has committed (PostgreSQL waited for it).
                    return self._run_of(session, d.name, trigger_key)
                return self.segment(session, d, run_id, payload, user, None, None, None, nested=False)

        failure = once_more_if_lost(_unavailable, first_segment)
        if isinstance(failure, uuid.UUID):
            return failure
        if failure is None:
            return run_id
        # The segment ran in the start's own transaction, which rolled back (its claim
        # with it); the failed run is written alone.
        try:
            with self.sessions() as session, session.begin():
                self._store(session, d.name, run_id, failure, None, new_row=row)
        except IntegrityError:
            # With a key, a concurrent start with it came first.  Without one, no other start
            # has this trigger key: a run under it is this start's own, its first attempt's
            # row committed alone though the connection was lost (``_lone_statement``).
            with self.sessions() as session:
                try:
                    return self._run_of(session, d.name, trigger_key)
                except NoResultFound:
                    pass
            raise
        except Exception as exc:  # not even the failed run could be stored: its payload
            if isinstance(exc, DBAPIError) and transient(exc):
                raise
            raise StateError(f"workflow {d.name}: the run cannot be stored: {refusal(exc)}") from None
        return run_id

    @staticmethod
    def _run_of(session: Session, workflow: str, trigger_key: str) -> uuid.UUID:
        stmt = select(workflow_runs.c.run_id).where(
            workflow_runs.c.workflow == workflow, workflow_runs.c.trigger_key == trigger_key
        )
        run_id: uuid.UUID = session.execute(stmt).scalar_one()
        return run_id

    def _new_row(
        self, d: Definition, payload: object, user: User, trigger_key: str, run_id: uuid.UUID
    ) -> dict[str, Any]:
        now = self.clock()
        return {
            "run_id": run_id,
            "workflow": d.name,
            "trigger_key": trigger_key,
            "status": "running",
            "path": None,
            "payload": self._encode(payload),
            # Its payload's form (no value is stored yet): a worker may resume it from its start.
            "state": {FORMAT_KEY: WITHOUT_VALUE_PAGES},
            "user": _user_json(user),
            "fingerprint": d.fingerprint,
            "wake_at": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
        }

    def create(self, session: Session, d: Definition, payload: object, user: User, trigger_key: str) -> bool:
        """Start the run of a trigger (in a worker's pass) unless one was started for it.
        Its first segment, if it loses a race, is tried again like a resumed one: the
        run is kept, suspended at its start (no caller waits on it, unlike a manual
        start's, which is told of the conflict)."""
        run_id = uuid.uuid4()
        try:
            row = self._new_row(d, payload, user, trigger_key, run_id)
        except StateError as exc:  # an event's value the state cannot hold (NaN on SQLite)
            logger.error("workflow %s: no run for %s, its payload cannot be stored: %s", d.name, trigger_key, exc)
            return False
        if session.execute(self._claim_run, row).first() is None:
            return False  # this trigger already started its run
        self.isolated_segment(session, d, run_id, payload, user, None, None, None, retry_conflict=True)
        return True

    # --- running a segment ---------------------------------------------------------------

    def segment(
        self,
        session: Session,
        d: Definition,
        run_id: uuid.UUID,
        payload: object,
        user: User,
        stored: Rebuilt | None,
        path: str | None,
        resume_value: object,
        *,
        nested: bool | None,
        new_row: dict[str, Any] | None = None,
        plan: Plan | None = None,
    ) -> dict[str, Any] | None:
        """Run from ``path`` (the start if ``None``) to the end or the next suspension and
        store where the run stands after it: the segment's work and its run's row commit
        together (``nested``: in a savepoint of the session's transaction, else in that
        transaction itself; ``None``: in the caller's, which undoes a failed segment,
        see :meth:`isolated_segment`; ``new_row``: a manual start's first segment, whose
        row is inserted with the outcome; ``stored``: what a resumed run stored, decoded
        once by :func:`~kumiko_typed._stored_classes.rebuild`; ``plan``: how it, stored at
        ``path``, goes on under this definition).  A segment that fails the run — a step's failure, a
        value that cannot be stored, a state the database refuses — is rolled back; the
        failed run's columns are returned, for the caller to store alone."""
        # A worker runs many segments in one transaction: what an earlier one loaded is
        # read again when used (a dispatch's isolation: a write is based on its own read).
        session.expire_all()
        who = f"workflow {d.name} run {run_id}"
        info = RunInfo(run_id, d.name, "running", path)
        try:
            loops = _loops(stored, plan)  # its shape checked by the plan's Stored.of
            segment = WorkflowRun(self.codec, self.registry.event_name, loops, resume_value)
            call = (d.name, payload, user, self.clock(), run_id)
            run = start_run(d.program, session, self.registry, call, info=info, workflow=segment)
            problem = None if stored is None else _given(d, plan, run, stored, who)
            if problem is not None:
                return failed("internal_error", f"at step {path}: {problem}")
            resume = None if plan is None else Resume(plan.path)
        except UNREADABLE as exc:
            return _unreadable(path, exc)

        before = stored.stored if stored is not None else {}
        paged = stored.paged if stored is not None else {}
        named = [] if stored is None else [name for name in parts_of(stored.state) if not name.startswith(PAGED)]

        def keep(outcome: Outcome) -> Failure | None:
            """Store the run as it stands after a segment that did not fail it."""
            _raise_damage(stored)
            parts = _Parts(before, named, paged, stored.shared if stored is not None else {})
            if isinstance(outcome, Suspend):
                where, at, siblings = d.stored_at(outcome.path)
                too_long = _path_too_long(where)
                if too_long is not None:
                    return too_long
                try:
                    state = self._suspension(d, run, outcome, (at.kind, siblings), parts)
                except StateError as exc:
                    return Failure("unstorable_state", f"at step {where}: {exc}")
                # Waiting to try a retry's body again, the run says why (its last attempt's
                # error); any other suspension clears the error a run had.
                columns = {
                    "status": "suspended",
                    "path": where,
                    "wake_at": outcome.wake_at,
                    "state": state,
                    "error": None if outcome.failed_attempt is None else outcome.failed_attempt.error,
                }
                dropped = parts.dropped()
            else:
                assert isinstance(outcome, Ok)  # keep is not called for a Failure
                completed = self._completed(run, outcome)
                if isinstance(completed, Failure):
                    return completed
                columns = completed
                dropped = []
            everything = not isinstance(outcome, Suspend) and bool(named or paged)  # all in its row now
            writing = bool(parts.writes or dropped or everything)
            suspend, holder = _before_store(session, outcome, alone=not writing)
            try:  # the run's row first: its parts refer to it
                self._store(session, d.name, run_id, columns, suspend, new_row, holder, last=not writing)
                self._store_parts(session, run_id, parts.writes, dropped, everything=everything)
            except Exception as exc:
                if isinstance(exc, DBAPIError) and transient(exc):
                    raise
                reason = refusal(exc)
                logger.warning("workflow %s run %s: the database refused its state: %s", d.name, run_id, reason)
                message = f"in the segment from step {path or '0'}: the database refused the run's state: {reason}"
                return Failure("unstorable_state", message)
            return None

        outcome = run_in_scope(
            d.program,
            run,
            who=who,
            nested=nested,
            resume=resume,
            keep=_checking(keep, session) if checks_deferred(session) else keep,
            span_name="kumiko.workflow.segment",
        )
        if isinstance(outcome, Failure):
            _raise_damage(stored)
            return _run_failed(outcome, run)
        return None

    def isolated_segment(
        self,
        session: Session,
        d: Definition,
        run_id: uuid.UUID,
        payload: object,
        user: User,
        stored: Rebuilt | None,
        path: str | None,
        resume_value: object,
        plan: Plan | None = None,
        *,
        retry_conflict: bool = False,
        woken_by: uuid.UUID | None = None,
        last_error: object = None,
    ) -> None:
        """A segment in a worker's pass, which runs many in one transaction: a bug outside
        the steps fails this run alone (logged), and the pass goes on.

        ``retry_conflict``: a worker's segment that lost a race on an aggregate
        (``version_conflict``: another transaction wrote it after this segment read it)
        is rolled back and tried again shortly, from the same stored position (a
        triggered run's first segment: from its start, the run suspended there), instead
        of failing the run: nothing it read is lost, and writers take no global lock, so
        such races are expected under load.  So is one the database refused for now
        (``unavailable``: a lock timeout, a lost deadlock or serialization conflict in a
        step): what that code tells a dispatch's caller ("try again") the worker does,
        as no one else would.  ``woken_by``: the event that resumed it,
        noted with the run so that the try again gets that event, not a timeout.
        Tried at most :data:`CONFLICT_TRIES` (or :data:`UNAVAILABLE_TRIES`) times in a row, and not again where no try
        could differ (:meth:`_try_again`); ``last_error``: the run's stored error, which
        counts the tries before this one.

        If the caller allowed it (:func:`~kumiko_typed._segment_savepoint.allow_lazy`),
        the segment's savepoint is taken only when it sends a statement; else at once."""
        guard = lazy_savepoint(session)
        try:
            if guard is not None:
                guard.arm(session)
            nested = True if guard is None else None
            failure = self.segment(
                session, d, run_id, payload, user, stored, path, resume_value, nested=nested, plan=plan
            )
        except LateUnreadable:
            if guard is not None:
                guard.undo(session)
            raise  # the caller strands or fails the run as it stored it
        except Exception as error:
            _raise_for_the_pass(session, error)
            if guard is not None:
                guard.undo(session)
            where = f"in the segment from step {path or '0'}"
            # A constraint broken where the segment ends (a deferred key: ``_tenant_refs``)
            # is the input's, named as a dispatch names it; anything else is a bug.
            broken = None
            if isinstance(error, IntegrityError):
                broken = constraint_failure(error, f"workflow {d.name} run {run_id}", where, {}, None)
            if broken is not None:
                failure = failed(broken.code, broken.message)
            else:
                logger.error("workflow %s run %s failed outside its steps", d.name, run_id, exc_info=error)
                failure = failed("internal_error", f"{where}: {type(error).__name__} (see the worker's log)")
        else:
            lost = None if failure is None else lost_connection(session)
            if lost is not None:
                raise lost
            if guard is not None and failure is None:
                guard.release()
            elif guard is not None:
                guard.undo(session)
        if (
            failure is not None
            and retry_conflict
            and not isinstance(failure, Settled)
            and failure["error"]["code"] in _TRIED_AGAIN
        ):
            failure = self._try_again(session, d, run_id, failure, last_error, path, stored, woken_by)
        if failure is not None:
            self._store(session, d.name, run_id, failure, None)

    def _try_again(
        self,
        session: Session,
        d: Definition,
        run_id: uuid.UUID,
        failure: dict[str, Any],
        last_error: object,
        path: str | None,
        stored: Rebuilt | None,
        woken_by: uuid.UUID | None,
    ) -> dict[str, Any] | None:
        """Keep a run whose segment lost a race or was refused for now suspended, to be
        tried again after a wait that doubles with each try (``None``); or, what the run
        fails with instead: its :data:`CONFLICT_TRIES`-th try in a row (``unavailable``:
        :data:`UNAVAILABLE_TRIES`-th), or a ``create`` of
        the id its last try found taken (the segment, run again after that id was taken,
        decided to create it again: no further try would differ), or a write that clashes
        on the unique constraint its last try clashed on (the segment, run again after
        the value was taken, wrote it again: it did not read the row its first try
        missed, and will not).

        While it is tried again the run's error says so, as the run is: its code and
        message, the tries so far and the id (or unique constraint) its write found taken
        (``tries``, ``taken``); ``wake_at`` is the next try.  A segment that gets through
        clears it."""
        tries, taken_before = _tries(last_error)
        tries += 1
        error = failure["error"]
        code, message = error["code"], error["message"]
        taken = failure.taken if isinstance(failure, Taken) else None
        where = f"the segment from step {path or '0'}"
        if taken is not None and taken == taken_before:
            what, does = ("its unique value", "writes") if code == "unique_violation" else ("the id", "creates")
            logger.warning("workflow %s run %s: %s takes %s again; the run fails", d.name, run_id, where, what)
            again = f"{where} was tried again after {what} was taken and {does} it again, as every try would"
            return failed(code, f"{message} ({again})")
        bound = UNAVAILABLE_TRIES if code == "unavailable" else CONFLICT_TRIES
        if tries >= bound:
            logger.warning("workflow %s run %s: %s lost %d tries in a row; the run fails", d.name, run_id, where, tries)
            return failed(
                code,
                f"{message} ({where} was tried {tries} times, and every try lost a race or was refused for now; "
                "start the run again, or give the contended steps a retry(...) with the attempts they need)",
            )
        wait = random.uniform(*CONFLICT_RETRY_S) * 2 ** min(tries - 1, _LONGEST_WAIT)
        wake = self.clock() + timedelta(seconds=wait)
        logger.info("workflow %s run %s: %s (try %d); tried again at %s", d.name, run_id, code, tries, wake)
        record = {"code": code, "message": f"{message} (try {tries} of {bound}; the next at wake_at)"}
        record["tries"] = str(tries)  # text, as every value of a run's error (RunInfo.error)
        if taken is not None:
            record["taken"] = taken
        # Due again here: a strand mark another deploy left no longer holds.
        columns: dict[str, Any] = {"status": "suspended", "error": record, "wake_at": wake}
        if woken_by is not None:
            columns["state"] = {**(stored.state if stored is not None else {}), WOKEN_BY: str(woken_by)}
        self._store(session, d.name, run_id, columns, None)
        return None

    def _store(
        self,
        session: Session,
        workflow: str,
        run_id: uuid.UUID,
        columns: dict[str, Any],
        suspend: Suspend | None,
        new_row: dict[str, Any] | None = None,
        holder: SegmentSavepoint | None = None,
        *,
        last: bool = True,
    ) -> None:
        """Write where the run stands after a segment: update its row (or let ``holder``
        hold that UPDATE for the end of the worker's batch), or insert ``new_row`` with it
        (a manual start's first segment); arm the event wait it suspended at.  ``last``:
        nothing of the segment is written after this (its parts are)."""
        columns["updated_at"] = self.clock()
        wait = None if suspend is None else suspend.wait
        if new_row is not None:
            # The run's row is the transaction's last statement (an event wait's and its
            # parts' are others): alone on PostgreSQL if it is also its first
            # (``_lone_statement``).
            conn = alone(session) if wait is None and last else None
            if conn is not None:
                send_alone(conn, _INSERT_RUN, {**new_row, **columns})
            else:
                session.execute(_INSERT_RUN, {**new_row, **columns})
        elif holder is not None:
            holder.hold({"b_run_id": run_id, **columns})
        else:
            session.execute(_UPDATE_RUN, {"b_run_id": run_id, **columns})
        if wait is not None:
            session.execute(
                _INSERT_WAIT,
                {
                    "run_id": run_id,
                    "workflow": workflow,
                    "path": columns["path"],
                    "event_type": wait.event_type,
                    "tenant_id": wait.tenant_id,
                    "key": wait.key,
                    "after_position": wait.after.position,
                    "after_tx": wait.after.tx,
                    "own_tx": wait.after.own_tx,
                    "after_snapshot": wait.after.snapshot,
                    "armed": False,
                    "timeout_at": wait.timeout_at,
                },
            )

    def resume(self, session: Session, row: Row[Any], resume_value: object, woken_by: uuid.UUID | None = None) -> bool:
        """Go on with a suspended run (its row locked by the caller) from where it stopped,
        if this definition can (:mod:`kumiko_typed._compat`); else mark it stranded and
        leave it as it is, for a definition that can.  ``False``: the run was left so.

        ``resume_value``: the event that woke it (``woken_by`` its id), or ``None`` when
        its wake time came: then the event a lost race left noted with the run, if any."""
        if row.workflow not in self.defs:
            return False  # not this App's workflow: another deployment's, or retired
        d = self.defs[row.workflow]
        try:
            parts = self.parts(session, row)
        except UNREADABLE as exc:  # its names of parts damaged
            self._fail_unreadable(session, d, row, exc)
            return True
        plan: Plan | None = None  # a run kept at its start (see create) goes on from there
        if row.path is not None:
            decided = self.plan(session, row, parts)
            if isinstance(decided, str):
                return False
            if decided is None:
                return True
            plan = decided
        try:
            # Read before anything of the run changes: a class this deploy cannot rebuild
            # (a stored value's, or the event a lost race left noted) strands the run as
            # it is, its event wait included.
            read, read_many = self.reader(session, row.run_id), self.many_reader(session, row.run_id)
            rebuilt = rebuild(self.codec, d.workflow, row.payload, row.state, parts, read, read_many)
            user = _user(row.user)
            noted = self.noted_event(session, d, row.path, row.state) if woken_by is None else None
            if noted is not None:
                woken_by, resume_value = noted
        except UNREADABLE as exc:
            return self._not_read(session, d, row, exc)
        # A page of a loop's items that cannot be read is met only as the segment runs
        # (``LateUnreadable``): the run is then left as stored, its event wait with it.
        waits = session.begin_nested() if rebuilt.paged and row.state.get("event_wait", True) else None
        if row.state.get("event_wait", True):  # runs stored before the flag existed: look
            session.execute(_DELETE_WAITS, {"b_run_id": row.run_id})
        try:
            self.isolated_segment(
                session,
                d,
                row.run_id,
                rebuilt.payload,
                user,
                rebuilt,
                row.path,
                resume_value,
                plan,
                retry_conflict=True,
                woken_by=woken_by,
                last_error=unmarked(row.error),  # a strand mark keeps the count of tries it was put over
            )
        except LateUnreadable as late:  # the segment is undone
            if waits is not None:
                waits.rollback()
            return self._not_read(session, d, row, late.cause)
        if waits is not None:
            waits.commit()
        return True

    def _not_read(self, session: Session, d: Definition, row: Row[Any], exc: Exception) -> bool:
        """Leave a run whose stored values (or noted event) reading raised ``exc`` (one of
        :data:`UNREADABLE`): stranded, for a class this deploy does not have as stored
        (``False``: left for another deploy); else failed as damaged (``True``: done with)."""
        if isinstance(exc, ClassMismatch):
            self._strand(session, d, row, mismatch(row.path, exc), reader=True)
            return False
        self._fail_unreadable(session, d, row, exc)
        return True

    def noted_event(
        self, session: Session, d: Definition, path: str | None, state: Mapping[str, Any]
    ) -> tuple[uuid.UUID, object] | None:
        """The event a run's ``state`` notes as the one that woke it before its segment
        lost a race, and its id, read again; ``None`` if it notes none.  Raises as
        :func:`~kumiko_typed._stored_classes.rebuild` does: the worker reads it before it
        resumes the run, the pre-deploy check to say what the worker will."""
        if WOKEN_BY not in state:
            return None
        noted = state[WOKEN_BY]
        try:
            event_id = uuid.UUID(noted if isinstance(noted, str) else "")
        except ValueError:
            raise ValueError(f"{WOKEN_BY}, the event noted as the one that woke the run, is no event id") from None
        return event_id, self._event_again(session, d, path, event_id)

    def _event_again(self, session: Session, d: Definition, path: str | None, event_id: uuid.UUID) -> object:
        """The event that woke the run at ``path`` before its segment lost a race, read
        again from the event store (events are never changed)."""
        if path is None:
            raise LookupError(f"a run at its start waits for no event, yet it noted event {event_id}")
        step = d.step_at(path)
        if not isinstance(step, WaitForEvent):
            raise LookupError(f"step {path} waits for no event, yet the run noted event {event_id}")
        stored = session.execute(select(events).where(events.c.event_id == event_id)).first()
        if stored is None:
            raise LookupError(f"the event {event_id} that woke the run is gone from the event store")
        if stored.type != self.registry.event_name(step.event):
            raise LookupError(f"the event {event_id} noted as the one that woke the run is no {step.event.__name__}")
        try:
            woke = f"the event {event_id} that woke the run"
            return self.registry.load(EventRow(**stored._mapping), step.event, woke)
        except UnreadableEvent as exc:  # the event is intact (events are never changed): a deploy's doing
            raise ClassMismatch(str(exc)) from exc

    def plan(self, session: Session, row: Row[Any], parts: Mapping[str, Any] | None = None) -> Plan | str | None:
        """How this App's definition resumes a suspended run of it (its row locked by the
        caller; ``parts`` its stored parts, read if not given): the plan; or the reason it
        cannot, the run marked stranded (also one a newer release wrote); or ``None``, the
        run failed because its stored state cannot be read."""
        d = self.defs[row.workflow]
        try:
            readable_format(row.state)
            if parts is None:
                parts = self.parts(session, row)
            plan = d.compat.plan(Stored.of(row.path, expanded(row.state, parts, paged=False, values=False)))
        except NewerFormat as exc:
            reason = mismatch(row.path, exc)
            self._strand(session, d, row, reason, reader=True)
            return reason
        except UNREADABLE as exc:
            self._fail_unreadable(session, d, row, exc)
            return None
        if isinstance(plan, str):
            self._strand(session, d, row, plan)
        return plan

    def waits_again(self, session: Session, row: Row[Any]) -> bool:
        """Whether this App takes up the event wait of a suspended run (its row locked by
        the caller), which its feed then arms: its definition can resume it (else the run
        is marked stranded, or failed, see :meth:`plan`).  A run another deploy stranded
        is read, too, as :meth:`resume` reads it (its classes may be what that deploy
        lacked); if this App can, the mark goes, in the caller's transaction: the run
        waits, not listed as stranded, and why it was is logged."""
        d = self.defs[row.workflow]
        try:
            parts = self.parts(session, row)
        except UNREADABLE as exc:  # its names of parts damaged
            self._fail_unreadable(session, d, row, exc)
            return False
        if not isinstance(self.plan(session, row, parts), Plan):
            return False
        error = row.error
        if not is_strand_mark(error):
            return True
        try:
            # Every value and item, as the check reads them: a deploy that found the run
            # stranded may have lacked a class any of them names.
            rebuild(self.codec, d.workflow, row.payload, row.state, read_parts(session, [row.run_id])[row.run_id])
        except UNREADABLE as exc:
            self._not_read(session, d, row, exc)
            return False
        # The error the mark was put over (a lost race's count) is the run's again.
        session.execute(_UPDATE_RUN, {"b_run_id": row.run_id, "error": unmarked(error), "updated_at": self.clock()})
        logger.info(
            "workflow %s run %s waits again under this deploy; it had been stranded: %s",
            d.name,
            row.run_id,
            error.get("message"),
        )
        return True

    def _fail_unreadable(self, session: Session, d: Definition, row: Row[Any], exc: Exception) -> None:
        """Fail a run whose stored row is damaged, and drop its event wait: no event can
        resume a failed run, and the feed would else arm and match it for nothing."""
        session.execute(_DELETE_WAITS, {"b_run_id": row.run_id})
        self._store(session, d.name, row.run_id, _unreadable(row.path, exc), None)

    def _reader(self, d: Definition) -> str:
        """The mark of a run this deploy cannot read (:class:`ClassMismatch`): the
        definition, the classes it reads with, the events' schema versions, the payload
        class it takes and the stored form it reads, so that a deploy with other classes or
        schemas (or the run's payload class back, or a newer release) tries the run again."""
        takes = d.workflow.trigger.payload_type
        payload = self.codec.names.get(takes, takes.__qualname__)
        return f"{d.fingerprint}/{self.codec.digest}/{self._schemas}/{payload}/{FORMAT}"

    def strand_unreadable(self, session: Session, d: Definition, row: Row[Any], reason: str) -> None:
        """Mark a run that needs something this deploy's classes cannot read (an event
        another deploy wrote), for a deploy with other classes to try again."""
        self._strand(session, d, row, reason, reader=True)

    def _strand(self, session: Session, d: Definition, row: Row[Any], reason: str, *, reader: bool = False) -> None:
        """Mark a run this definition cannot resume; everything else of it stays, and
        workers with this definition pass it by (see :meth:`resume_due`).  Its event
        wait is disarmed: the feed of a definition that can resume it arms it again and
        looks back over the events since the run stopped, so none that came while it was
        stranded is lost.  A run already marked by this definition is not written again
        (a rolling deploy's two definitions would else re-mark it at every pass).  The
        mark keeps the error it replaces (:func:`~kumiko_typed._runs.put_over`): a run
        waiting to try a retry again still says what its last attempt failed with."""
        self.disarm(session, row.run_id)
        mark = self._reader(d) if reader else d.fingerprint
        marked = stranded_by(row.error)
        if mark in marked:
            return
        kept = [*marked[-(_STRANDERS - 1) :], mark]
        error = {
            "code": "stranded",
            "message": storable_text(reason),
            **put_over(row.error),
            "stranded_by": f" {' '.join(kept)} ",
        }
        session.execute(_UPDATE_RUN, {"b_run_id": row.run_id, "error": error, "updated_at": self.clock()})
        logger.warning("workflow %s run %s is stranded: %s", d.name, row.run_id, reason)

    @staticmethod
    def disarm(session: Session, run_id: uuid.UUID) -> None:
        """Let the run's event wait be armed again by a feed whose App can resume it, which
        then looks back over every event since the run stopped (for an event this App's
        feed passed by without resuming the run)."""
        session.execute(_DISARM, {"b_run_id": run_id})

    def resumable(self) -> ColumnElement[bool]:
        """SQL: runs of this App's workflows that its definitions did not find stranded."""
        if not self.defs:
            return false()
        marked = func.coalesce(workflow_runs.c.error["stranded_by"].as_string(), "")
        by_me = or_(
            *(
                and_(workflow_runs.c.workflow == d.name, marked.contains(f" {mark} "))
                for d in self.defs.values()
                for mark in (d.fingerprint, self._reader(d))
            )
        )
        return and_(workflow_runs.c.workflow.in_(list(self.defs)), not_(by_me))

    def resume_due(self, stopping: Callable[[], bool] = lambda: False, done: dict[str, int] | None = None) -> int:
        """Resume every suspended run whose wake time (or event-wait timeout) has come and
        that this App's definitions can resume (the others are marked stranded): how many,
        also added to ``done["resumed"]`` as each transaction commits.
        ``stopping`` is asked between batches: a stopping worker leaves the rest for the
        next pass, of this worker or another.

        A pass resumes a run once: one that it left due again (a zero wait, a wake time
        already past, a retry without backoff) is the next pass's.  Else a loop of such
        waits ran to its end inside one pass (10,000 items: 10,000 segments), while the
        pass's event feed and cron waited."""
        seen: set[uuid.UUID] = set()
        after: list[tuple[datetime, object]] = []
        due = batches(lambda careful, checked: self._due_batch(seen, after, careful, checked), stopping)
        return sum(counted(due, done, "resumed"))

    def _due_batch(
        self, seen: set[uuid.UUID], after: list[tuple[datetime, object]], careful: bool, checked: bool
    ) -> tuple[bool, int]:
        """One transaction of :meth:`resume_due`: whether to go on, and the runs resumed
        (none of ``seen``, the runs this pass resumed before; it adds the ones it did).
        ``after``: where in the due order the pass's last batch ended (empty at first).

        A batch reads on from there: a run the pass left due again (a zero wait with the
        clock standing still) comes again behind it, and is passed over.  Before, every
        batch read from the start, and ten such runs first in the order made a batch of
        nothing new, which ended the pass: the runs after them waited for the ten's end.

        Its runs are claimed a few at a time if its worker's segments are slow, each claim
        after the last run claimed before it, until ``BATCH`` were (``_claim_size``)."""
        last = after[0] if after else None
        done: set[uuid.UUID] = set()  # this transaction's: passed over too if they come again
        claimed = resumed = 0
        with self.sessions() as session, session.begin():
            guard = None if careful else allow_lazy(session, hold_stores=True)
            if checked:
                check_deferred(session)
            now = self.clock()
            while claimed < BATCH:
                size = self._claim_size.next(BATCH - claimed) if self.postgres else BATCH
                rows = self._claim(session, now, size, last)
                claimed += len(rows)
                if rows:
                    last = (rows[-1].wake_at, rows[-1].kumiko_tie)
                fresh = [row for row in rows if row.run_id not in seen and row.run_id not in done]
                began = time.perf_counter()
                resumed += sum(self._resume_due_run(session, row) for row in fresh)
                self._claim_size.took(time.perf_counter() - began, len(fresh))
                done.update(row.run_id for row in fresh)
                if len(rows) < size:
                    break
            if guard is not None:
                _send_held(session, guard.take_held())
        # Committed: a batch done again resumes them again, from where it started.
        seen.update(done)
        if last is not None:
            after[:] = [last]
        return claimed == BATCH, resumed

    def _resume_due_run(self, session: Session, row: Row[Any]) -> bool:
        """Go on with a run whose wake time came: at an event wait, its timeout, unless an
        answer that came in time is found first; a run that noted the event that woke it
        goes on with that one (:meth:`resume`)."""
        # A run kept at its start waits for nothing; damaged state is resume()'s to fail.
        state = row.state
        at_wait = row.path is not None and isinstance(state, Mapping) and state.get("event_wait", True)
        timeout = at_wait and WOKEN_BY not in state
        return (timeout and self.answer_before_timeout(session, row)) or self.resume(session, row, None)

    def _claim(
        self, session: Session, now: datetime, size: int, last: tuple[datetime, object] | None
    ) -> Sequence[Row[Any]]:
        """Up to ``size`` due runs in the due order (locked on PostgreSQL), after ``last``
        (a wake time and tie) if given."""
        key = (size, last is not None)
        claim = self._claims.get(key)
        if claim is None:
            claim = self._claims[key] = (self._due_after if last else self._due).limit(size)
        if last is None:
            return session.execute(claim, {"now": now}).all()
        wake, tie = last
        return session.execute(claim, {"now": now, "after_wake": wake, "after_tie": tie}).all()

    # --- inspection ------------------------------------------------------------------

    def info(self, session: Session, row: Row[Any]) -> RunInfo:
        """The run of ``row``, any columns of ``workflow_runs`` among them those shown."""
        shown = [getattr(row, column.name) for column in SHOWN]
        return self.shown(shown, _listed_parts(session, [shown]))

    def shown(self, row: Sequence[Any], parts: Mapping[uuid.UUID, Mapping[str, Any]]) -> RunInfo:
        """The run of a row of :data:`~kumiko_typed._run_listing.SHOWN`'s columns, in its
        order: a listing passes its rows as they are (reading a row's columns by name
        cost more than the rest of this); ``parts``: the stored parts of the runs listed
        whose state names some (:func:`_listed_parts`)."""
        run_id, workflow, status, path, state, wake_at, error, created_at, updated_at, fingerprint, user = row
        steps: object = {}
        if isinstance(state, dict) and "values" in state:  # a damaged row is still listed
            try:
                steps = self.codec.decode(expanded(state, parts.get(run_id, {}), paged=False)["values"])
            except UNREADABLE:
                steps = {}
        if not isinstance(steps, dict):
            steps = {}
        return RunInfo(
            run_id,
            workflow,
            status,
            path,
            steps,
            wake_at,
            shown_error(error),
            created_at,
            updated_at,
            fingerprint,
            _shown_user(user),
        )

    def get(self, run_id: uuid.UUID) -> RunInfo | None:
        with reading(self.sessions) as session:
            row = session.execute(select(workflow_runs).where(workflow_runs.c.run_id == run_id)).first()
            return None if row is None else self.info(session, row)

    def list(self, runs: RunFilter) -> list[RunInfo]:
        """The runs ``runs`` picks, newest first (:mod:`kumiko_typed._run_listing`); a
        ``LookupError`` if the run to page on from is not there (a typo, another database)."""
        with reading(self.sessions) as session:
            cursor = None
            if runs.before is not None:
                cursor = session.execute(_CREATED, {"b_run_id": runs.before}).scalar_one_or_none()
                if cursor is None:
                    raise LookupError(f"before: no run {runs.before}; page on with the run_id of a listed run")
            rows = session.execute(runs.select(cursor)).all()
            parts = _listed_parts(session, rows)
        return [self.shown(r, parts) for r in rows]  # rows of SHOWN's columns, in its order


def _listed_parts(session: Session, rows: Sequence[Sequence[Any]]) -> dict[uuid.UUID, dict[str, Any]]:
    """The stored parts of the listed runs (rows of ``SHOWN``'s columns) whose state names
    some, but their loops' pages (a listing shows values): one query for a page, none for
    a page of runs without parts."""
    named = []
    for row in rows:
        try:
            if parts_of(row[4]):
                named.append(row[0])
        except ValueError:  # damaged: listed without its values
            continue
    return read_parts(session, named, pages=False)
