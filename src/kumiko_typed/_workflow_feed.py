"""The event feed: one reader at a time (a locked cursor row) walks ``kumiko_events`` in
commit-safe ``(tx, position)`` order (``_eventstore.read_heads_after``), starts the runs of
event-triggered workflows, and wakes the runs waiting in ``wait_for_event`` for an event of their tenant and key.

On PostgreSQL a worker whose feed finds the cursor row locked (``SKIP LOCKED``) leaves
the events to the worker holding it and goes on with its pass, instead of waiting for
that worker's commit: the holder reads until it finds no event, and an event committed
too late for its last read is the next pass's (its NOTIFY wakes the idle workers).
Every event is still read by one feed at a time, after the cursor it committed."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, Final

import attrs
from sqlalchemy import ColumnElement, Integer, LargeBinary, Row, Select, and_, bindparam, select, tuple_, update
from sqlalchemy.orm import Session

from ._ctx import User
from ._deferred_checks import check_deferred
from ._errors import UnreadableEvent
from ._eventstore import Cursor, EventHead, read_heads_after, select_heads, unseen_by
from ._runs import stranded_by
from ._segment_savepoint import allow_lazy
from ._steps import WaitForEvent, called
from ._steps._block import NOT_A_STEPS_FAILURE
from ._steps.workflow import key_forms
from ._tables import STRANDED, consumers, events, workflow_runs, workflow_waits
from ._trigger_view import EVENT_TRIGGER
from ._waits_probe import Group, WaitsProbe
from ._worker_batches import batches, counted
from ._workflow_engine import Definition, WorkflowEngine

__all__ = ["EVENT_CURSOR", "EventFeed"]

logger = logging.getLogger("kumiko_typed")

EVENT_CURSOR = "workflow-events"
#: With a workflow's name: how far the feeds that start its runs have read (its own cursor).
TRIGGER_CURSOR = "workflow-trigger:"
#: Events a lagging workflow's catch-up reads per transaction.
_CATCH_UP: Final = 200
#: The runs a feed transaction starts and resumes at most: one event may wake thousands,
#: whose segments in one transaction held SQLite's write lock for all of them (a handler
#: waiting for it failed past the busy timeout).  Not the due-run pass's ten: an event that
#: wakes more is matched again in the next transaction, which reads the waits still left
#: a page at a time (10,000 runs of one event read 10,100 wait rows, not 505,000).
RUNS_PER_TRANSACTION: Final = 100
#: How many groups of waits, or stranded runs, an event's match reads one by one.
_FEW: Final = 32
#: The events of a transaction's first probe (``_BatchReads.probed``); each next one asks
#: as many as were asked before.
_FIRST_PROBED: Final = 32
#: The key of an event for runs waiting where this definition has no event wait.
_UNPLACED: Final = "\x00unplaced"


@attrs.define
class _Loaded:
    """An event loaded as the class a wait expects, with its key there.  The first run
    resumed with it takes ``value``; a further run of the group loads its own (a step
    may change what it is given, and one run's change must not reach another)."""

    key: str | None
    value: object
    #: The class the wait expects the event as (a further run's load).
    cls: type[Any]
    #: The forms a wait of this key stored (:func:`key_forms`): ``key``, and those of
    #: earlier releases; none if ``key`` is None.
    stored: tuple[str, ...] = ()
    taken: bool = False


@attrs.define
class _BatchReads:
    """What a feed transaction reads once, when its first event is matched, for all its
    events: the set of armed waits it matches against can only shrink meanwhile (only
    the feed arms a wait, at the transaction's start under the cursor's lock; a wait
    stored since, by a resumed run or another worker, is unarmed; a run stranded
    meanwhile has its wait disarmed, which the matching passes by).

    ``stranded``: the stranded runs (before, read per event: 40 statements of the 280 of a
    hotel group's segment, examples/ports/hotel.py).  ``groups``: an event type's
    (workflow, path) groups of waits, a superset of those holding armed waits (before,
    stepped through the match index per event: two statements of an event's three when
    it woke no run, bench/event_feed.py).

    ``found``, ``stranded_kinds``, ``keys``: what :meth:`EventFeed._probe` asks of the
    transaction's events a window at a time, so that an event no armed wait is for costs
    no statement (before, a read of its key's waits each: 200 statements a batch of
    payments no run waits for); ``None``: not asked, every group is read.  ``probed``:
    how many of the batch's events were asked about so far."""

    stranded: Sequence[uuid.UUID] | None = None
    groups: dict[str, list[tuple[str, str]]] = attrs.field(factory=dict)
    #: The groups of the batch's events that held an armed wait.
    found: set[Group] | None = None
    #: The (event type, tenant) of the stranded runs' armed waits.
    stranded_kinds: set[tuple[str, Any]] | None = None
    #: Each event's keys by its id, loaded for the probe: its match's then.
    keys: dict[uuid.UUID, dict[tuple[str, str], _Loaded | str | _Unloadable]] = attrs.field(factory=dict)
    probed: int = 0
    #: Whether ``stranded_kinds`` was read (it is first read for a window with a group).
    kinds_read: bool = False


@attrs.frozen
class _Paged:
    """A read of a group's waits a page at a time, each page after the last wait of the
    one before (keyset, in the match index's order: a page reads its own rows only)."""

    first: Select[Any]
    then: Select[Any]

    @classmethod
    def of(cls, stmt: Select[Any], after: ColumnElement[bool]) -> _Paged:
        """``stmt`` in pages; ``after``: its rows past the ``after_key``/``after_run`` wait."""
        page = bindparam("page", type_=Integer())
        return cls(stmt.limit(page), stmt.where(after).limit(page))

    def rows(self, session: Session, params: dict[str, Any], page: int) -> Iterator[Row[Any]]:
        """The rows, a page of ``page`` read when the last one's are taken."""
        params = {**params, "page": page}
        stmt = self.first
        while True:
            rows = session.execute(stmt, params).all()
            yield from rows
            if len(rows) < page:
                return
            params.update(after_key=rows[-1].key, after_run=rows[-1].run_id)
            stmt = self.then


@attrs.frozen
class _Unloadable:
    """An event of the type a wait expects that this deploy cannot load: the runs waiting
    for that type there are stranded with ``reason`` (whatever their key), so that the
    feed of a deploy that can load it finds the event when it arms their waits again."""

    reason: str


@attrs.frozen
class _BoundEvent:
    """An event's place as bound parameters, for ``unseen_by``."""

    tx: Any
    position: Any


def _event_params(event: EventHead) -> dict[str, Any]:
    """The values ``EventFeed._waits_of_event`` is sent with."""
    return {
        "event_type": event.type,
        "event_tenant": event.tenant_id,
        "event_tx": event.tx,
        "event_position": event.position,
        "event_occurred_at": event.occurred_at,
    }


class EventFeed:
    def __init__(self, engine: WorkflowEngine) -> None:
        self.engine = engine
        self.on_event: dict[str, list[Definition]] = {}
        for d in engine.defs.values():
            trigger = d.workflow.trigger
            if trigger.kind == "event":
                self.on_event.setdefault(engine.registry.event_name(trigger.payload_type), []).append(d)
        # Built once: an idle pass sends them all, and the definitions do not change.
        self._cursor = (
            select(consumers.c.tx, consumers.c.position)
            .where(consumers.c.name == EVENT_CURSOR)
            .with_for_update(skip_locked=engine.postgres)
        )
        self._new_cursor = engine.new_consumer.returning(consumers.c.name)
        self._triggers = {f"{TRIGGER_CURSOR}{d.name}": d for ds in self.on_event.values() for d in ds}
        self._trigger_cursors = select(consumers.c.name, consumers.c.tx, consumers.c.position).where(
            consumers.c.name.in_(list(self._triggers))
        )
        self._advance_triggers = (
            update(consumers)
            .where(consumers.c.name.in_(bindparam("names", expanding=True)))
            .values(tx=bindparam("tx"), position=bindparam("position"))
        )
        self._advance = (
            update(consumers)
            .where(consumers.c.name == EVENT_CURSOR)
            .values(tx=bindparam("tx"), position=bindparam("position"))
        )
        self._wait_of = select(workflow_waits).where(workflow_waits.c.run_id == bindparam("run_id"))
        # The due runs' pass asks it before it takes an event wait's timeout.
        engine.answer_before_timeout = self.answer_before_timeout
        # An event type's (workflow, path) groups after a given one: ranges of the match
        # index.  SQLite starts a row-value range at its first row *equal* in (workflow,
        # path) and stepped over every wait of the group; with the index's next column
        # (the tenant, text there) beside them, compared to a blob (above any text), it
        # starts past the group.
        waits = workflow_waits.c
        after = tuple_(bindparam("workflow"), bindparam("path"))
        if engine.postgres:
            beyond = tuple_(waits.workflow, waits.path) > after
        else:
            after = tuple_(*after.clauses, bindparam("above_text", b"", type_=LargeBinary))
            beyond = tuple_(waits.workflow, waits.path, waits.tenant_id) > after
        beyond = and_(waits.event_type == bindparam("event_type"), beyond)
        self._next_group = (
            select(waits.workflow, waits.path).where(beyond).order_by(waits.workflow, waits.path).limit(1)
        )
        self._groups_after = select(waits.workflow, waits.path).where(beyond).distinct()
        # The waits an event may wake, its values bound (``_event_params``): built per event,
        # these expressions were most of the feed's time for events nothing waits for
        # (4.8 s of 7 s over 4,000 such events on SQLite).  Only events of the run's tenant (DESIGN §6),
        # appended after the run reached its wait (§8): an event the feed has not read yet
        # when the wait was stored may be older.  And not after its timeout: a worker that
        # ran all along had resumed the run with None then; a run whose workflow a deploy
        # removed, or that a deploy stranded, past its timeout was handed an event that
        # came hours later when its code came back.
        event = _BoundEvent(bindparam("event_tx", type_=events.c.tx.type), bindparam("event_position"))
        self._waits_of_event = (
            select(workflow_waits, workflow_runs.c.error)
            .join(workflow_runs, workflow_runs.c.run_id == workflow_waits.c.run_id)
            .where(
                waits.event_type == bindparam("event_type"),
                waits.tenant_id == bindparam("event_tenant"),
                unseen_by(waits, event),
                waits.timeout_at >= bindparam("event_occurred_at"),
            )
        )
        self._armed_waits_of_event = self._waits_of_event.where(waits.armed.is_(True))
        # One (workflow, path) group's waits, whole and of one form of an event's key
        # (``_Loaded.stored``), a page at a time in the match index's order: the first
        # page, and the one after a given wait.  Read whole, an event waking 10,000 runs a
        # hundred to a transaction read every wait left in each: 505,000 rows.
        in_group = (waits.workflow == bindparam("group_workflow"), waits.path == bindparam("group_path"))
        after_run = bindparam("after_run", type_=waits.run_id.type)
        self._group_waits = {
            armed: (
                _Paged.of(
                    stmt.where(*in_group).order_by(waits.key, waits.run_id),
                    tuple_(waits.key, waits.run_id) > tuple_(bindparam("after_key"), after_run),
                ),
                _Paged.of(
                    stmt.where(*in_group, waits.key == bindparam("group_key")).order_by(waits.run_id),
                    waits.run_id > after_run,
                ),
            )
            for armed, stmt in ((True, self._armed_waits_of_event), (False, self._waits_of_event))
        }
        self._stranded = select(workflow_runs.c.run_id).where(STRANDED).limit(_FEW + 1)
        self._waits_probe = WaitsProbe(postgres=engine.postgres)
        # The waits first (the unarmed index), each run's row checked by its key: joined,
        # SQLite's planner read every run of the App's workflows instead.
        resumable = select(workflow_runs.c.run_id).where(
            workflow_runs.c.run_id == workflow_waits.c.run_id, engine.resumable()
        )
        self._unarmed = select(workflow_waits).where(workflow_waits.c.armed.is_(False), resumable.exists())

    def consume(self, stopping: Callable[[], bool], done: dict[str, int] | None = None) -> tuple[int, int]:
        """Start event-triggered runs and wake event waits, in event order: the number
        of runs started and of runs resumed, also added to ``done`` as each transaction
        commits (:func:`counted`).  ``stopping`` is asked between batches (the cursor is
        where the last one left it)."""
        started = resumed = 0
        for new, woken in counted(batches(self._next_batch, stopping), done, "started", "resumed"):
            started, resumed = started + new, resumed + woken
        return started, resumed

    def _next_batch(self, careful: bool, checked: bool) -> tuple[bool, tuple[int, int]]:
        """One transaction of the feed: whether to go on, and the runs started and resumed."""
        started = resumed = 0
        engine = self.engine
        with engine.sessions() as session, session.begin():
            if not careful:
                allow_lazy(session)
            if checked:
                check_deferred(session)
            row = session.execute(self._cursor).first()
            if row is None:  # the first pass ever (another worker's may race it), or held
                made = session.execute(self._new_cursor, {"name": EVENT_CURSOR, "position": 0, "tick": None})
                return made.first() is not None, (0, 0)  # none made: it exists, another worker's feed holds it
            cursor: Cursor = (row.tx, row.position)
            armed, cut_short = self._arm_waits(session, cursor)
            resumed += armed
            caught_up, lagging, started = self._catch_up(session, cursor)
            batch = read_heads_after(session, cursor, limit=200)
            handled = 0
            reads = _BatchReads()
            for index, event in enumerate(batch):
                if started + resumed >= RUNS_PER_TRANSACTION:
                    break  # the transaction ran its segments: this event is the next one's first
                if index == reads.probed:
                    # Windows of 32, 32, 64, 128 events: a transaction that a fan-out of its
                    # first event fills loads the keys of 32 events, not of all 200.
                    self._probe(session, batch[index : index + max(index, _FIRST_PROBED)], reads)
                started += self._start_runs(session, event, caught_up)
                # A run's lock is waited for only while no segment ran in this transaction:
                # a segment's locks held meanwhile can be what that run's worker waits for.
                matched, done = self._match(
                    session,
                    event,
                    armed_only=True,
                    may_wait=not (started or resumed),
                    room=RUNS_PER_TRANSACTION - started - resumed,
                    reads=reads,
                )
                resumed += matched
                if not done:
                    break  # a run it matches is held, or no room is left: the event is matched again
                handled += 1
            if handled:
                tx, position = batch[handled - 1].cursor
                session.execute(self._advance, {"tx": tx, "position": position})
                if caught_up:
                    names = [TRIGGER_CURSOR + name for name in caught_up]
                    session.execute(self._advance_triggers, {"names": names, "tx": tx, "position": position})
        return bool(batch) or lagging or cut_short, (started, resumed)

    def _catch_up(self, session: Session, cursor: Cursor) -> tuple[set[str], bool, int]:
        """The event-triggered workflows (names) whose own cursor is at the feed's, whether one
        is still behind it, and the runs started.  A feed of a deploy without a workflow
        moves the feed's cursor past the events that start its runs: the first feed with
        it that comes after reads them again from its own cursor (a rolling deploy adding
        it, a deploy registering it again).  A workflow's first feed sets its cursor
        where the feed is: no run for the events before it was registered."""
        if not self._triggers:
            return set(), False, 0
        known = {r.name: (r.tx, r.position) for r in session.execute(self._trigger_cursors)}
        caught_up: set[str] = set()
        lagging = False
        started = 0
        for name, d in self._triggers.items():
            own = known.get(name)
            if own is None:
                session.execute(self.engine.new_consumer, {"name": name, "tx": cursor[0], "position": cursor[1]})
                caught_up.add(d.name)
                continue
            if own >= cursor:
                caught_up.add(d.name)
                continue
            missed = session.execute(
                select_heads()
                .where(
                    events.c.type == self.engine.registry.event_name(d.workflow.trigger.payload_type),
                    tuple_(events.c.tx, events.c.position) > own,
                    tuple_(events.c.tx, events.c.position) <= cursor,
                )
                .order_by(events.c.tx, events.c.position)
                .limit(_CATCH_UP)
            ).all()
            read = 0
            for row in missed:
                if started >= RUNS_PER_TRANSACTION:
                    break  # the rest is the next transaction's
                started += self._start_runs(session, EventHead(*row), {d.name})
                read += 1
            at = cursor
            if read < len(missed) or len(missed) == _CATCH_UP:
                at = (missed[read - 1].tx, missed[read - 1].position) if read else own
                lagging = True
            session.execute(self._advance_triggers, {"names": [name], "tx": at[0], "position": at[1]})
        return caught_up, lagging, started

    def _start_runs(self, session: Session, event: EventHead, names: set[str]) -> int:
        """Start the runs ``event`` triggers of the workflows named (at most one each)."""
        started = 0
        for d in self.on_event.get(event.type, []):
            if d.name not in names:
                continue
            try:
                which = f"the event {event.event_id}"
                payload = self.engine.registry.load(event, d.workflow.trigger.payload_type, which)
            except UnreadableEvent as exc:  # one unreadable event must not stop the feed for all
                # Its message is the whole story; its cause's traceback (cattrs, int())
                # quotes stored values, which no log record holds.
                logger.error("workflow %s: no run started: %s", d.name, exc)
                continue
            user = User(id=event.user_id or uuid.UUID(int=0), tenant_id=event.tenant_id)
            if self.engine.create(session, d, payload, user, f"{EVENT_TRIGGER}{event.event_id}"):
                started += 1
        return started

    def _arm_waits(self, session: Session, cursor: Cursor) -> tuple[int, bool]:
        """A wait committed after the feed passed its first events looks back once; so
        does a stranded run's wait (disarmed) once a definition that can resume it is
        deployed: the run waits again, unmarked.  Waits of runs this App cannot resume
        stay unarmed, for one that can.  A wait is armed before it looks back: an event
        there that strands its run again disarms it (:meth:`WorkflowEngine._strand`).
        The runs resumed, and whether waits were left unarmed for the next transaction
        (it resumed ``RUNS_PER_TRANSACTION`` runs)."""
        resumed = 0
        engine = self.engine
        pending = session.execute(self._unarmed).all()
        for unarmed in pending:
            if resumed >= RUNS_PER_TRANSACTION:
                return resumed, True
            run = self._lock(session, unarmed.run_id)
            if run is None:
                continue  # being resumed by its timeout (or gone): next pass
            # Read again under the run's lock: a worker that resumed the run since (its
            # timeout) replaced the wait read above with one of another event or view,
            # which is the one to look back for.
            wait = session.execute(self._wait_of, {"run_id": unarmed.run_id}).first()
            if wait is None:
                continue  # none now: the run finished, or was cancelled
            if run.status == "suspended" and not engine.waits_again(session, run):
                continue  # stranded now (or failed): its wait stays unarmed
            session.execute(update(workflow_waits).where(workflow_waits.c.run_id == wait.run_id).values(armed=True))
            resumed += self._look_back(session, wait, cursor)
        return resumed, False

    def answer_before_timeout(self, session: Session, run: Row[Any]) -> bool:
        """Before a worker takes the timeout of ``run``'s event wait (its row locked by the
        caller): resume it with the first committed event that answers it in time, if any.
        The feed may not have read one yet: an older transaction still open holds back the
        commit-safe order, another worker's feed holds the cursor, or the answer committed
        between this pass's feed and its due runs.  The answer occurred before the deadline,
        and its handler told its caller ``Ok``: the run takes it, as the feed would have."""
        wait = session.execute(self._wait_of, {"run_id": run.run_id}).first()
        return wait is not None and self._look_back(session, wait, None) > 0

    def _look_back(self, session: Session, wait: Row[Any], cursor: Cursor | None) -> int:
        """Resume ``wait``'s run with the first event committed that it had not seen and
        that answers it (of its type and tenant, occurred by its deadline, of its key),
        among those the feed has passed (up to ``cursor``) or, without one, all: 1 if it
        did, else 0."""
        bounds = [
            events.c.type == wait.event_type,
            events.c.tenant_id == wait.tenant_id,
            unseen_by(wait, events.c),
            events.c.occurred_at <= wait.timeout_at,  # see _match
        ]
        if cursor is not None:
            bounds.append(tuple_(events.c.tx, events.c.position) <= cursor)
        missed = session.execute(select_heads().where(*bounds).order_by(events.c.tx, events.c.position)).all()
        for row in missed:
            if self._match(session, EventHead(*row), only_run=wait.run_id)[0]:
                return 1
        return 0

    def _match(
        self,
        session: Session,
        event: EventHead,
        *,
        armed_only: bool = False,
        only_run: uuid.UUID | None = None,
        may_wait: bool = True,
        room: int | None = None,
        reads: _BatchReads | None = None,
    ) -> tuple[int, bool]:
        """Resume the runs waiting for ``event``, at most ``room`` if given: how many, and whether
        the event is done with.  A run this App's definition cannot resume is marked
        stranded and its wait disarmed instead (whatever its key: this definition's key
        may not be the one that resumes it), so the feed of a definition that can finds
        the event when it arms the wait again.

        Not done: ``room`` runs were resumed and the event matches more (one event may
        wake thousands: in one transaction, their segments held SQLite's write lock, and
        every handler waiting for it failed past the busy timeout), or a run it matches
        is locked by another worker, and waiting for it is not allowed (``may_wait``) or
        no longer is (this call resumed a run).  The caller commits what it did and
        matches the event again in a transaction that has run no segment.  Matching an
        event again resumes no run twice: a resumed run's wait is gone, and a new one has
        seen the event."""
        engine = self.engine
        params = _event_params(event)
        keys = {} if reads is None else reads.keys.get(event.event_id, {})
        if only_run is not None:
            stmt = self._armed_waits_of_event if armed_only else self._waits_of_event
            waits: Iterable[Row[Any]] = session.execute(stmt.where(workflow_waits.c.run_id == only_run), params).all()
        else:
            page = (RUNS_PER_TRANSACTION if room is None else room) + 1
            waits = self._waits_for(session, armed_only, params, event, keys, reads or _BatchReads(), page)
        matched = 0
        for wait in waits:
            d = engine.defs.get(wait.workflow)
            if d is None:
                # A workflow this App no longer registers: its run is not touched, but the
                # cursor moves past the event, so a deploy registering it again looks back.
                if wait.armed:
                    engine.disarm(session, wait.run_id)
                continue
            group = (wait.workflow, wait.path)
            if group not in keys:
                keys[group] = self._event_key(d, wait.path, event)
            key = keys[group]
            loaded = key if isinstance(key, _Loaded) else None
            stranded = d.fingerprint in stranded_by(wait.error)
            if loaded is not None and not stranded and wait.key not in loaded.stored:
                continue
            # A run locked by another worker is being resumed by its timeout (the only other
            # way out of an event wait): wait for that worker.  If it commits, the timeout
            # won (the run is found past its wait); if it dies or its pass rolls back, the
            # run still waits and gets the event.  Passing the run by lost the event then:
            # the cursor moves on.  Only a transaction that has run no segment waits: that
            # worker's segment may wait for a row a segment of this one wrote (a deadlock
            # PostgreSQL broke by failing the feed's pass, raised by a single pass).
            if room is not None and matched >= room:
                return matched, False
            waits_ok = may_wait and matched == 0
            run = self._lock(session, wait.run_id, skip_locked=not waits_ok)
            if run is None and not waits_ok:
                return matched, False
            if run is None or run.status != "suspended" or run.path != wait.path:
                continue
            if isinstance(key, _Unloadable):
                engine.strand_unreadable(session, d, run, key.reason)
                continue
            if loaded is None or stranded:
                engine.plan(session, run)  # strands it (or finds it resumable after all)
                continue
            matched += engine.resume(session, run, self._take(event, loaded), woken_by=event.event_id)
        return matched, True

    def _waits_for(
        self,
        session: Session,
        armed_only: bool,
        params: dict[str, Any],
        event: EventHead,
        keys: dict[tuple[str, str], _Loaded | str | _Unloadable],
        reads: _BatchReads,
        page: int,
    ) -> Iterator[Row[Any]]:
        """The waits ``event`` may concern, read group by group (workflow, path): where
        this App loads the event with a key, only the waits of that key; any other group
        whole; and, once, those of stranded runs (which a definition marks whatever their
        key).  Reading every wait of the event's type and comparing keys here read all of
        a tenant's waiting runs per event (10,000 of them: 0.5 s a payment).  The groups
        come from the match index, the stranded runs from their own index, both once per
        transaction (``reads``); the keys found are left in ``keys``.  In a feed
        transaction only the groups, and stranded runs, its probe found armed waits in
        (:meth:`_probe`): an event none is for reads nothing.

        A group's waits come ``page`` at a time, the next page read only when the caller
        asks for more: a transaction that stops at its room reads a page past it at most.
        Each transaction reads from the group's start, where the waits of the runs the
        last one resumed were (deleted with their resumption): so no wait armed between
        two of them is passed by, whatever its run id."""
        seen: set[uuid.UUID] = set()
        kinds = reads.stranded_kinds
        which = self._stranded_runs(session, reads) if kinds is None or (event.type, event.tenant_id) in kinds else None
        if which is not None:
            stmt = self._armed_waits_of_event if armed_only else self._waits_of_event
            for row in session.execute(stmt.where(workflow_waits.c.run_id.in_(which)), params).all():
                seen.add(row.run_id)
                yield row
        whole, keyed = self._group_waits[armed_only]
        for workflow, path in self._groups_of(session, event.type, reads):
            forms = self._forms(event, workflow, path, keys)
            if reads.found is not None:  # only the groups the probe found armed waits in
                place = (event.type, workflow, path, event.tenant_id)
                if forms is None and (*place, None) not in reads.found:
                    continue
                if forms is not None and not (forms := tuple(f for f in forms if (*place, f) in reads.found)):
                    continue
            group = {**params, "group_workflow": workflow, "group_path": path}
            if forms is not None:
                pages = (keyed.rows(session, {**group, "group_key": form}, page) for form in forms)
                rows: Iterable[Row[Any]] = chain.from_iterable(pages)
            else:
                rows = whole.rows(session, group, page)
            for row in rows:
                if row.run_id not in seen:
                    seen.add(row.run_id)
                    yield row

    def _probe(self, session: Session, window: Sequence[EventHead], reads: _BatchReads) -> None:
        """Ask which groups of waits the events of ``window`` concern hold an armed wait
        (:class:`WaitsProbe`: a statement for up to 256 groups on SQLite, one for all on
        PostgreSQL), and, once, which event types and tenants the stranded runs' armed
        waits are for; their matches then read those only.  The keys loaded are left in ``reads`` for the matches."""
        asked: list[Group] = []
        for event in window:
            keys = reads.keys.setdefault(event.event_id, {})
            for workflow, path in self._groups_of(session, event.type, reads):
                forms = self._forms(event, workflow, path, keys)
                place = (event.type, workflow, path, event.tenant_id)
                asked.extend([(*place, None)] if forms is None else [(*place, form) for form in forms])
        reads.found = (reads.found or set()) | self._waits_probe.found(session, asked)
        reads.probed += len(window)
        if reads.kinds_read:
            return
        # No group: no wait of these events' types at all, a stranded run's neither.
        which = self._stranded_runs(session, reads) if asked else None
        if which is None:
            reads.stranded_kinds = set()
        else:
            waits = workflow_waits.c
            stmt = select(waits.event_type, waits.tenant_id).where(waits.armed.is_(True), waits.run_id.in_(which))
            reads.stranded_kinds = {(r.event_type, r.tenant_id) for r in session.execute(stmt.distinct())}
        reads.kinds_read = bool(asked)

    def _stranded_runs(self, session: Session, reads: _BatchReads) -> Any:
        """The stranded runs' ids, or a query of them if many; ``None``: there is none.
        Stranded runs are few (their own index), read once per transaction."""
        if reads.stranded is None:
            reads.stranded = session.scalars(self._stranded).all()
        if not reads.stranded:
            return None
        return select(workflow_runs.c.run_id).where(STRANDED) if len(reads.stranded) > _FEW else reads.stranded

    def _forms(
        self, event: EventHead, workflow: str, path: str, keys: dict[tuple[str, str], _Loaded | str | _Unloadable]
    ) -> tuple[str, ...] | None:
        """The forms of ``event``'s key whose waits at (``workflow``, ``path``) it may
        wake, where this App loads it with a key; ``None``: the group's waits whatever
        their key (a workflow a deploy removed, a step changed, an event it cannot load).
        The key is left in ``keys``."""
        d = self.engine.defs.get(workflow)
        if d is None:
            return None
        key = keys.get((workflow, path))
        if key is None:
            key = keys[workflow, path] = self._event_key(d, path, event)
        return key.stored if isinstance(key, _Loaded) and key.stored else None

    def _groups_of(self, session: Session, event_type: str, reads: _BatchReads) -> list[tuple[str, str]]:
        """The (workflow, path) groups of the waits for ``event_type``, read once per
        transaction, each found by one step along the match index: its waits are not read.
        Past ``_FEW`` groups (a loop of waits puts its runs at many paths) the rest in one
        read of the index's range."""
        found = reads.groups.get(event_type)
        if found is None:
            found = reads.groups[event_type] = self._groups_along(session, event_type)
        return found

    def _groups_along(self, session: Session, event_type: str) -> list[tuple[str, str]]:
        """The groups of :meth:`_groups_of`, read."""
        groups: list[tuple[str, str]] = []
        after: dict[str, Any] = {"event_type": event_type, "workflow": "", "path": ""}
        while len(groups) < _FEW:
            found = session.execute(self._next_group, after).first()
            if found is None:
                return groups
            groups.append((found.workflow, found.path))
            after.update(workflow=found.workflow, path=found.path)
        return groups + [(r.workflow, r.path) for r in session.execute(self._groups_after, after)]

    def _lock(self, session: Session, run_id: uuid.UUID, *, skip_locked: bool = True) -> Row[Any] | None:
        """The run's row, locked; ``None`` if it is gone or, ``skip_locked``, another
        worker holds it (PostgreSQL; SQLite runs one writer at a time)."""
        stmt = select(workflow_runs).where(workflow_runs.c.run_id == run_id)
        return session.execute(stmt.with_for_update(skip_locked=skip_locked and self.engine.postgres)).first()

    def _event_key(self, d: Definition, path: str, event: EventHead) -> _Loaded | str | _Unloadable:
        """``event`` loaded for the runs waiting at ``path``, with its key there (``None``:
        none matches); or ``_UNPLACED``: this definition has no wait for that event there,
        the runs are stranded; or :class:`_Unloadable`: this deploy cannot load it, the
        runs are stranded."""
        try:
            step = d.step_at(path)
        except (LookupError, ValueError):
            return _UNPLACED
        if not isinstance(step, WaitForEvent) or self.engine.registry.event_name(step.event) != event.type:
            return _UNPLACED  # not loaded as another class; a run that noted its event is stranded
        try:
            value = self.engine.registry.load(event, step.event, f"the event {event.event_id}")
        except UnreadableEvent as exc:
            # This deploy's class (or upcasters) cannot read an event another deploy wrote:
            # a run it was for must not miss it, and its key is unknown here.
            return _Unloadable(f"at step {path}: {exc}; a deploy that can read it resumes the run")
        try:
            forms = key_forms(self.engine.codec, called(step.event_key, value, "event_key="))
            return _Loaded(forms[0], value, step.event, forms)
        except BaseException as exc:
            if isinstance(exc, NOT_A_STEPS_FAILURE):
                raise
            logger.exception("workflow %s: event_key of step %s failed for event %s", d.name, path, event.event_id)
            return _Loaded(None, value, step.event)

    def _take(self, event: EventHead, loaded: _Loaded) -> object:
        """The event as a run's wait expects it: the loaded one, once."""
        if not loaded.taken:
            loaded.taken = True
            return loaded.value
        return self.engine.registry.load(event, loaded.cls, f"the event {event.event_id}")
