"""What the feed reads of each event, on SQLite and PostgreSQL: the columns it uses (not
an event's headers, stream or correlation, which decoding with each row was two thirds
of the time the feed took to read one), each event of a waited type loaded once and its
key's JSON made once when the key's two forms are one (before, twice: ``key_forms``
encoded the key to text for each form).  bench/event_feed.py.

What must not change: an event this deploy cannot load passes by where no run of its
tenant waits for its type, and strands the runs that do (whatever their key), for a
deploy that can load it; the events after it are matched as ever."""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from _sql_log import statements
from _support import run_info
from sqlalchemy.orm import Session

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._eventstore import append
from kumiko_typed._registry import Registry
from kumiko_typed._steps.workflow import KEY_FORMS, bounded_key, key_forms
from kumiko_typed._workflow_feed import EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
BOB = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=0xB))
CAROL = User(id=uuid.UUID(int=3), tenant_id=uuid.UUID(int=0xC))


class Colour(enum.Enum):
    RED = "red"


@attrs.frozen
class Job:
    group: int


@attrs.frozen
class Rung:
    group: int
    colour: Colour = Colour.RED


f: Feature[Any] = Feature("fer")
f.event(Rung, name="rung")
waiting = f.workflow(
    "waiting",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).wait_for_event(
        "rung", Rung, key=lambda c: c.payload.group, event_key=lambda e: e.group, timeout=timedelta(days=1)
    ),
)


def _ring(app: App, *rungs: tuple[User, int], schema_version: int = 1) -> None:
    """A ``Rung`` per (user, group), in one transaction: one feed batch."""
    with Session(app.engine) as session, session.begin():
        for user, group in rungs:
            append(
                session,
                stream_id=uuid.uuid4(),
                aggregate_type="bell",
                stream_version=1,
                type="rung",
                payload={"group": group},
                tenant_id=user.tenant_id,
                user_id=user.id,
                correlation_id=uuid.uuid4(),
                occurred_at=T0,
                headers={"source": "test"},
                schema_version=schema_version,
            )


def _waiting_app(app_on: Callable[..., App], *runs: tuple[User, int]) -> tuple[App, list[uuid.UUID]]:
    app = app_on([f], clock=FakeClock(T0))
    started = [app.start_workflow(waiting, Job(group), user=user) for user, group in runs]
    app.run_worker(once=True)  # the runs reach their wait; the feed arms them
    return app, started


def test_the_feed_reads_the_columns_it_uses_and_makes_each_events_key_once(
    app_on: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 events of keys no run waits for: their reads name none of the columns the feed
    does not use; each is loaded once, and its key (an int: one form) made into JSON
    once, not twice; then an event of a waited key still wakes its run."""
    app, (run,) = _waiting_app(app_on, (ADA, 1))
    _ring(app, *((ADA, 100 + i) for i in range(200)))
    loads: list[object] = []
    encodes: list[object] = []
    load, encode = Registry.load, json.JSONEncoder.encode

    def counted_load(self: Registry, row: Any, *args: Any) -> Any:
        loads.append(row.event_id)
        return load(self, row, *args)

    def counted_encode(self: json.JSONEncoder, value: Any) -> str:
        encodes.append(value)
        return encode(self, value)

    monkeypatch.setattr(Registry, "load", counted_load)
    monkeypatch.setattr(json.JSONEncoder, "encode", counted_encode)
    feed = EventFeed(app._workflow_engine)
    with statements(app.engine) as sent:
        assert feed.consume(lambda: False) == (0, 0)
    reads = [s for s in sent if s.startswith("SELECT") and "FROM kumiko_events" in s]
    assert reads
    unused = ("headers", "stream_id", "stream_version", "aggregate_type", "correlation_id")
    assert not [(column, s) for s in reads for column in unused if f"kumiko_events.{column}" in s]
    assert len(loads) == len(set(loads)) == 200
    assert len(encodes) == 200, len(encodes)

    _ring(app, (ADA, 1))
    assert feed.consume(lambda: False) == (0, 1)
    assert run_info(app, run).status == "completed"


def test_an_event_this_deploy_cannot_load_strands_only_the_runs_of_its_tenant_waiting_for_its_type(
    app_on: Callable[..., App],
) -> None:
    """One batch: Carol's ``Rung`` stored at a schema version newer than the class's (no
    run of Carol's waits), then Bob's readable one of his run's key: Bob's run is woken,
    Ada's is untouched.  Then an unreadable ``Rung`` of Ada's, of another key than her
    run's: her run is stranded for a deploy that can read it, and the feed goes on."""
    app, (ada, bob) = _waiting_app(app_on, (ADA, 1), (BOB, 2))
    feed = EventFeed(app._workflow_engine)
    _ring(app, (CAROL, 1), schema_version=2)
    _ring(app, (BOB, 2))
    assert feed.consume(lambda: False) == (0, 1)
    assert run_info(app, bob).status == "completed"
    assert run_info(app, ada).status == "suspended" and run_info(app, ada).error is None

    _ring(app, (ADA, 7), schema_version=2)
    assert feed.consume(lambda: False) == (0, 0)
    stranded = run_info(app, ada)
    assert stranded.status == "suspended" and stranded.error is not None
    assert stranded.error["code"] == "stranded"
    assert "is newer than Rung's schema version 1" in stranded.error["message"]
    assert feed.consume(lambda: False) == (0, 0)  # the cursor is past them


@pytest.mark.parametrize(
    "key",
    [
        7,
        "seven",
        uuid.UUID(int=7),
        Colour.RED,
        {"a": 1},
        {"b": 2, "a": 1},  # two forms: sorted, and in the order it was built
        ["x", {"d": 1, "c": 2}],
        "x" * 2_000,  # past the longest key stored whole: its digest, and before digests the text
        {"long": "y" * 2_000, "also": 1},
        1.0,  # canonical 1, before 1.0
        {"b": 2.5, "a": True},
        frozenset({"z" * 2_000}),
    ],
)
def test_a_keys_forms_are_those_of_its_encodings(key: object) -> None:
    """``key_forms`` makes one JSON text where the key's encodings are equal: the forms
    are still this release's canonical text and those of earlier releases, as before,
    never more than ``KEY_FORMS``."""
    app = App([f], database_url="sqlite://")
    codec = app._workflow_engine.codec
    now = json.dumps(codec.encode(key, ordered=False, canonical=True), sort_keys=True)
    unordered = json.dumps(codec.encode(key, ordered=False), sort_keys=True)
    before = json.dumps(codec.encode(key, ordered=True), sort_keys=True)
    forms = (bounded_key(now), bounded_key(unordered), bounded_key(before), before)
    assert key_forms(codec, key) == tuple(dict.fromkeys(forms))
    assert len(key_forms(codec, key)) <= KEY_FORMS
    app.dispose()
