"""Durable workflows: starting runs, suspending and resuming them, and the triggers.

Every change of a run happens in one transaction together with the work of the
segment it ran, so a worker killed at any instant loses nothing: what it had not
committed is redone by another.  On PostgreSQL, due runs are claimed with
``FOR UPDATE SKIP LOCKED``; the event feed (triggers and ``wait_for_event``) is read
by one worker at a time through a locked cursor row.  Starts are unique per
(workflow, trigger key), so an event or a cron tick starts one run whatever the
number of workers.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import cattrs
from croniter import croniter
from sqlalchemy import Row, bindparam, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ._ctx import User
from ._eventstore import StoredEvent, read_after
from ._feature import Workflow
from ._fingerprint import fingerprint
from ._finished import Program, WorkflowFinished
from ._idempotency import key_problem
from ._interpreter import crash_failure, start_run
from ._poison import isolated, refusal, storable_text
from ._results import Failure
from ._runs import RunInfo
from ._runtime import Runtime, as_tenant
from ._state import Codec, StateError
from ._steps import Branch, ForEach, Retry, Step, StepCrash, WaitForEvent
from ._tables import consumers, events, workflow_runs, workflow_waits
from ._transient import transient
from ._triggers import CronTick
from ._wfexec import RetryExhausted, Segment, Suspend, decode_loops, encode_loops, event_key, run_steps

logger = logging.getLogger("kumiko_typed")

EVENT_CURSOR = "workflow-events"
BATCH = 10

# Built once: each write passes its row as parameters (no statement built per call).
_INSERT_RUN: Final = insert(workflow_runs)
#: The SET clause follows the parameters given, besides ``b_run_id``.
_UPDATE_RUN: Final = update(workflow_runs).where(workflow_runs.c.run_id == bindparam("b_run_id"))
_INSERT_WAIT: Final = insert(workflow_waits)
_DELETE_WAITS: Final = delete(workflow_waits).where(workflow_waits.c.run_id == bindparam("b_run_id"))
#: The user of a cron-started run: no person, no tenant.
SYSTEM_USER = User(id=uuid.UUID(int=0), tenant_id=uuid.UUID(int=0), roles=frozenset({"system"}))


class Definition:
    """A registered workflow, compiled: its program and fingerprint."""

    def __init__(self, workflow: Workflow[Any]) -> None:
        self.workflow = workflow
        self.name = workflow.name
        pipeline = workflow.pipeline
        if isinstance(pipeline, WorkflowFinished):
            self.program: Program[Any, Any] = pipeline
        else:
            self.program = WorkflowFinished(pipeline.feature, pipeline.payload_type, pipeline.steps, "WorkflowPipeline")
        self.fingerprint = fingerprint(self.program.steps)

    def step_at(self, path: str) -> Step:
        steps = self.program.steps
        parts = path.split("/")
        step: Step = steps[int(parts[0])]
        i = 1
        while i < len(parts):
            label = parts[i]
            if isinstance(step, Branch):
                block = step.on_true if label == "on_true" else step.on_false
                i += 1
            elif isinstance(step, (ForEach, Retry)):
                block = step.body
                i += 2 if i + 1 < len(parts) and parts[i + 1].startswith("#") else 1
            else:
                raise LookupError(f"no step at {path!r}")
            step = block.steps[int(parts[i])]
            i += 1
        return step


def _failed(code: str, message: str) -> dict[str, Any]:
    """The columns of a run that failed (its last state is kept, for inspection).  The
    message is made storable: failing a run must not fail in turn."""
    return {"status": "failed", "error": {"code": code, "message": storable_text(message)}, "wake_at": None}


#: What reading a stored run can raise: a class the App no longer registers (StateError),
#: a row damaged or written by another version (a key missing, a value of the wrong kind).
_UNREADABLE: Final = (StateError, LookupError, TypeError, ValueError, AttributeError)


def _unreadable(path: str | None, exc: Exception) -> dict[str, Any]:
    """A stored run this App cannot read (a class it no longer registers, a damaged row)
    fails; raising instead would fail every worker pass that reaches it."""
    return _failed("unstorable_state", f"at step {path}: the stored state cannot be read: {exc}")


def _refused(workflow: str, run_id: uuid.UUID, path: str | None, exc: Exception) -> dict[str, Any]:
    """The failed run's columns when the database, its driver or the JSON encoder refused
    what the segment stored (a value the state codec let through)."""
    reason = refusal(exc)
    logger.warning("workflow %s run %s: the database refused its state: %s", workflow, run_id, reason)
    message = f"in the segment from step {path or '0'}: the database refused the run's state: {reason}"
    return _failed("unstorable_state", message)


class _SegmentFailed(Exception):
    """A segment ended in a failed run: its work is rolled back, the run stored failed."""

    def __init__(self, columns: dict[str, Any]) -> None:
        super().__init__(columns["error"]["message"])
        self.columns = columns


def _user_json(user: User) -> dict[str, Any]:
    return {"id": str(user.id), "tenant_id": str(user.tenant_id), "roles": sorted(user.roles)}


def _user(data: Mapping[str, Any]) -> User:
    return User(id=uuid.UUID(data["id"]), tenant_id=uuid.UUID(data["tenant_id"]), roles=frozenset(data["roles"]))


class Engine:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        runtime: Runtime,
        codec: Codec,
        converter: cattrs.Converter,
        workflows: Sequence[Workflow[Any]],
        clock: Callable[[], datetime],
    ) -> None:
        self.sessions = sessions
        self.runtime = runtime
        self.codec = codec
        self.converter = converter
        self.clock = clock
        self.defs = {w.name: Definition(w) for w in workflows}
        self.on_event: dict[str, list[Definition]] = {}
        self.on_cron: list[Definition] = []
        for d in self.defs.values():
            trigger = d.workflow.trigger
            if trigger.kind == "event":
                self.on_event.setdefault(runtime.event_name(trigger.payload_type), []).append(d)
            elif trigger.kind == "cron":
                self.on_cron.append(d)
        self.postgres = sessions.kw["bind"].dialect.name == "postgresql"
        dialect_insert = postgresql.insert if self.postgres else sqlite.insert
        #: A start claims its trigger key; a second claim of it inserts nothing.
        self._claim_run = (
            dialect_insert(workflow_runs)
            .on_conflict_do_nothing(index_elements=["workflow", "trigger_key"])
            .returning(workflow_runs.c.run_id)
        )
        self._new_consumer = dialect_insert(consumers).on_conflict_do_nothing(index_elements=["name"])

    # --- starting ------------------------------------------------------------------

    def start(self, workflow: Workflow[Any], payload: object, user: User, key: str | None = None) -> uuid.UUID:
        d = self.defs.get(workflow.name)
        if d is None or d.workflow is not workflow:
            raise LookupError(f"workflow {workflow.name} is not registered in this App")
        if not isinstance(payload, workflow.trigger.payload_type):
            raise TypeError(f"workflow {workflow.name} takes a {workflow.trigger.payload_type.__name__}")
        problem = key_problem(key) if key is not None else None
        if problem is not None:
            raise ValueError(f"workflow {workflow.name}: {problem}")
        run_id = uuid.uuid4()
        # A key is the tenant's: one run per (workflow, tenant, key), by the trigger key's
        # unique constraint.  Without one the trigger key is new by construction.
        trigger_key = f"manual:{run_id}" if key is None else f"key:{user.tenant_id}:{key}"
        try:
            row = self._new_row(d, payload, user, trigger_key, run_id)
        except StateError as exc:
            raise StateError(f"workflow {d.name}: the payload cannot be stored: {exc}") from None
        try:
            with self.sessions() as session, session.begin():
                # Begin now, before any step: on SQLite that takes the write lock (BEGIN
                # IMMEDIATE), so nothing commits while the segment runs that it did not see.
                session.connection()
                if key is None:  # nothing to claim: the row is written once, after the segment
                    self._run_segment(session, d, run_id, payload, user, {}, None, None, new_row=row)
                elif session.execute(self._claim_run, row).first() is None:
                    # Claimed by a start that has committed (PostgreSQL waited for it).
                    return self._run_of(session, d.name, trigger_key)
                else:
                    self._run_segment(session, d, run_id, payload, user, {}, None, None)
            return run_id
        except _SegmentFailed as failure:
            failed = failure.columns
        # The segment's transaction was the start's own and is rolled back (no savepoint
        # needed), its claim with it; the failed run is written alone.
        try:
            with self.sessions() as session, session.begin():
                self._store(session, d.name, run_id, failed, None, new_row=row)
        except IntegrityError:
            if key is None:
                raise
            with self.sessions() as session:  # a concurrent start with the key came first
                return self._run_of(session, d.name, trigger_key)
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
            "payload": self.codec.encode(payload),
            "state": {},
            "user": _user_json(user),
            "fingerprint": d.fingerprint,
            "wake_at": None,
            "error": None,
            "created_at": now,
            "updated_at": now,
        }

    def _create(
        self, session: Session, d: Definition, payload: object, user: User, trigger_key: str, run_id: uuid.UUID
    ) -> bool:
        """Start the run of a trigger unless one was started for it already."""
        try:
            row = self._new_row(d, payload, user, trigger_key, run_id)
        except StateError as exc:  # an event's value the state cannot hold (NaN on SQLite)
            logger.error("workflow %s: no run for %s, its payload cannot be stored: %s", d.name, trigger_key, exc)
            return False
        if session.execute(self._claim_run, row).first() is None:
            return False  # this trigger already started its run
        self._segment(session, d, run_id, payload, user, {}, None, None)
        return True

    def _run_segment(
        self,
        session: Session,
        d: Definition,
        run_id: uuid.UUID,
        payload: object,
        user: User,
        state: Mapping[str, Any],
        path: str | None,
        resume_value: object,
        new_row: dict[str, Any] | None = None,
    ) -> None:
        """Run one segment and store where the run stands after it.  A segment that fails
        the run — a step's failure, a value that cannot be stored, a state the database
        refuses — raises ``_SegmentFailed``: the caller rolls the segment back and stores
        the failed run alone."""
        columns, suspend = self._advance(session, d, run_id, payload, user, state, path, resume_value)
        if columns["status"] == "failed":
            raise _SegmentFailed(columns)
        try:
            self._store(session, d.name, run_id, columns, suspend, new_row)
        except Exception as exc:
            if isinstance(exc, DBAPIError) and transient(exc):
                raise
            raise _SegmentFailed(_refused(d.name, run_id, path, exc)) from exc

    def _segment(
        self,
        session: Session,
        d: Definition,
        run_id: uuid.UUID,
        payload: object,
        user: User,
        state: Mapping[str, Any],
        path: str | None,
        resume_value: object,
    ) -> None:
        """A segment in a worker's transaction, which runs many: in a savepoint, so that a
        failed one leaves nothing but its failed run, and the pass goes on (``isolated``)."""
        error = isolated(
            session, lambda: self._run_segment(session, d, run_id, payload, user, state, path, resume_value)
        )
        if isinstance(error, _SegmentFailed):
            self._store(session, d.name, run_id, error.columns, None)
        elif error is not None:  # a bug outside the steps: logged, and this run alone fails
            logger.error("workflow %s run %s failed outside its steps", d.name, run_id, exc_info=error)
            message = f"in the segment from step {path or '0'}: {type(error).__name__} (see the worker's log)"
            self._store(session, d.name, run_id, _failed("internal_error", message), None)

    # --- running a segment ---------------------------------------------------------------

    def _advance(
        self,
        session: Session,
        d: Definition,
        run_id: uuid.UUID,
        payload: object,
        user: User,
        state: Mapping[str, Any],
        path: str | None,
        resume_value: object,
    ) -> tuple[dict[str, Any], Suspend | None]:
        """Run from ``path`` (the start if ``None``) to the end or the next suspension: the
        segment's work, and the run's columns that change after it (for ``_store``)."""
        # A worker runs many segments in one transaction: what an earlier one loaded is
        # read again when used, after this one's append lock (a dispatch's isolation).
        session.expire_all()
        with as_tenant(session, user.tenant_id):
            info = RunInfo(run_id, d.name, "running", path)
            run = start_run(
                d.program,
                runtime=self.runtime,
                handler=d.name,
                payload=payload,
                user=user,
                session=session,
                now=self.clock(),
                correlation_id=run_id,
                workflow=info,
            )
            try:
                if "values" in state:
                    run.values.update(self.codec.decode(state["values"]))
                    run.scope.update(self.codec.decode(state["scope"]))
                loops = decode_loops(self.codec, state.get("loops", {}))
                retries = dict(state.get("retries", {}))
            except _UNREADABLE as exc:
                return _unreadable(path, exc), None
            seg = Segment(loops, retries, resume_value, self.codec, self.runtime.event_name)
            start = path.split("/") if path else None
            try:
                result = run_steps(d.program.steps, run, seg, start, "")
            except Suspend as suspend:
                where = "/".join(suspend.path)
                try:
                    stored = {
                        "values": self.codec.encode(dict(run.values)),
                        "scope": self.codec.encode(dict(run.scope)),
                        "loops": encode_loops(self.codec, seg.loops),
                        "retries": seg.retries,
                        "event_wait": suspend.wait is not None,
                    }
                except StateError as exc:
                    return _failed("unstorable_state", f"at step {where}: {exc}"), None
                columns = {"status": "suspended", "path": where, "wake_at": suspend.wake_at, "state": stored}
                return columns, suspend
            except StepCrash as crash:
                failure = crash_failure(crash, f"workflow {d.name} run {run_id}")
                return _failed(failure.code, failure.message), None
            except RetryExhausted as exhausted:
                return _failed(exhausted.failure.code, exhausted.failure.message), None
            if isinstance(result, Failure):
                return _failed(result.code, result.message), None
            try:
                values = self.codec.encode(dict(run.values))
            except StateError:
                values = {}
            return {"status": "completed", "error": None, "wake_at": None, "state": {"values": values}}, None

    def _store(
        self,
        session: Session,
        workflow: str,
        run_id: uuid.UUID,
        columns: dict[str, Any],
        suspend: Suspend | None,
        new_row: dict[str, Any] | None = None,
    ) -> None:
        """Write where the run stands after a segment: update its row, or insert ``new_row``
        with it (a manual start's first segment); arm the event wait it suspended at."""
        columns["updated_at"] = self.clock()
        if new_row is not None:
            session.execute(_INSERT_RUN, {**new_row, **columns})
        else:
            session.execute(_UPDATE_RUN, {"b_run_id": run_id, **columns})
        if suspend is not None and suspend.wait is not None:
            wait = suspend.wait
            session.execute(
                _INSERT_WAIT,
                {
                    "run_id": run_id,
                    "workflow": workflow,
                    "path": columns["path"],
                    "event_type": wait.event_type,
                    "tenant_id": wait.tenant_id,
                    "key": wait.key,
                    "after_position": wait.after_position,
                    "armed": False,
                    "timeout_at": wait.timeout_at,
                },
            )

    def _resume(self, session: Session, row: Row[Any], resume_value: object) -> bool:
        d = self.defs.get(row.workflow)
        if d is None or d.fingerprint != row.fingerprint:
            message = (
                f"workflow {row.workflow} changed since run {row.run_id} started; the run stopped at step "
                f"{row.path} of the old definition and cannot continue under the new one"
            )
            self._store(session, row.workflow, row.run_id, _failed("workflow_definition_changed", message), None)
            return False
        if row.state.get("event_wait", True):  # runs stored before the flag existed: look
            session.execute(_DELETE_WAITS, {"b_run_id": row.run_id})
        try:
            payload = self.codec.decode(row.payload)
            user = _user(row.user)
        except _UNREADABLE as exc:
            self._store(session, d.name, row.run_id, _unreadable(row.path, exc), None)
            return False
        self._segment(session, d, row.run_id, payload, user, row.state, row.path, resume_value)
        return True

    # --- worker passes ---------------------------------------------------------------

    def resume_due(self) -> int:
        """Resume every suspended run whose wake time (or event-wait timeout) has come."""
        resumed = 0
        while True:
            with self.sessions() as session, session.begin():
                stmt = (
                    select(workflow_runs)
                    .where(workflow_runs.c.status == "suspended", workflow_runs.c.wake_at <= self.clock())
                    .order_by(workflow_runs.c.wake_at)
                    .limit(BATCH)
                )
                rows = session.execute(stmt.with_for_update(skip_locked=True) if self.postgres else stmt).all()
                if not rows:
                    return resumed
                for row in rows:
                    self._resume(session, row, None)
                    resumed += 1

    def consume_events(self) -> int:
        """Start event-triggered runs and wake event waits, in event order."""
        started = 0
        while True:
            with self.sessions() as session, session.begin():
                cursor = session.execute(
                    select(consumers.c.position).where(consumers.c.name == EVENT_CURSOR).with_for_update()
                ).scalar_one_or_none()
                if cursor is None:  # the first pass ever; another worker's may race it
                    session.execute(self._new_consumer, {"name": EVENT_CURSOR, "position": 0, "tick": None})
                    continue
                self._arm_waits(session, cursor)
                batch = read_after(session, cursor, limit=200)
                for event in batch:
                    for d in self.on_event.get(event.type, []):
                        try:
                            payload = self.converter.structure(event.payload, d.workflow.trigger.payload_type)
                        except Exception:  # one unreadable event must not stop the feed for all
                            logger.exception(
                                "workflow %s: event %s does not fit %s; no run started",
                                d.name,
                                event.event_id,
                                d.workflow.trigger.payload_type.__name__,
                            )
                            continue
                        user = User(id=event.user_id or uuid.UUID(int=0), tenant_id=event.tenant_id)
                        if self._create(session, d, payload, user, f"event:{event.event_id}", uuid.uuid4()):
                            started += 1
                    self._match(session, event, armed_only=True)
                if batch:
                    session.execute(
                        update(consumers).where(consumers.c.name == EVENT_CURSOR).values(position=batch[-1].position)
                    )
                else:
                    return started

    def _arm_waits(self, session: Session, cursor: int) -> None:
        """A wait committed after the feed passed its first events looks back once."""
        waits = session.execute(select(workflow_waits).where(workflow_waits.c.armed.is_(False))).all()
        for wait in waits:
            missed = session.execute(
                select(events)
                .where(
                    events.c.type == wait.event_type,
                    events.c.tenant_id == wait.tenant_id,
                    events.c.position > wait.after_position,
                    events.c.position <= cursor,
                )
                .order_by(events.c.position)
            ).all()
            for row in missed:
                if self._match(session, StoredEvent(**row._mapping), only_run=wait.run_id):
                    break
            session.execute(update(workflow_waits).where(workflow_waits.c.run_id == wait.run_id).values(armed=True))

    def _match(
        self, session: Session, event: StoredEvent, *, armed_only: bool = False, only_run: uuid.UUID | None = None
    ) -> bool:
        # Only events of the run's tenant (DESIGN §6), appended after the run reached its
        # wait (§8): an event the feed has not read yet when the wait was stored may be older.
        stmt = select(workflow_waits).where(
            workflow_waits.c.event_type == event.type,
            workflow_waits.c.tenant_id == event.tenant_id,
            workflow_waits.c.after_position < event.position,
        )
        if armed_only:
            stmt = stmt.where(workflow_waits.c.armed.is_(True))
        if only_run is not None:
            stmt = stmt.where(workflow_waits.c.run_id == only_run)
        waits = session.execute(stmt).all()
        matched = False
        keys: dict[tuple[str, str], str | None] = {}
        for wait in waits:
            group = (wait.workflow, wait.path)
            if group not in keys:
                keys[group] = self._event_key(wait.workflow, wait.path, event)
            if keys[group] is None or keys[group] != wait.key:
                continue
            # A run locked by another worker is being resumed by its timeout (the only other
            # way out of an event wait): the timeout won.  Waiting for that lock instead would
            # deadlock (that worker deletes this wait row, which this pass may have locked
            # when arming it) and, once it commits, find the run suspended somewhere else.
            run = session.execute(
                select(workflow_runs)
                .where(workflow_runs.c.run_id == wait.run_id)
                .with_for_update(skip_locked=self.postgres)
            ).first()
            if run is None or run.status != "suspended" or run.path != wait.path:
                continue
            step = self.defs[wait.workflow].step_at(wait.path)
            assert isinstance(step, WaitForEvent)
            value = self.converter.structure(event.payload, step.event)
            self._resume(session, run, value)
            matched = True
        return matched

    def _event_key(self, workflow: str, path: str, event: StoredEvent) -> str | None:
        d = self.defs.get(workflow)
        if d is None:
            return None
        try:
            step = d.step_at(path)
        except (LookupError, ValueError):
            return None  # the definition changed; the timeout fails the run (workflow_definition_changed)
        if not isinstance(step, WaitForEvent):
            return None
        try:
            value = self.converter.structure(event.payload, step.event)
            return event_key(self.codec, step.event_key(value))
        except Exception:
            logger.exception("workflow %s: event_key of step %s failed for event %s", workflow, path, event.event_id)
            return None

    def fire_cron(self) -> int:
        """Start one run per due tick of each cron workflow (no backfill before the first pass)."""
        started = 0
        for d in self.on_cron:
            expression = d.workflow.trigger.cron
            assert expression is not None
            name = f"cron:{d.name}"
            with self.sessions() as session, session.begin():
                now = self.clock()
                last = session.execute(
                    select(consumers.c.tick).where(consumers.c.name == name).with_for_update()
                ).scalar_one_or_none()
                if last is None:  # no backfill: the first tick counts from now
                    session.execute(self._new_consumer, {"name": name, "position": 0, "tick": now})
                    continue
                if last.tzinfo is None:
                    last = last.replace(tzinfo=now.tzinfo)
                ticks = croniter(expression, last)
                tick: datetime = ticks.get_next(datetime)
                while tick <= now:
                    key = f"cron:{tick.isoformat()}"
                    if self._create(session, d, CronTick(tick), SYSTEM_USER, key, uuid.uuid4()):
                        started += 1
                    last = tick
                    tick = ticks.get_next(datetime)
                session.execute(update(consumers).where(consumers.c.name == name).values(tick=last))
        return started

    # --- inspection ------------------------------------------------------------------

    def info(self, row: Row[Any]) -> RunInfo:
        try:
            steps = self.codec.decode(row.state["values"]) if "values" in row.state else {}
        except StateError:
            steps = {}
        wake = row.wake_at
        return RunInfo(row.run_id, row.workflow, row.status, row.path, steps, wake, row.error)

    def get(self, run_id: uuid.UUID) -> RunInfo | None:
        with self.sessions() as session:
            row = session.execute(select(workflow_runs).where(workflow_runs.c.run_id == run_id)).first()
        return None if row is None else self.info(row)

    def list(self, workflow: str | None) -> list[RunInfo]:
        stmt = select(workflow_runs).order_by(workflow_runs.c.created_at.desc(), workflow_runs.c.run_id)
        if workflow is not None:
            stmt = stmt.where(workflow_runs.c.workflow == workflow)
        with self.sessions() as session:
            rows = session.execute(stmt).all()
        return [self.info(r) for r in rows]
