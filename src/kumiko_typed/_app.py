"""The App: boot validation, then dispatching handlers, each in one transaction."""

from __future__ import annotations

import http.cookiejar
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypedDict, TypeVar, cast

import cattrs
import httpx
from sqlalchemy import Engine, MetaData, Table
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session, sessionmaker

from . import _retention
from ._access import NO_TENANT_REFUSED, TENANT_KEY, deny, install_tenant_filter, no_tenant, wrong_payload
from ._boot import validate, value_type_problems
from ._connection import DIRECT, Direct
from ._ctx import User
from ._database_urls import shown_url
from ._delivery import SecretResolver, env_secrets
from ._durations import positive_seconds
from ._engine import make_engine
from ._errors import BootError, StateError
from ._feature import Feature, QueryHandler, Workflow, WriteHandler
from ._http_deadline import DeadlineTransport
from ._http_proxy import proxy_mounts
from ._idempotency import NOT_STORED, Keyed, fingerprint, key_problem, purge_expired
from ._interpreter import exception_failure, once_more_if_lost, raised, run_in_scope, start_run, unavailable
from ._mail import MaildirTransport, MailTransport
from ._operations import Operations
from ._outbox import WEBHOOK_TIMEOUT, WEBHOOK_TIMEOUT_MAX, Deliverer
from ._outbox import items as outbox_items
from ._outbox_types import OutboxItem
from ._poison import refusal
from ._queries import run_query
from ._registered_names import MAX_FULL_NAME
from ._registry import Registry
from ._results import Failure, Ok, fail
from ._retention import FINISHED, checked_age, checked_batch, cutoff
from ._run_check import Incompatible, check_runs
from ._run_listing import RunFilter
from ._runs import RunInfo, RunStatus
from ._schema_check import missing_columns
from ._serialization import Codec
from ._server_clock import ServerClock
from ._status_filter import chosen_statuses
from ._streams import ProjectionReport, StoredEvent, read_stream, rebuild
from ._structuring import make_converter, structure, unkeyable, unreadable
from ._tables import metadata as framework_metadata
from ._tables import table_of
from ._unregistered import not_registered
from ._worker import Worker
from ._workflow_engine import WorkflowEngine

__all__ = ["App", "AppSettings", "Clock"]

P = TypeVar("P")
D = TypeVar("D")

Clock = Callable[[], datetime]
logger = logging.getLogger("kumiko_typed")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _nothing() -> None:
    pass


def _aware(clock: Clock) -> Clock:
    """``clock``, refusing a reading without a time zone and reading the others in UTC.

    ``datetime.now()`` gives this machine's local wall time without a zone: stored as UTC,
    it moved every wait and retry by the zone's offset (an hour in Berlin), and the first
    cron pass after it raised ``TypeError: can't compare offset-naive and offset-aware
    datetimes``, every time.  In UTC: Python adds a timedelta to an aware time on its wall
    clock, so with a zone that keeps daylight saving (``ZoneInfo("Europe/Berlin")``) a
    two-hour wait begun at 01:30 on the night the clocks go back lasted three hours; leases
    and backoffs moved alike."""

    def now() -> datetime:
        moment = clock()
        if not isinstance(moment, datetime) or moment.utcoffset() is None:
            raise TypeError(
                f"App(clock=...) must return a time-zone-aware datetime, not {moment!r} "
                "(for the system's time: datetime.now(UTC))"
            )
        return moment.astimezone(UTC)

    return now


def _part_problems(clock: object, mail: object, secrets: object, http: object) -> list[str]:
    """The parts an App is given that cannot do their job, refused at boot: each failed
    only at the first dispatch or delivery that used it (``secrets={"CRM": ...}``, a dict,
    failed every authenticated webhook until it was dead, and an empty one read the
    environment instead; ``mail=SmtpTransport``, the class, every mail)."""
    problems = []
    if clock is not None and not callable(clock):
        problems.append(f"clock must be a function returning the time, not {type(clock).__name__}")
    if isinstance(mail, type):
        problems.append(f"mail must be a mail transport, not the class {mail.__name__}: make one, {mail.__name__}(...)")
    elif mail is not None and not callable(getattr(mail, "send", None)):
        problems.append(
            f"mail must be a mail transport, an object with a method send(message, secrets), not {type(mail).__name__}"
        )
    if secrets is not None and (isinstance(secrets, type) or not callable(secrets)):
        fix = " (for a dict, its .get)" if isinstance(secrets, Mapping) else ""
        problems.append(
            f"secrets must be a function from a secret's name to its value{fix}, not {type(secrets).__name__}"
        )
    if http is not None and not isinstance(http, httpx.Client):
        problems.append(f"http must be an httpx.Client, not {type(http).__name__}")
    return problems


def _clocks(clock: Clock | None, engine: Engine) -> tuple[Clock, Clock, Callable[[], None]]:
    """The App's clock, what it reads (the clock checked for a time zone), and what
    corrects the default clock to the database server's before work that schedules (see
    ``_server_clock``)."""
    if clock is not None:
        return clock, _aware(clock), _nothing
    if engine.dialect.name == "postgresql":
        server = ServerClock(engine, _utc_now)
        return server, server, server.follow
    return _utc_now, _utc_now, _nothing  # SQLite: one machine, whose clock is the database's


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
    delivery_concurrency: int
    webhook_timeout: timedelta
    webhook_private_addresses: bool


class App:
    """An application: features, a database, a clock.

    Building it runs the boot validation (the same rules the mypy plugin checks) and
    raises one :class:`BootError` listing every problem.  It connects lazily: call
    :meth:`create_all` (or migrate) before the first dispatch.

    Parameters:
        features: the features of the application; names of features and handlers are
            unique across them.
        database_url: a SQLAlchemy URL: ``sqlite:///file`` (embedded, the default) or
            ``postgresql+psycopg://...`` (many workers on many hosts; the ``postgres`` extra
            installs psycopg).  Another database or driver, or a URL SQLAlchemy cannot
            read, is a boot problem.
        clock: returns the current time (timezone-aware, read in UTC; a naive reading
            raises ``TypeError`` where it is read); steps see it as ``c.now``, workflow timers,
            cron ticks, outbox backoffs and leases use it.  Default: the system's UTC time,
            on PostgreSQL corrected to the database server's clock (read at most once a
            minute), so that processes on machines whose clocks differ agree
            (docs/operations.md, "Clocks").
            Tests pass ``kumiko_typed.testing.FakeClock``.
        mail: the transport that delivers ``send_mail`` rows (any
            :class:`MailTransport`).  Default: a :class:`MaildirTransport` in ``./kumiko-mail``.
        secrets: resolves a secret reference (``bearer("ref")``) to its value at delivery
            time; never stored.  Default: the environment variable ``KUMIKO_SECRET_<REF>``.
        http: the ``httpx.Client`` that delivers webhooks.  Default: one the App makes
            (10 s per network operation, ``webhook_timeout`` per attempt, no redirects, no
            cookies kept between deliveries, through the environment's ``HTTP_PROXY``,
            ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` as httpx's default client)
            and closes in :meth:`dispose`.  A client of
            your own keeps what it is configured to, its timeouts too: ``webhook_timeout``
            is enforced only by the App's own client.
        value_types: further attrs classes (or enums) that workflow state and stored
            dispatch results may hold (payload, event and entity classes, and the classes
            and enums their fields name, are known already; so are a feature's own
            ``Feature(value_types=...)``).
        idempotency_retention: how long a dispatch's ``idempotency_key`` answers repeats
            with the stored first result (default one day).
        delivery_concurrency: how many outbox deliveries one worker keeps in flight at
            once (default 4): the mail transport and the HTTP client are called from that
            many threads.
        webhook_timeout: how long one webhook attempt may take in all: connecting, sending,
            the status line and headers, and reading a small body (default 30 seconds,
            at most one minute, well inside the five-minute claim lease).  An attempt
            that runs out is a failed attempt ("the receiver did not answer within N s"),
            tried again by the step's retry policy.
        webhook_private_addresses: whether webhooks may go to private, loopback,
            link-local and reserved addresses (default yes).  Say ``False`` where a URL
            comes from a tenant: a webhook to such an address (checked on the address
            connected to, after the name's lookup) is ``dead`` at its first attempt.  Only
            the App's own client can check it: with ``http=`` it is a boot problem.
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
        delivery_concurrency: int = 4,
        webhook_timeout: timedelta = WEBHOOK_TIMEOUT,
        webhook_private_addresses: bool = True,
    ) -> None:
        features = _read_once(features)
        problems = [*validate(features), *value_type_problems("App", value_types)]
        if not (isinstance(idempotency_retention, timedelta) and idempotency_retention > timedelta(0)):
            problems.append(f"idempotency_retention must be a positive timedelta, not {idempotency_retention!r}")
        if type(delivery_concurrency) is not int or delivery_concurrency < 1:
            problems.append(f"delivery_concurrency must be a positive int, not {delivery_concurrency!r}")
        if not (isinstance(webhook_timeout, timedelta) and timedelta(0) < webhook_timeout <= WEBHOOK_TIMEOUT_MAX):
            problems.append(
                "webhook_timeout must be a timedelta above 0 and at most 60 seconds (inside the outbox's "
                f"five-minute claim lease), not {webhook_timeout!r}"
            )
        problems += _part_problems(clock, mail, secrets, http)
        private: object = webhook_private_addresses  # typed a bool; not so without a checker
        if type(private) is not bool:
            # A text such as "no" is true: private addresses would stay open where they were meant closed.
            problems.append(f"webhook_private_addresses must be True or False, not {private!r}")
        elif not webhook_private_addresses and http is not None:
            problems.append(
                "webhook_private_addresses=False is checked by the App's own HTTP client only: "
                "with http=your client, refuse private addresses in its transport, or drop http="
            )
        try:
            engine = make_engine(database_url)  # builds, never connects: nothing to dispose on a raise
        except BootError as exc:
            problems += exc.problems
        if problems:
            raise BootError(problems)
        self._converter = make_converter()
        _refuse_unreadable_payloads(self._converter, features)
        #: Every constructor argument but the features and the database, exactly as given.
        self._settings: AppSettings = {
            "clock": clock,
            "mail": mail,
            "secrets": secrets,
            "http": http,
            "value_types": tuple(value_types),
            "idempotency_retention": idempotency_retention,
            "delivery_concurrency": delivery_concurrency,
            "webhook_timeout": webhook_timeout,
            "webhook_private_addresses": webhook_private_addresses,
        }
        self.features = tuple(features)
        self.database_url = database_url
        # ``clock`` as given (a test moves ``app.clock``) or the default; what the App reads
        # (checked for a time zone); what reads the server's clock when due before work that
        # schedules: a dispatch, a manual start, a worker's pass (``ServerClock.follow``).
        self.clock, self._now, self._follow = _clocks(clock, engine)
        #: How long a dispatch's idempotency key answers repeats with its stored result.
        self.idempotency_retention = idempotency_retention
        self.mail: MailTransport = mail if mail is not None else MaildirTransport()
        self.secrets: SecretResolver = secrets or env_secrets
        self._http = http
        self._public_only = not webhook_private_addresses
        self._http_lock = threading.Lock()
        self.engine = engine
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: Each thread's idle dispatch session (``_take_session``).
        self._local = threading.local()
        install_tenant_filter(self._sessions)
        self._handlers: dict[str, WriteHandler[Any, Any]] = {h.name: h for f in self.features for h in f.handlers}
        self._queries: dict[str, QueryHandler[Any, Any]] = {q.name: q for f in self.features for q in f.queries}
        workflows = [w for f in self.features for w in f.workflows]
        self._registry = Registry(self.features, self._converter)
        roots: list[type[Any]] = [h.payload_type for h in self._handlers.values()]
        roots += [w.trigger.payload_type for w in workflows]
        roots += list(self._registry.event_names)
        roots += [*value_types, *(t for f in self.features for t in f.value_types)]
        self.codec = Codec(roots, self._registry.aggregate_types, self._registry)
        self._workflows = {w.name: w for w in workflows}
        #: Not ``engine``: that is SQLAlchemy's, which users may need (``App.engine``).
        self._workflow_engine = WorkflowEngine(
            self._sessions, self._registry, self.codec, self._converter, workflows, self._now
        )
        self._operations = Operations(self._sessions, self._workflow_engine, self._now)
        self._deliverer = Deliverer(self.mail, self._http_client, self.secrets, delivery_concurrency, webhook_timeout)
        self._worker = Worker(self.engine, self._workflow_engine, self._deliverer, self._now, self._follow)

    def __repr__(self) -> str:
        # Not the URL's repr: SQLAlchemy hides a password in the user part only, not ?password=.
        return f"<App {[f.name for f in self.features]} on {shown_url(self.engine.url)}>"

    def with_database(self, database_url: str) -> App:
        """The same App — its features and every setting it was built with — on another
        database.  The command line uses it for ``--database-url``."""
        return App(self.features, database_url=database_url, **self._settings)

    @property
    def handlers(self) -> Mapping[str, WriteHandler[Any, Any]]:
        """Registered handlers by full name."""
        return self._handlers

    @property
    def queries(self) -> Mapping[str, QueryHandler[Any, Any]]:
        """Registered query handlers by full name."""
        return self._queries

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
        """Create the tables the app needs (idempotent; Alembic is the way to migrate).

        An existing table is never altered: one that lacks a column the code needs (a
        database of an older release, an entity's new field) raises :class:`BootError`
        naming every such column, rather than failing later inside a dispatch."""
        by_metadata: dict[MetaData, list[Table]] = {}
        for table in self.tables():
            by_metadata.setdefault(table.metadata, []).append(table)
        for metadata, tables in by_metadata.items():
            metadata.create_all(self.engine, tables=tables)
        problems = missing_columns(self.engine, self.tables())
        if problems:
            raise BootError(problems)

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
        made = self._own_http  # every delivery asks: no lock once it is made
        if made is not None:
            return made
        with self._http_lock:  # deliveries run in several threads: make one client
            if self._own_http is None:
                # No cookie jar: a receiver's Set-Cookie would be sent back with the next
                # delivery to its host, whichever tenant's row that is.
                jar = http.cookiejar.CookieJar(policy=_NoCookies())
                # The environment's proxies as httpx's default client takes them, which it
                # does not once a transport is given (see _http_proxy).
                self._own_http = httpx.Client(
                    timeout=httpx.Timeout(10.0),
                    follow_redirects=False,
                    cookies=jar,
                    transport=DeadlineTransport(public_only=self._public_only),
                    mounts=proxy_mounts(self._deliverer.secrets.remember, public_only=self._public_only),
                )
            return self._own_http

    def purge_idempotency_keys(self, *, batch: int = 1000) -> int:
        """Delete the idempotency keys older than ``idempotency_retention`` and return how
        many: an expired key answers nothing any more, and unless it is used again its row
        would stay forever.  Run it from a periodic job (``kumiko-typed keys purge``); it
        deletes ``batch`` rows per transaction, beside running dispatches."""
        return purge_expired(self.engine, cutoff(self._now(), self.idempotency_retention), checked_batch(batch))

    def purge_outbox(self, *, older_than: timedelta, batch: int = 1000) -> int:
        """Delete the outbox rows sent more than ``older_than`` ago (by the App's clock) and
        return how many.  A sent row is never read again, yet stays with its message (a
        mail's recipients and body) until deleted.  Pending and dead rows stay whatever
        their age: requeue a dead row (:meth:`requeue`) or delete it yourself.  Run it from
        a periodic job (``kumiko-typed outbox purge``); it deletes ``batch`` rows per
        transaction, beside running workers."""
        before = cutoff(self._now(), checked_age(older_than))
        return _retention.purge_outbox(self.engine, before, checked_batch(batch))

    def purge_runs(
        self,
        *,
        older_than: timedelta,
        status: RunStatus | Iterable[RunStatus] | None = None,
        batch: int = 1000,
    ) -> int:
        """Delete the finished workflow runs (completed, failed and cancelled; or those in
        ``status``) last changed more than ``older_than`` ago (by the App's clock), with
        their step values, and return how many.  Running and suspended runs are never
        deleted.  A keyed start (``start_workflow(..., key=)``) whose run was deleted
        starts a new run: keep runs longer than callers may repeat a key.  Event and cron
        triggers start no run again (their cursors are past them).  Run it from a periodic
        job (``kumiko-typed runs purge``); it deletes ``batch`` rows per transaction."""
        statuses = chosen_statuses(status, FINISHED, "a finished run") or FINISHED
        before = cutoff(self._now(), checked_age(older_than))
        return _retention.purge_runs(self.engine, before, statuses, checked_batch(batch))

    # --- outbox and workers ---------------------------------------------------------

    def outbox(
        self,
        *,
        status: Literal["pending", "sent", "dead"] | Iterable[Literal["pending", "sent", "dead"]] | None = None,
        limit: int | None = None,
        after: uuid.UUID | None = None,
    ) -> list[OutboxItem]:
        """Every outbox row, oldest first (by when it was queued, then ``id``); or those in
        ``status`` (one, or a collection), chosen by the database: sent rows stay until
        purged, and ``status=("pending", "dead")`` does not read them.  At most ``limit``;
        ``after``: only the rows listed after that one, so that the next page is
        ``outbox(..., limit=n, after=page[-1].id)`` (rows queued meanwhile come last, they
        do not shift it).  An unknown status, a limit below 1 or an argument of the wrong
        type raises ``ValueError`` or ``TypeError``; an ``after`` that is no row,
        ``LookupError``."""
        return once_more_if_lost(raised, outbox_items, self._sessions, status, limit, after)

    def run_worker(self, *, once: bool = False, poll_interval: float = 1.0) -> dict[str, int]:
        """One worker: fire workflow triggers (events, cron), wake event waits, resume due
        runs, deliver due outbox rows.  ``once=True`` runs one pass and returns its counts;
        otherwise loop (sleeping ``poll_interval`` when idle) until :meth:`stop_worker`, the
        deliveries in a thread of their own so that neither kind of work waits for the other.
        The counts: runs ``started``, runs ``resumed`` (by time or by an event), outbox
        rows ``sent``, ``retried`` (failed, tried again later) and ``dead``."""
        if not positive_seconds(poll_interval):
            # 0 or less polls in a busy loop; NaN and infinity break the idle wait.
            raise ValueError(f"poll_interval must be a positive number of seconds, not {poll_interval!r}")
        return self._worker.run(once=once, poll_interval=poll_interval)

    # --- workflows ------------------------------------------------------------------

    def start_workflow(self, workflow: Workflow[P], payload: P, *, user: User, key: str | None = None) -> uuid.UUID:
        """Start a run now, in its own transaction, up to its first suspension.

        With a ``key`` (1 to 255 printable characters), at most one run is ever started
        per (workflow, the user's tenant, key): a later start returns that run's id.
        A user of the nil tenant (no tenant's: cron runs') who is no ``sysadmin`` raises
        ``PermissionError``, as every entry point taking a ``User`` refuses one."""
        # Typed, but a caller without a type checker gets a sentence, not an AttributeError.
        if not isinstance(workflow, Workflow):
            raise TypeError(
                f"start_workflow takes a Workflow (app.workflows[name] by name), not {type(workflow).__name__}"
            )
        if not isinstance(user, User):
            raise TypeError(f"workflow {workflow.name}: user must be a User, not {type(user).__name__}")
        if no_tenant(user) is not None:
            raise PermissionError(f"workflow {workflow.name}: {NO_TENANT_REFUSED}")
        if self._workflows.get(workflow.name) is not workflow:
            raise LookupError(not_registered("workflow", workflow.name, workflow.feature, self.features))
        self._follow()  # its first segment may schedule (a wait): by the server's clock
        return self._workflow_engine.start(workflow, payload, user, key)

    def cancel_run(self, run_id: uuid.UUID, *, user: User, reason: str | None = None) -> Ok[RunInfo] | Failure:
        """Stop a running or suspended run for good: its status becomes ``cancelled``
        (``error`` holds the ``reason``, at most 1000 characters, and who cancelled), and
        no worker resumes it.  A segment running at that moment finishes its transaction
        first; past the database's wait for it (SQLite's busy timeout, a PostgreSQL
        ``lock_timeout``) the cancel is ``unavailable`` and changes nothing.  Cancelling a
        cancelled run again changes nothing; a completed or failed one
        is ``status_conflict``.  A run of another tenant is ``not_found`` unless ``user``
        has the ``sysadmin`` role."""
        return self._operations.cancel(run_id, user, reason)

    def result(self, workflow: Workflow[Any, D], run_id: uuid.UUID, *, user: User) -> Ok[D] | Failure:
        """What a completed run of ``workflow`` returned: the data of its ``return_``
        (``None`` for a pipeline without one).  A run that has not completed (running,
        suspended, failed, cancelled) is ``status_conflict`` with its ``status`` (and
        ``error``) in the details; a run of another workflow, or of another tenant
        (unless ``user`` has the ``sysadmin`` role), is ``not_found``."""
        # Typed, but a caller without a type checker passing the name got an AttributeError.
        given: object = workflow
        if not isinstance(given, Workflow):
            message = f"workflow must be a Workflow (app.workflows[name] by name), not {type(given).__name__}"
            return fail("validation_error", message, [{"path": "workflow", "message": message}])
        return cast("Ok[D] | Failure", self._operations.result(workflow.name, run_id, user))

    def requeue(self, outbox_id: uuid.UUID, *, user: User) -> Ok[OutboxItem] | Failure:
        """Deliver a ``dead`` outbox row again: it is pending, due now, with its attempts
        counted from zero (its retry policy applies afresh; the last error stays until
        the next attempt).  A row that is not dead is ``status_conflict``; one of another
        tenant (unless ``user`` has the ``sysadmin`` role) is ``not_found``."""
        return self._operations.requeue(outbox_id, user)

    def check_runs(self) -> list[Incompatible]:
        """Before deploying this App's code: every running or suspended run in its
        database that the code could not resume, grouped by workflow, path and reason
        (empty: every run would go on).  Only reads."""
        # An operator's read, as runs(): once more on a fresh connection if a restart
        # killed its pooled one (docs/operations.md, "Connections after a restart").
        return once_more_if_lost(raised, check_runs, self._workflow_engine)

    def get_run(self, run_id: uuid.UUID) -> RunInfo | None:
        """One run of any tenant (an operator's view), or ``None`` if there is none."""
        if not isinstance(run_id, uuid.UUID):  # typed, but an id from a URL may still be text
            raise TypeError(f"run_id must be a uuid.UUID, not {type(run_id).__name__}")
        # An operator's view, as runs() and outbox(): run once more on a fresh connection if
        # a restart killed its pooled one (docs/operations.md, "Connections after a restart").
        return once_more_if_lost(raised, self._workflow_engine.get, run_id)

    def runs(
        self,
        workflow: Workflow[Any] | str | None = None,
        *,
        status: RunStatus | Iterable[RunStatus] | None = None,
        stranded: bool = False,
        limit: int | None = None,
        before: uuid.UUID | None = None,
        tenant_id: uuid.UUID | None = None,
        key: str | None = None,
        event_id: uuid.UUID | None = None,
    ) -> list[RunInfo]:
        """Workflow runs of any tenant (an operator's view), newest first: by ``created_at``,
        then ``run_id``.  Of one workflow (or its name: runs of a workflow this App no
        longer registers are listed too) or of all; in ``status`` (one, or a collection);
        ``stranded=True``: only the suspended runs a definition could not resume; at most
        ``limit``; ``before``: only those listed after that run, so that the next page is
        ``runs(..., limit=n, before=page[-1].run_id)`` (runs started meanwhile do not shift
        it); ``tenant_id``: only the runs its users started (``RunInfo.user``; cron-started
        runs are of no tenant, ``uuid.UUID(int=0)``); with it, ``key``: the run started with
        that key (``start_workflow(..., key=)``), a list of one or none; ``event_id``: the
        runs that event started (``on_event`` triggers: one per workflow).  All of it is
        done by the database.
        An unknown status, a limit below 1 or an argument of the wrong type raises
        ``ValueError`` or ``TypeError``; a ``before`` that is no run, ``LookupError``."""
        name = workflow.name if isinstance(workflow, Workflow) else workflow
        if name is not None and not isinstance(name, str):
            raise TypeError(f"runs() takes a Workflow, its name or None, not {type(workflow).__name__}")
        picked = RunFilter.of(name, status, stranded, limit, before, tenant_id, key, event_id)
        return once_more_if_lost(raised, self._workflow_engine.list, picked)

    # --- the event store -----------------------------------------------------------

    def read_stream(
        self, entity: type[Any], id: uuid.UUID, *, user: User, from_version: int = 1, limit: int | None = None
    ) -> Ok[list[StoredEvent[object]]] | Failure:
        """The events of one aggregate, oldest first, as typed objects (upcast to their
        classes' current schema): those from ``from_version`` on, at most ``limit`` of
        them (the next page starts at the last one's ``version + 1``).  Another tenant's
        stream is ``not_found`` unless the user is a ``sysadmin``."""
        return read_stream(self._sessions, self._registry, entity, id, user, from_version, limit)

    def rebuild_projection(
        self,
        entity: type[Any],
        *,
        user: User,
        tenant: uuid.UUID | Literal["all"] | None = None,
        verify: bool = False,
    ) -> Ok[ProjectionReport] | Failure:
        """Replay ``entity``'s streams through their steps' projections and make its table
        equal the result (``verify=True``: only report the differences).  The user's
        tenant's rows; another tenant's (``tenant=``) or ``"all"`` need ``sysadmin``."""
        return rebuild(self._sessions, self._registry, entity, user, tenant, verify)

    def stop_worker(self) -> None:
        """Ask a running :meth:`run_worker` loop to return after its current passes: the
        deliveries in flight end and are recorded, the rest of their batch is handed back.
        Safe in a signal handler: it takes no lock and no connection, and never waits."""
        self._worker.stop()

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
        given: object = handler  # typed, but callers without mypy may pass a query or a pipeline
        if not isinstance(given, (WriteHandler, QueryHandler)):
            raise TypeError(_not_a_handler("dispatch", "WriteHandler", "write_handler", given))
        if self._handlers.get(handler.name) is not handler:
            if isinstance(given, QueryHandler):
                return _wrong_kind(given.name, "a query handler: run it with app.query(...)")
            return fail("not_found", not_registered("handler", handler.name, handler.feature, self.features))
        refused = deny(handler, user) or no_tenant(user) or wrong_payload(handler, payload)  # roles first (DESIGN §5)
        if refused is not None:
            return _logged("handler", handler.name, user, refused, correlation_id)
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
        called = _called(name, data, user, correlation_id, self._converter, "handler", self._handlers, self._queries)
        if isinstance(called, Failure):
            return called
        return self._run(*called, user, correlation_id, idempotency_key)

    def query(
        self, query: QueryHandler[P, D], payload: P, *, user: User, correlation_id: uuid.UUID | None = None
    ) -> Ok[D] | Failure:
        """Run the query handler ``query`` with a structured ``payload`` in one read-only
        transaction, seeing only the user's tenant; nothing it does is committed.  A
        resolver's write through ``c.db`` is refused by the database (``internal_error``
        naming the step)."""
        given: object = query  # typed, but callers without mypy may pass a write handler or a pipeline
        if not isinstance(given, (WriteHandler, QueryHandler)):
            raise TypeError(_not_a_handler("query", "QueryHandler", "query_handler", given))
        if self._queries.get(query.name) is not query:
            if isinstance(given, WriteHandler):
                return _wrong_kind(given.name, "a write handler: run it with app.dispatch(...)")
            return fail("not_found", not_registered("query", query.name, query.feature, self.features))
        refused = deny(query, user) or no_tenant(user) or wrong_payload(query, payload)
        if refused is not None:
            return _logged("query", query.name, user, refused, correlation_id)
        return cast("Ok[D] | Failure", self._run_query(query, payload, user, correlation_id))

    def query_json(
        self, name: object, data: object, *, user: User, correlation_id: uuid.UUID | None = None
    ) -> Ok[object] | Failure:
        """Run the query handler called ``name`` with untrusted JSON-like ``data``."""
        called = _called(name, data, user, correlation_id, self._converter, "query", self._queries, self._handlers)
        if isinstance(called, Failure):
            return called
        return self._run_query(*called, user, correlation_id)

    def _run_query(
        self, query: QueryHandler[Any, Any], payload: object, user: User, correlation_id: uuid.UUID | None
    ) -> Ok[object] | Failure:
        wrong = _wrong_correlation(correlation_id)
        if wrong is not None:
            return _logged("query", query.name, user, wrong)
        correlation_id = correlation_id or uuid.uuid4()  # here: the record names it too
        result = run_query(self._sessions, self._registry, self._now, query, payload, user, correlation_id)
        return _logged("query", query.name, user, result, correlation_id)

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
        wrong = _wrong_correlation(correlation_id)
        if wrong is not None:
            return _logged("handler", handler.name, user, wrong)
        correlation_id = correlation_id or uuid.uuid4()  # here: the record names it too
        result = self._execute(handler, payload, user, correlation_id, idempotency_key)
        return _logged("handler", handler.name, user, result, correlation_id)

    def _execute(
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
        try:
            # A web process without a worker schedules too (a mail due now, a key's age).
            self._follow()
            call = (handler.name, payload, user, self._now(), correlation_id or uuid.uuid4())
        except Exception as exc:
            where = f"handler {handler.name}"
            return exception_failure(exc, f"{where}, outside its steps,", where, {"handler": handler.name})
        return once_more_if_lost(unavailable, self._attempt, handler, call, keyed)

    def _attempt(
        self, handler: WriteHandler[Any, Any], call: tuple[str, object, User, datetime, uuid.UUID], keyed: Keyed | None
    ) -> Ok[object] | Failure:
        """The dispatch's transaction, from its first statement to its commit."""
        session = self._take_session()
        direct: Direct | None = None
        try:
            run = start_run(handler.pipeline, session, self._registry, call)
            who = f"handler {handler.name}"
            if keyed is None:
                direct = session.info[DIRECT] = Direct(self.engine)
                result = _handler_result(run_in_scope(handler.pipeline, run, who=who, nested=False))
                direct.end(commit=not isinstance(result, Failure))
                return result
            session.info[TENANT_KEY] = call[2].tenant_id
            session.begin()
            stored = keyed.claim(session, call[3], self.idempotency_retention)
            if stored is not None:
                session.rollback()
                return stored
            # In a savepoint: a business Failure rolls back the work but keeps the claim.
            result = _handler_result(run_in_scope(handler.pipeline, run, who=who, nested=True))
            return self._finish_keyed(session, keyed, result)
        except Exception as exc:
            session.rollback()
            where = f"handler {handler.name}"
            return exception_failure(exc, f"{where}, outside its steps,", where, {"handler": handler.name})
        finally:
            if direct is not None:
                direct.end(commit=False)  # after an exception; else ended already: nothing
            self._put_back(session)

    def _take_session(self) -> Session:
        """This thread's idle session, or a new one (for a dispatch from inside a step).

        A dispatch reuses its thread's session instead of making and closing one per
        call: that lifecycle was a fourth of a dispatch that sends no SQL."""
        local = self._local
        session: Session | None = getattr(local, "session", None)
        if session is None:
            return self._sessions()
        local.session = None
        return session

    def _put_back(self, session: Session) -> None:
        """Make ``session`` as new (nothing loaded, no transaction, bound to the engine)
        and keep it idle."""
        if session.in_transaction() or session.identity_map:
            session.close()
        session.info.clear()
        session.bind = self.engine
        self._local.session = session

    @staticmethod
    def _finish_keyed(session: Session, keyed: Keyed, result: Ok[object] | Failure) -> Ok[object] | Failure:
        """Commit the handler's result on the claimed key (with its work, which the
        savepoint kept for an ``Ok``); a failure that is not stored releases the key."""
        if isinstance(result, Failure) and result.code in NOT_STORED:
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


R = TypeVar("R")


def _logged(kind: str, name: str, user: object, result: R, correlation_id: uuid.UUID | None = None) -> R:
    """``result``, and a structured record for log pipelines if it is a Failure of a
    handler (or query) of this App (its message is safe) — also of a call refused before
    it runs, for its roles or its payload: a run of 403s is what an operator looks for.
    Without a ``User`` there is no tenant to name; ``correlation_id``: the call's (given,
    or made for a call that ran), which its spans, events and outbox rows carry."""
    if isinstance(result, Failure):
        tenant = str(user.tenant_id) if isinstance(user, User) else None
        correlation = str(correlation_id) if isinstance(correlation_id, uuid.UUID) else None
        logger.info(
            "%s %s: %s: %s",
            kind,
            name,
            result.code,
            result.message,
            extra={
                "kumiko_handler": name,
                "kumiko_code": result.code,
                "kumiko_tenant": tenant,
                "kumiko_correlation_id": correlation,
            },
        )
    return result


H = TypeVar("H", WriteHandler[Any, Any], QueryHandler[Any, Any])

#: What a name of the other kind is told: run it the other way.
_OTHER_WAY: Final = {
    "handler": "a query handler: run it with app.query_json(...)",
    "query": "a write handler: run it with app.dispatch_json(...)",
}


def _untrusted_name(name: str) -> str:
    """``name`` as a message quotes it: whole if it could name a handler, else its start
    and its length (a 100 KB name made a 100 KB message, and a log line of it)."""
    if len(name) <= MAX_FULL_NAME:
        return repr(name)
    return f"{name[:40]!r}... ({len(name)} characters; a full name has at most {MAX_FULL_NAME})"


def _called(
    name: object,
    data: object,
    user: User,
    correlation_id: uuid.UUID | None,
    converter: cattrs.Converter,
    kind: Literal["handler", "query"],
    named: Mapping[str, H],
    others: Mapping[str, object],
) -> tuple[H, object] | Failure:
    """The handler (or query) an untrusted call names, and ``data`` structured as its
    payload; or the Failure of that call, checked in this order: the name (not a string,
    unknown, one of the other kind), the user's roles and tenant, then the payload."""
    if not isinstance(name, str):  # untrusted too: a list would not even hash
        return fail("not_found", f"a {kind} name must be a string", {"known": sorted(named)})
    handler = named.get(name)
    if handler is None:
        if name in others:
            return _wrong_kind(name, _OTHER_WAY[kind])
        return fail("not_found", f"no {kind} named {_untrusted_name(name)}", {"known": sorted(named)})
    denied = deny(handler, user) or no_tenant(user)
    if denied is not None:
        return _logged(kind, name, user, denied, correlation_id)
    payload = structure(converter, data, handler.payload_type)
    if isinstance(payload, list):
        refused = fail("validation_error", f"invalid payload for {name}", payload)
        return _logged(kind, name, user, refused, correlation_id)
    return handler, payload


def _read_once(features: Sequence[Feature[Any]]) -> Sequence[Feature[Any]]:
    """The features as given, but a generator (typed a Sequence, not so without a checker)
    as a tuple: the checks would else read it up and leave the App with no feature."""
    given: object = features
    return tuple(features) if isinstance(given, Iterator) else features


def _not_a_handler(method: str, kind: str, registers: str, given: object) -> str:
    """What ``app.<method>`` says of something that is no handler at all: most likely the
    pipeline itself, which runs once a feature registers it."""
    return f"app.{method} takes a {kind}, the value of feature.{registers}(name, pipeline), not {type(given).__name__}"


def _wrong_kind(name: str, what: str) -> Failure:
    """A handler run the wrong way: a query dispatched, a write handler queried."""
    return fail("not_found", f"{name} is {what}", {"handler": name})


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Keeps no cookie a webhook receiver sets."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def _wrong_correlation(correlation_id: object) -> Failure | None:
    """A caller without a type checker may pass a header's text: refused up front, not
    when the first event row cannot bind it."""
    if correlation_id is None or isinstance(correlation_id, uuid.UUID):
        return None
    given = type(correlation_id).__name__
    message = f"correlation_id must be a uuid.UUID or None, not {given} (parse text with uuid.UUID(...))"
    return fail("validation_error", message, [{"path": "correlation_id", "message": message}])


def _handler_result(outcome: object) -> Ok[object] | Failure:
    """A handler's outcome: its result (a handler's steps never suspend: boot refuses
    workflow steps in handlers)."""
    assert isinstance(outcome, (Ok, Failure))
    return outcome


def _refuse_unreadable_payloads(converter: cattrs.Converter, features: Sequence[Feature[Any]]) -> None:
    """A payload class JSON can never fill fails the boot, not every ``dispatch_json``; so
    does an event class, whose events would be stored and then be unreadable for good
    (every ``read_stream``, replay and trigger of their streams an ``internal_error``), and
    one with a mapping whose keys JSON cannot give back (``unkeyable``: a payload's may
    still be filled by a ``dispatch`` from Python)."""
    named: list[tuple[str, type[Any], bool]] = []
    for f in features:
        named += [(f"handler {h.name!r}: payload", h.payload_type, False) for h in f.handlers]
        named += [(f"query {q.name!r}: payload", q.payload_type, False) for q in f.queries]
        named += [(f"workflow {w.name!r}: payload", w.trigger.payload_type, False) for w in f.workflows]
        named += [(f"feature {f.name!r}: event", cls, True) for cls in f.events]
    problems: list[str] = []
    for who, cls, stored in named:
        why = unreadable(converter, cls)
        whys = [why] if why is not None else unkeyable(cls) if stored else []
        problems += [f"{who} {cls.__qualname__}: {w}" for w in whys]
    if problems:
        raise BootError(problems)
