"""Framework tables, SQLAlchemy Core on the entities' one ``MetaData`` (Alembic sees
them with ``target_metadata = kumiko_typed.Entity.metadata``, through the ``env.py`` of
docs/operations.md)."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    literal_column,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from ._entity import Entity
from ._errors import StepRefused
from ._utc import UtcDateTime

__all__ = [
    "MAX_STEP_PATH",
    "ONLY_ON",
    "OUTBOX_SENT",
    "STRANDED",
    "EventJson",
    "Json",
    "Position",
    "XactId",
    "consumers",
    "events",
    "idempotency_keys",
    "metadata",
    "outbox",
    "table_of",
    "workflow_parts",
    "workflow_runs",
    "workflow_waits",
]

metadata = Entity.metadata

# SQLite autoincrements only an INTEGER PRIMARY KEY (the rowid).
Position = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(postgresql.JSONB(), "postgresql")
#: An event's payload and headers: PostgreSQL's ``json`` keeps the text written, as
#: SQLite's JSON text does.  ``jsonb`` sorted a dict field's keys, and gave ``-0.0`` back
#: as ``0.0`` and ``1e20`` as an int, so ``read_stream`` (and replays, triggers, waits)
#: answered otherwise than on SQLite.  Nothing queries these columns by their content.
EventJson = JSON()


class XactId(FunctionElement[int]):
    """The writing transaction's id, as the server default of ``kumiko_events.tx``: set
    on every insert, whoever writes the row (docs/operations.md).  0 on SQLite."""

    type = BigInteger()
    name = "kumiko_xact_id"
    inherit_cache = True


@compiles(XactId)
def _no_xact_id(element: XactId, compiler: Any, **kw: Any) -> str:
    return "0"


@compiles(XactId, "postgresql")
def _xact_id(element: XactId, compiler: Any, **kw: Any) -> str:
    return "(pg_current_xact_id()::text::bigint)"  # xid8 has no cast to bigint; 64 bits, no wraparound


#: The ``info`` key naming the one database an index is made on.  Alembic's autogenerate
#: ignores ``ddl_if`` (sqlalchemy/alembic#1491): on a database ``create_all`` made, it
#: proposed the other database's index in every revision.  The documented ``env.py``
#: leaves such an index out on the other database by this key (docs/operations.md).
ONLY_ON = "kumiko_only_on"


def _only_on(dialect: str, index: Index) -> Index:
    index.info[ONLY_ON] = dialect
    return index.ddl_if(dialect=dialect)


events = Table(
    "kumiko_events",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("event_id", Uuid, nullable=False, unique=True),
    Column("stream_id", Uuid, nullable=False),
    Column("aggregate_type", String(200), nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("type", String(200), nullable=False),
    Column("payload", EventJson, nullable=False),
    # The version of the event class's schema the payload was written in: what upcasters read.
    Column("schema_version", Integer, nullable=False, server_default="1"),
    Column("headers", EventJson, nullable=False),
    Column("tenant_id", Uuid, nullable=False),
    Column("user_id", Uuid, nullable=True),
    Column("correlation_id", Uuid, nullable=True),
    Column("occurred_at", UtcDateTime, nullable=False),
    # The writing transaction's id on PostgreSQL (the default set below), 0 on SQLite:
    # consumers read in (tx, position) order, below the oldest running transaction.
    Column("tx", BigInteger, nullable=False, server_default=XactId()),
    UniqueConstraint("stream_id", "stream_version", name="kumiko_events_stream_version"),
    Index("kumiko_events_type_position", "type", "position"),
    Index("kumiko_events_tx_position", "tx", "position"),
)

outbox = Table(
    "kumiko_outbox",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("kind", String(20), nullable=False),
    # Resolved at dispatch; authentication is stored as a secret *reference* only.
    Column("message", Json, nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("backoff", String(20), nullable=False),
    Column("base_delay_seconds", Float, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime, nullable=True),
    Column("handler", String(400), nullable=False),
    Column("tenant_id", Uuid, nullable=True),
    Column("correlation_id", Uuid, nullable=True),
    Index("kumiko_outbox_due", "status", "next_attempt_at"),
    # app.outbox's pages, oldest first (kumiko_typed._outbox.items): a page reads its rows,
    # not every sent row.  Neither column changes, so deliveries never update this index.
    Index("kumiko_outbox_listed", "created_at", "id"),
)

#: The delivered rows, which ``app.purge_outbox`` deletes by age.  Written with a literal,
#: not a parameter, in the index and in the purge alike: SQLite's planner uses a partial
#: index only for a query whose condition it can see implies the index's.  ``status``
#: leads so that, without statistics, it sees an equality and a range here, against the
#: equality alone of ``kumiko_outbox_due``, which it took before.
OUTBOX_SENT: ColumnElement[bool] = outbox.c.status == literal_column("'sent'")
Index("kumiko_outbox_sent", outbox.c.status, outbox.c.sent_at, postgresql_where=OUTBOX_SENT, sqlite_where=OUTBOX_SENT)

#: The longest stored step path of a suspended run (and of its event wait), in characters.
MAX_STEP_PATH: Final = 400

workflow_runs = Table(
    "kumiko_workflow_runs",
    metadata,
    Column("run_id", Uuid, primary_key=True),
    Column("workflow", String(400), nullable=False),
    # "event:<id>", "cron:<tick>" or "manual:<run id>": one run per trigger, whatever the workers.
    Column("trigger_key", String(400), nullable=False),
    Column("status", String(20), nullable=False),
    Column("path", String(MAX_STEP_PATH), nullable=True),
    Column("payload", Json, nullable=False),
    Column("state", Json, nullable=False),
    Column("user", Json, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("wake_at", UtcDateTime, nullable=True),
    Column("error", Json, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    UniqueConstraint("workflow", "trigger_key", name="kumiko_workflow_runs_trigger"),
    # The due runs a worker pass claims: suspended, woken by now, of this App's workflows,
    # by wake_at (``_workflow_engine``).  PostgreSQL reads (status, wake_at) in order, and
    # its planner takes (workflow, trigger_key) instead when most due runs are of workflows
    # the App does not register.  SQLite's planner does not: every idle pass read each such
    # run (52 ms a pass beside 100,000 of them; bench/due_runs.py); with the workflow in the
    # index it reads only the App's (0.5 ms), and its backlog in order as fast as before.
    _only_on("postgresql", Index("kumiko_workflow_runs_due", "status", "wake_at")),
    _only_on("sqlite", Index("kumiko_workflow_runs_due_by_workflow", "status", "workflow", "wake_at")),
    # app.runs' pages, newest first, with and without a status (kumiko_typed._run_listing):
    # a page reads its own rows, not the table an operator keeps every completed run in.
    Index("kumiko_workflow_runs_listed", "created_at", "run_id"),
    Index("kumiko_workflow_runs_status_listed", "status", "created_at", "run_id"),
)


#: The large values of a suspended run that stay as they are across its segments (a
#: ``for_each``'s items, a step's long list): written once, when the run first stores
#: them, and read with its row (``_stored_classes.expanded``), so that a segment writes
#: what it changed, not everything the run holds.  A run's ``state`` names its parts.
workflow_parts = Table(
    "kumiko_workflow_parts",
    metadata,
    # A purged run's parts go with it.
    Column("run_id", Uuid, ForeignKey(workflow_runs.c.run_id, ondelete="CASCADE"), primary_key=True),
    # "v/<step key>" (a value of c.steps), "l/<stored path of the for_each>" (its items,
    # stored form 2) or "i/<stored path of the for_each>/<k>" (page k of its items).
    Column("name", Text, primary_key=True),
    Column("value", Json, nullable=False),
)


class StrandedBy(FunctionElement[str]):
    """SQL: a run's ``error["stranded_by"]`` as text, NULL unless a definition found it
    stranded (``_runs.stranded_by``; ``error`` is JSON null otherwise).  The JSON path
    is written into the statement, not bound: a partial index's condition is used only
    for a query that states it as the index does."""

    type = String()
    name = "kumiko_stranded_by"
    inherit_cache = True


@compiles(StrandedBy)
def _stranded_by(element: StrandedBy, compiler: Any, **kw: Any) -> str:
    return f"json_extract({compiler.process(workflow_runs.c.error, **kw)}, '$.stranded_by')"


@compiles(StrandedBy, "postgresql")
def _stranded_by_pg(element: StrandedBy, compiler: Any, **kw: Any) -> str:
    return f"({compiler.process(workflow_runs.c.error, **kw)} ->> 'stranded_by')"


#: The runs a definition found stranded: the event feed reads their waits whatever the
#: key (``_workflow_feed``), and they are few beside the runs waiting.
STRANDED: ColumnElement[bool] = StrandedBy().is_not(None)
Index(
    "kumiko_workflow_runs_stranded",
    workflow_runs.c.run_id,
    postgresql_where=STRANDED,
    sqlite_where=STRANDED,
)

workflow_waits = Table(
    "kumiko_workflow_waits",
    metadata,
    Column("run_id", Uuid, primary_key=True),
    Column("workflow", String(400), nullable=False),
    Column("path", String(MAX_STEP_PATH), nullable=False),
    Column("event_type", String(200), nullable=False),
    # The run's tenant: only its events match (DESIGN §6).
    Column("tenant_id", Uuid, nullable=False),
    Column("key", Text, nullable=False),
    # Events the storing transaction did not see may match (``_eventstore.Frontier``);
    # before the consumer has looked back that far the wait is not "armed" (no lost
    # wake-up when both commit concurrently).
    Column("after_position", BigInteger, nullable=False),
    Column("after_tx", BigInteger, nullable=False, server_default="0"),
    Column("own_tx", BigInteger, nullable=False, server_default="0"),
    # PostgreSQL: the storing statement's snapshot (``pg_current_snapshot()`` as text),
    # which tells the transactions it saw committed from those still running; NULL on
    # SQLite and in waits stored before it (matched by ``after_tx`` alone then).
    Column("after_snapshot", Text, nullable=True),
    Column("armed", Boolean, nullable=False),
    Column("timeout_at", UtcDateTime, nullable=False),
    # Through the run: an event's feed reads a group's waits of its tenant and key a page
    # at a time in run order, each page where the last ended (``_workflow_feed``).
    Index("kumiko_workflow_waits_match", "event_type", "workflow", "path", "tenant_id", "key", "run_id"),
)
#: The waits not yet armed, which every feed transaction looks for (``_workflow_feed``):
#: few beside the armed ones, which without it were all read (10,000 waits: 80 ms a batch
#: on SQLite, twice in an idle pass).  Its condition is the query's, word for word, as
#: SQLite's planner needs to use a partial index.
Index(
    "kumiko_workflow_waits_unarmed",
    workflow_waits.c.run_id,
    postgresql_where=workflow_waits.c.armed.is_(False),
    sqlite_where=workflow_waits.c.armed.is_(False),
)

consumers = Table(
    "kumiko_consumers",
    metadata,
    Column("name", String(400), primary_key=True),
    Column("position", BigInteger, nullable=False),
    # With ``position``: the (tx, position) cursor of the events read so far.
    Column("tx", BigInteger, nullable=False, server_default="0"),
    Column("tick", UtcDateTime, nullable=True),
)

idempotency_keys = Table(
    "kumiko_idempotency_keys",
    metadata,
    # Scoped per tenant and handler: the same key of another tenant is another request.
    Column("tenant_id", Uuid, primary_key=True),
    Column("handler", String(400), primary_key=True),
    Column("key", String(255), primary_key=True),
    # sha256 of the encoded payload: a repeat with another payload is a conflict.
    Column("fingerprint", String(64), nullable=False),
    # The stored result; NULL only inside the transaction that claimed the key.
    Column("result", Json, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Index("kumiko_idempotency_keys_created", "created_at"),
)


def table_of(target: object) -> Table:
    """The table of a mapped class (or the table itself): what a projection names."""
    if isinstance(target, Table):
        return target
    table = getattr(target, "__table__", None)
    if isinstance(table, Table):
        return table
    raise StepRefused(f"{target!r} is neither a Table nor a mapped class")
