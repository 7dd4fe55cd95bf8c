"""The App: boot validation, then dispatching handlers, each in one transaction."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, TypeVar, cast

import httpx
from sqlalchemy import MetaData, Table, text
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from ._boot import validate
from ._ctx import User
from ._data import table_of
from ._delivery import SecretResolver, env_secrets
from ._engine import make_engine
from ._errors import BootError
from ._feature import Feature, Workflow, WriteHandler
from ._idempotency import NOT_STORED, Keyed, fingerprint, key_problem
from ._interpreter import exception_failure, interpret, start_run
from ._mail import MaildirTransport, MailTransport
from ._notify import CHANNEL, Listener
from ._outbox import Deliverer, deliver_due
from ._outbox import items as outbox_items
from ._outbox_types import OutboxItem
from ._poison import refusal
from ._results import Failure, Ok, fail
from ._runs import RunInfo
from ._runtime import TENANT_KEY, Runtime, deny, install_tenant_filter, wrong_payload
from ._state import Codec, StateError
from ._structuring import make_converter, structure
from ._tables import metadata as framework_metadata
from ._transient import transient
from ._workflows import Engine

P = TypeVar("P")
D = TypeVar("D")

Clock = Callable[[], datetime]
logger = logging.getLogger("kumiko_typed")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class AppSettings(TypedDict, total=False):
    """Every keyword of :class:`App` but ``database_url``, typed as ``App`` takes it.

    What :meth:`App.with_database` carries over, and what the testing kit's App factories
    accept; a test fails when ``App`` gains a keyword that is not here."""

    clock: Clock | None
    mail: MailTransport | None
    secrets: Callable[[str], str | None] | None
    http: httpx.Client | None
    value_types: Sequence[type[Any]]
    idempotency_retention: timedelta


class App:
    """An application: features, a database, a clock.

    Building it runs the boot validation (the same rules the mypy plugin checks) and
    raises one :class:`BootError` listing every problem.
    """

    def __init__(
        self,
        features: Sequence[Feature[Any]],
        *,
        database_url: str = "sqlite:///kumiko.sqlite3",
        clock: Clock | None = None,
        mail: MailTransport | None = None,
        secrets: Callable[[str], str | None] | None = None,
        http: httpx.Client | None = None,
        value_types: Sequence[type[Any]] = (),
        idempotency_retention: timedelta = timedelta(days=1),
    ) -> None:
        problems = validate(features)
        if not (isinstance(idempotency_retention, timedelta) and idempotency_retention > timedelta(0)):
            problems.append(f"idempotency_retention must be a positive timedelta, not {idempotency_retention!r}")
        if problems:
            raise BootError(problems)
        #: Every constructor argument but the features and the database, exactly as given.
        self._settings: AppSettings = {
            "clock": clock,
            "mail": mail,
            "secrets": secrets,
            "http": http,
            "value_types": tuple(value_types),
            "idempotency_retention": idempotency_retention,
        }
        self.features = tuple(features)
        self.database_url = database_url
        self.clock: Clock = clock or _utc_now
        #: How long a dispatch's idempotency key answers repeats with its stored result.
        self.idempotency_retention = idempotency_retention
        self.mail: MailTransport = mail if mail is not None else MaildirTransport()
        self.secrets: SecretResolver = secrets or env_secrets
        self._http = http
        self._deliverer = Deliverer(self.mail, self._http_client, self.secrets)
        self._stop = threading.Event()
        self.engine = make_engine(database_url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        install_tenant_filter(self._sessions)
        self._handlers: dict[str, WriteHandler[Any, Any]] = {h.name: h for f in self.features for h in f.handlers}
        self._converter = make_converter()
        self.runtime = Runtime(self.features, self._converter)
        workflows = [w for f in self.features for w in f.workflows]
        roots: list[type[Any]] = [h.payload_type for h in self._handlers.values()]
        roots += [w.trigger.payload_type for w in workflows]
        roots += list(self.runtime.event_names)
        roots += list(value_types)
        self.codec = Codec(roots, self.runtime.aggregate_types)
        self._workflows = {w.name: w for w in workflows}
        self._engine = Engine(self._sessions, self.runtime, self.codec, self._converter, workflows, self.clock)

    def __repr__(self) -> str:
        return f"<App {[f.name for f in self.features]} on {self.engine.url!r}>"

    def with_database(self, database_url: str) -> App:
        """The same App — its features and every setting it was built with — on another
        database.  The command line uses it for ``--database-url``."""
        return App(self.features, database_url=database_url, **self._settings)

    @property
    def handlers(self) -> Mapping[str, WriteHandler[Any, Any]]:
        """Registered handlers by full name."""
        return self._handlers

    @property
    def workflows(self) -> Mapping[str, Workflow[Any]]:
        """Registered workflows by full name."""
        return self._workflows

    def tables(self) -> list[Table]:
        """The framework tables, the entities' tables and the declared projections."""
        tables: list[Table] = list(framework_metadata.tables.values())
        tables = [t for t in tables if t.name.startswith("kumiko_")]
        for feature in self.features:
            tables += [table_of(e) for e in feature.entities]
            tables += [table_of(p) for p in feature.projections]
        return list(dict.fromkeys(tables))

    def create_all(self) -> None:
        """Create the tables the app needs (idempotent; Alembic is the way to migrate)."""
        by_metadata: dict[MetaData, list[Table]] = {}
        for table in self.tables():
            by_metadata.setdefault(table.metadata, []).append(table)
        for metadata, tables in by_metadata.items():
            metadata.create_all(self.engine, tables=tables)

    def dispose(self) -> None:
        """Close the database connections (and the HTTP client the App made itself)."""
        self.engine.dispose()
        if self._own_http is not None:
            self._own_http.close()
            self._own_http = None

    _own_http: httpx.Client | None = None

    def _http_client(self) -> httpx.Client:
        if self._http is not None:
            return self._http
        if self._own_http is None:
            self._own_http = httpx.Client(timeout=httpx.Timeout(10.0), follow_redirects=False)
        return self._own_http

    # --- outbox and workers ---------------------------------------------------------

    def outbox(self) -> list[OutboxItem]:
        """Every outbox row, oldest first."""
        return outbox_items(self._sessions)

    def run_worker(self, *, once: bool = False, poll_interval: float = 1.0) -> dict[str, int]:
        """One worker: fire workflow triggers (events, cron), wake event waits, resume due
        runs, deliver due outbox rows.  ``once=True`` runs one pass and returns its counts;
        otherwise loop (sleeping ``poll_interval`` when idle) until :meth:`stop_worker`."""
        total = {"started": 0, "resumed": 0, "sent": 0, "retried": 0, "dead": 0}
        postgres = self.engine.dialect.name == "postgresql"
        listener = Listener(self.engine, idle=self._stop.wait) if not once and postgres else None
        try:
            return self._worker_loop(total, once, poll_interval, listener)
        finally:
            # Cleared on the way out, not the way in: a stop asked for just before the
            # loop started (a signal during start-up) still stops it.
            self._stop.clear()
            if listener is not None:
                listener.close()

    def _worker_loop(
        self, total: dict[str, int], once: bool, poll_interval: float, listener: Listener | None
    ) -> dict[str, int]:
        worked = False
        while True:
            try:
                this_pass = self._worker_pass()
            except DBAPIError as exc:
                # What a pass committed stays; the rest is done again by the next pass.  A
                # worker that has worked also outlives an unreachable server (a restart);
                # one that never got through stops at once (a wrong URL, no tables).
                outage = worked and isinstance(exc, OperationalError)
                if once or not (transient(exc) or outage):
                    raise
                logger.warning("worker pass failed, next one in %.1f s: %s", poll_interval, exc.orig)
                self._stop.wait(poll_interval)
                if self._stop.is_set():
                    return total
                continue
            worked = True
            for key, value in this_pass.items():
                total[key] += value
            if once or self._stop.is_set():
                return total
            if not any(this_pass.values()):
                if listener is not None:
                    listener.wait(poll_interval)  # a NOTIFY from a commit ends the wait early
                else:
                    self._stop.wait(poll_interval)

    def _worker_pass(self) -> dict[str, int]:
        started = self._engine.consume_events() + self._engine.fire_cron()
        resumed = self._engine.resume_due()
        counts = deliver_due(self._sessions, self._deliverer, self.clock)
        return {
            "started": started,
            "resumed": resumed,
            "sent": counts.sent,
            "retried": counts.retried,
            "dead": counts.dead,
        }

    # --- workflows ------------------------------------------------------------------

    def start_workflow(self, workflow: Workflow[P], payload: P, *, user: User, key: str | None = None) -> uuid.UUID:
        """Start a run now, in its own transaction, up to its first suspension.

        With a ``key`` (1 to 255 printable characters), at most one run is ever started
        per (workflow, the user's tenant, key): a later start returns that run's id."""
        return self._engine.start(workflow, payload, user, key)

    def get_run(self, run_id: uuid.UUID) -> RunInfo | None:
        return self._engine.get(run_id)

    def runs(self, workflow: Workflow[Any] | str | None = None) -> list[RunInfo]:
        """Workflow runs, newest first (of one workflow, or of all)."""
        name = workflow.name if isinstance(workflow, Workflow) else workflow
        return self._engine.list(name)

    def stop_worker(self) -> None:
        """Ask a running :meth:`run_worker` loop to return after its current pass."""
        self._stop.set()
        if self.engine.dialect.name == "postgresql":
            with self.engine.connect() as conn:  # wake a listener now rather than at its next poll
                conn.execute(text("SELECT pg_notify(:channel, 'stop')"), {"channel": CHANNEL})
                conn.commit()

    # --- dispatch -------------------------------------------------------------------

    def dispatch(
        self,
        handler: WriteHandler[P, D],
        payload: P,
        *,
        user: User,
        correlation_id: uuid.UUID | None = None,
        idempotency_key: str | None = None,
    ) -> Ok[D] | Failure:
        """Run ``handler`` with a structured ``payload`` in one transaction.

        With an ``idempotency_key``, a repeat of the call (same tenant, handler, key and
        payload) within ``idempotency_retention`` returns the first call's result without
        running; the same key with another payload is ``idempotency_conflict``."""
        if self._handlers.get(handler.name) is not handler:
            return fail("not_found", f"handler {handler.name} is not registered in this App")
        refused = deny(handler, user) or wrong_payload(handler, payload)  # roles first (DESIGN §5)
        if refused is not None:
            return refused
        return cast("Ok[D] | Failure", self._run(handler, payload, user, correlation_id, idempotency_key))

    def dispatch_json(
        self,
        name: object,
        data: object,
        *,
        user: User,
        correlation_id: uuid.UUID | None = None,
        idempotency_key: str | None = None,
    ) -> Ok[object] | Failure:
        """Run the handler called ``name`` with untrusted JSON-like ``data``."""
        if not isinstance(name, str):  # untrusted too: a list would not even hash
            return fail("not_found", "a handler name must be a string", {"known": sorted(self._handlers)})
        handler = self._handlers.get(name)
        if handler is None:
            return fail("not_found", f"no handler named {name!r}", {"known": sorted(self._handlers)})
        denied = deny(handler, user)
        if denied is not None:
            return denied
        payload = structure(self._converter, data, handler.payload_type)
        if isinstance(payload, list):
            return fail("validation_error", f"invalid payload for {name}", payload)
        return self._run(handler, payload, user, correlation_id, idempotency_key)

    def _keyed(self, handler: WriteHandler[Any, Any], payload: object, user: User, key: object) -> Keyed | Failure:
        problem = key_problem(key)
        if problem is not None:
            return fail("validation_error", problem, [{"path": "idempotency_key", "message": problem}])
        try:
            payload_hash = fingerprint(self.codec, payload)
        except StateError as exc:
            message = f"the payload cannot be stored for an idempotency key: {exc}"
            return fail("validation_error", message, [{"path": "$", "message": message}])
        return Keyed(self.codec, user.tenant_id, handler.name, cast(str, key), payload_hash)

    def _run(
        self,
        handler: WriteHandler[Any, Any],
        payload: object,
        user: User,
        correlation_id: uuid.UUID | None,
        idempotency_key: str | None = None,
    ) -> Ok[object] | Failure:
        # The callers have looked the handler up, checked the roles and the payload.
        keyed = None if idempotency_key is None else self._keyed(handler, payload, user, idempotency_key)
        if isinstance(keyed, Failure):
            return keyed
        with self._sessions() as session:
            session.info[TENANT_KEY] = user.tenant_id
            session.begin()
            try:
                now = self.clock()
                if keyed is not None:
                    stored = keyed.claim(session, now, self.idempotency_retention)
                    if stored is not None:
                        session.rollback()
                        return stored
                    savepoint = session.begin_nested()  # a business Failure keeps the claim
                run = start_run(
                    handler.pipeline,
                    runtime=self.runtime,
                    handler=handler.name,
                    payload=payload,
                    user=user,
                    session=session,
                    now=now,
                    correlation_id=correlation_id or uuid.uuid4(),
                )
                result = interpret(handler.pipeline, run, handler=handler.name)
                if keyed is not None:
                    return self._finish_keyed(session, savepoint, keyed, result)
                if isinstance(result, Ok):
                    session.commit()
                else:
                    session.rollback()
                return result
            except Exception as exc:
                session.rollback()
                where = f"handler {handler.name}"
                return exception_failure(exc, f"{where}, outside its steps,", where, {"handler": handler.name})

    @staticmethod
    def _finish_keyed(
        session: Session, savepoint: SessionTransaction, keyed: Keyed, result: Ok[object] | Failure
    ) -> Ok[object] | Failure:
        """Commit the handler's work with its result on the claimed key, or (for a
        Failure) only the result; a failure that is not stored releases the key."""
        if isinstance(result, Ok):
            savepoint.commit()
        else:
            savepoint.rollback()
            if result.code in NOT_STORED:
                session.rollback()
                return result
        try:
            keyed.record(session, result)
        except (StateError, DataError) as exc:  # the codec's refusal, or the database's (a NUL)
            session.rollback()
            reason = refusal(exc)
            return fail(
                "unstorable_state", f"handler {keyed.handler}: the result cannot be stored for its key: {reason}"
            )
        session.commit()
        return result
