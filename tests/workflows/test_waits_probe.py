"""The feed's probe (``_waits_probe``: which groups of waits hold an armed wait) gives the
same answer on SQLite and PostgreSQL, whatever the groups: none, more than a statement
of SQLite's asks, keys of hostile text, another tenant's, an over-long name.  On
PostgreSQL the groups travel as arrays, so that the probe is one short statement that
psycopg keeps the parse of and prepares (before, up to 57 KB of SQL with 1,280 bound
values, split again by psycopg at every execution: a quarter of the feed's time in
Python, bench/event_feed.py).  And an event committed while the feed probes is read by
the feed, and wakes its run once."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from _sql_log import statements
from _support import run_info
from sqlalchemy.orm import Session

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._eventstore import append
from kumiko_typed._tables import workflow_waits
from kumiko_typed._workflow_feed import EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
BOB = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=0xB))

#: What psycopg keeps the parse of (``psycopg._queries``): a longer statement, or one of
#: more parameters, is split into its parts again at every execution.
PSYCOPG_CACHED_LENGTH = 4096
PSYCOPG_CACHED_PARAMS = 50

#: Keys, workflows and paths a probe must compare as the text they are: quotes, an
#: array literal's syntax (braces, commas, NULL in any case, blanks), placeholders,
#: unicode, whitespace that a ``CHAR`` comparison would drop.
HOSTILE = (
    "7",
    '"7"',
    "'",
    "''; DELETE FROM kumiko_workflow_waits; --",
    "\\",
    '\\"',
    "{}",
    '{"a", "b"}',
    ",",
    "NULL",
    "null",
    '"NULL"',
    "",
    " ",
    "p ",
    "a\tb\nc",
    "$1",
    "%(k)s",
    "%s",
    "ключ ✓ 🎉",
)


@attrs.frozen
class Job:
    group: int


@attrs.frozen
class Rung:
    group: int


f: Feature[Any] = Feature("wprobe")
f.event(Rung, name="rung")
waiting = f.workflow(
    "waiting",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).wait_for_event(
        "rung", Rung, key=lambda c: c.payload.group, event_key=lambda e: e.group, timeout=timedelta(days=1)
    ),
)


def _wait(
    run: int, event_type: str, workflow: str, path: str, tenant: uuid.UUID, key: str, armed: bool
) -> dict[str, Any]:
    return {
        "run_id": uuid.UUID(int=run),
        "workflow": workflow,
        "path": path,
        "event_type": event_type,
        "tenant_id": tenant,
        "key": key,
        "after_position": 0,
        "after_tx": 0,
        "own_tx": 0,
        "after_snapshot": None,
        "armed": armed,
        "timeout_at": T0,
    }


def test_the_probe_finds_the_same_groups_on_both_databases(app_on: Callable[..., App]) -> None:
    """Waits stored as rows (armed, unarmed; two tenants; hostile keys, paths and names),
    and groups asked of them: those found are exactly those holding an armed wait of their
    tenant (and key), on both databases.  No group asks nothing; the keyed groups and
    the whole ones are each more than SQLite's 256 a statement."""
    app = _app(app_on)
    names = ("wprobe:waiting", "ω 'quoted' \"wf\"", "w" * 400)
    rows = []
    for i, key in enumerate(HOSTILE):
        workflow, path = names[i % 3], HOSTILE[(i * 7) % len(HOSTILE)]
        rows.append(_wait(len(rows) + 1, "rung", workflow, path, ADA.tenant_id, key, armed=True))
        rows.append(_wait(len(rows) + 1, "rung", workflow, path, BOB.tenant_id, key, armed=False))
    for i in range(400):  # Bob's armed waits of keys Ada asks too
        rows.append(_wait(len(rows) + 1, "rung", names[0], "0", BOB.tenant_id, f"k{i}", armed=i % 2 == 0))
    with app.engine.begin() as conn:
        conn.execute(sa.insert(workflow_waits), rows)
    armed = {(r["event_type"], r["workflow"], r["path"], r["tenant_id"], r["key"]) for r in rows if r["armed"]}
    prefixes = {group[:4] for group in armed}

    asked: list[tuple[str, str, str, Any, str | None]] = []
    for tenant in (ADA.tenant_id, BOB.tenant_id):
        for workflow in (*names, "w" * 400 + "x", "wprobe:waiting "):
            for path in (*HOSTILE, "0"):
                asked.append(("rung", workflow, path, tenant, None))
                asked.extend(("rung", workflow, path, tenant, key) for key in HOSTILE[:2])
        asked.extend(("rung", names[0], "0", tenant, f"k{i}") for i in range(450))
        asked.extend(("rung", names[0], str(i), tenant, None) for i in range(100))
        asked.extend(
            ("rung", names[i % 3], HOSTILE[(i * 7) % len(HOSTILE)], tenant, key) for i, key in enumerate(HOSTILE)
        )
    asked.extend(("other", names[0], "0", tenant, "k0") for tenant in (ADA.tenant_id, BOB.tenant_id))
    asked.extend(asked[:50])  # asked twice
    keyed = [group for group in asked if group[4] is not None]
    assert len(set(keyed)) > 256 and len({g for g in asked if g[4] is None}) > 256

    expected = {g for g in asked if (g in armed if g[4] is not None else g[:4] in prefixes)}
    assert len(expected) > 200 and expected != set(asked)
    probe = EventFeed(app._workflow_engine)._waits_probe
    with Session(app.engine) as session:
        assert probe.found(session, asked) == expected
        assert probe.found(session, asked[::-1]) == expected
        with statements(app.engine) as sent:
            assert probe.found(session, []) == set()
        assert sent == []
        for group in (*expected, *(set(asked) - expected))[::97]:  # one at a time
            assert probe.found(session, [group]) == ({group} & expected)


def _app(app_on: Callable[..., App]) -> App:
    return app_on([f], clock=FakeClock(T0))


def _append_rungs(engine: sa.Engine, user: User, groups: range | list[int]) -> None:
    """A ``Rung`` of each group of ``user``'s tenant, in one committed transaction."""
    with Session(engine) as session, session.begin():
        for group in groups:
            append(
                session,
                stream_id=uuid.uuid4(),
                aggregate_type="bell",
                stream_version=1,
                type="rung",
                payload={"group": group},
                tenant_id=user.tenant_id,
                user_id=user.id,
                correlation_id=None,
                occurred_at=T0,
            )


def _is_probe(statement: str) -> bool:
    return "kumiko_workflow_waits" in statement and ("unnest" in statement or statement.count("LIMIT") > 2)


def test_the_probe_on_postgresql_is_one_short_statement_that_psycopg_prepares(fresh_postgres_url: str) -> None:
    """Feed transactions of 1 to 200 events of other keys than the runs wait for (windows
    of 1 to 128 events, up to 128 groups a probe): every probe sends the same text, short
    and of few parameters enough for psycopg to keep its parse, and psycopg prepares it on
    the connection that ran it.  Before, each width of the probe was a text of its own, up
    to 57 KB with 640 parameters."""
    app = App([f], database_url=fresh_postgres_url, clock=FakeClock(T0))
    try:
        app.create_all()
        for group in (1, 2, 3):
            app.start_workflow(waiting, Job(group), user=ADA)
        app.run_worker(once=True)  # the runs reach their wait; the feed arms them
        sent: list[tuple[str, int, Any]] = []

        def record(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
            if _is_probe(statement):
                sent.append((statement, len(params), conn.connection.dbapi_connection))

        feed = EventFeed(app._workflow_engine)
        sa.event.listen(app.engine, "before_cursor_execute", record)
        try:
            for size in (1, 5, 40, 200, 200):
                _append_rungs(app.engine, ADA, range(100, 100 + size))
                assert feed.consume(lambda: False) == (0, 0)
        finally:
            sa.event.remove(app.engine, "before_cursor_execute", record)
        assert len(sent) >= 6, len(sent)  # psycopg prepares a text at its sixth execution
        assert len({text for text, _, _ in sent}) == 1, sorted({len(text) for text, _, _ in sent})
        text, params, _ = sent[0]
        assert len(text) <= PSYCOPG_CACHED_LENGTH and params <= PSYCOPG_CACHED_PARAMS, (len(text), params)
        (connection,) = {id(c): c for _, _, c in sent}.values()
        prepared = [r[0] for r in connection.execute("SELECT statement FROM pg_prepared_statements")]
        connection.rollback()
        assert [s for s in prepared if "unnest" in s and "kumiko_workflow_waits" in s], prepared
    finally:
        app.dispose()


def test_an_event_committed_while_the_feed_probes_wakes_its_run_once(fresh_postgres_url: str) -> None:
    """PostgreSQL (SQLite has one writer at a time: no event commits during a feed's
    transaction): while the feed's first probe runs, another connection commits the
    event Ada's run waits for.  The feed's batch was read before it, so the probe does
    not see it; the feed's next transaction reads it, and the run is woken once, by it;
    Bob's run of the same key is not."""
    app = App([f], database_url=fresh_postgres_url, clock=FakeClock(T0))
    try:
        app.create_all()
        ada, bob = app.start_workflow(waiting, Job(7), user=ADA), app.start_workflow(waiting, Job(7), user=BOB)
        app.run_worker(once=True)
        _append_rungs(app.engine, ADA, range(300, 340))
        feed = EventFeed(app._workflow_engine)
        probe = feed._waits_probe
        original = probe.found
        calls: list[int] = []

        def found(session: Session, groups: Any) -> Any:
            if not calls:
                _append_rungs(app.engine, ADA, [7])  # its own connection and transaction, committed
            calls.append(1)
            return original(session, groups)

        probe.found = found  # type: ignore[method-assign]
        assert feed.consume(lambda: False) == (0, 1)
        assert len(calls) >= 2
        assert run_info(app, ada).status == "completed"
        assert run_info(app, bob).status == "suspended"
        assert feed.consume(lambda: False) == (0, 0)
    finally:
        app.dispose()
