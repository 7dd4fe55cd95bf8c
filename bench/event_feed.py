"""What the workers' event feed costs per event that wakes no run, against a feed written
by hand in SQLAlchemy Core.

Run:  python bench/event_feed.py [--quick] [--events N] [--waiting N] [--rounds N] [--sqlite] [--json PATH]

Set-up, per database (a fresh SQLite file; a fresh database of the tests' throw-away
PostgreSQL server, ``KUMIKO_TEST_POSTGRES_URL`` to use a running one): a workflow whose
runs wait for a ``Paid`` event keyed by their order, ``--waiting`` runs (default 100)
suspended there, and ``--events`` events (default 4,000) after them, appended in
batches of 200 per transaction, of one of two kinds:

- ``other keys``: ``Paid`` events of orders no run waits for (a shop's payments, most
  of which no workflow is waiting on);
- ``unwaited type``: ``Shipped`` events, which no wait is for.

Each round moves each side's cursor back to before the events and times one feed over
all of them; no run is woken, so the events and the waits are the same every round.

- *kumiko*: ``EventFeed.consume``, the feed a worker pass runs (the cursor row locked
  per transaction, 200 events a transaction, each event's key loaded for each group of
  waits of its type, a probe of each window of the transaction's groups through the
  match index, the waits of the groups found read, the cursor moved).
- *by hand*: Core, what an engineer writes for the same rule: per transaction of 200
  events its own cursor row read ``FOR UPDATE`` (PostgreSQL), the events after it read,
  for each event of a type some definition waits for its key read from the JSON and one
  ``SELECT`` of the waits of that type, tenant and key (the match index), the cursor
  moved.  It knows the waited types from its definitions, so an unwaited event costs it
  no statement; it skips what kumiko's feed also guards against (waits of workflows a
  deploy removed, stranded runs, the snapshot rule of concurrent appends: it compares
  positions only).
- *batched*: the same by hand, with one ``SELECT`` per waited type in a transaction
  instead of one per event: the armed waits whose (tenant, key) is among its events'
  (a tuple ``IN`` list), matched to the events in their order in Python.  It reads the
  whole of a key's waits (a fan-out of 10,000 runs: 10,000 rows per transaction).

All persist the cursor only.  They alternate within each round, which goes first
rotating; printed: median milliseconds per feed, microseconds per event, and the medians
of the per-round ratios kumiko / by hand and kumiko / batched.  Nothing here passes or
fails on time.
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from _databases import databases
from _report import add_json_option, alternated, load_average, load_note, write_json

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed._tables import consumers, events, workflow_waits
from kumiko_typed._workflow_feed import EVENT_CURSOR, EventFeed
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))
BATCH = 200


class Order(Entity):
    __tablename__ = "feed_bench_order"


@attrs.frozen
class Paid:
    order: uuid.UUID


@attrs.frozen
class Shipped:
    order: uuid.UUID


@attrs.frozen
class Settle:
    order: uuid.UUID


feature = Feature("feedbench")
feature.entity(Order)
feature.event(Paid, name="paid")
feature.event(Shipped, name="shipped")
open_order = feature.write_handler(
    "open",
    feature.pipeline(Settle)
    .create("order", Order, data=lambda c: Order(), event=lambda c: Paid(c.payload.order))
    .return_(lambda c: ok(None)),
)
settle = feature.workflow(
    "settle",
    trigger=manual(Settle),
    pipeline=feature.workflow_pipeline(Settle).wait_for_event(
        "paid", Paid, key=lambda c: c.payload.order, event_key=lambda e: e.order, timeout=timedelta(days=30)
    ),
)

hand_cursor = sa.Table(
    "feed_bench_cursor",
    sa.MetaData(),
    sa.Column("name", sa.String(50), primary_key=True),
    sa.Column("tx", sa.BigInteger, nullable=False),
    sa.Column("position", sa.BigInteger, nullable=False),
)


def _set_up(url: str, n_events: int, waiting: int, kind: str) -> tuple[App, dict[str, Callable[[], int]]]:
    clock = FakeClock(T0)
    app = App([feature], database_url=url, clock=clock)
    app.create_all()
    hand_cursor.create(app.engine)
    opened = app.dispatch(open_order, Settle(uuid.uuid4()), user=USER)
    assert opened == ok(None), opened
    for _ in range(waiting):
        app.start_workflow(settle, Settle(uuid.uuid4()), user=USER)
    app.run_worker(once=True)  # the runs reach their wait; the feed arms the waits
    with app.engine.begin() as conn:
        model = dict(conn.execute(sa.select(events).limit(1)).mappings().one())
        start = conn.execute(sa.select(consumers.c.tx, consumers.c.position).where(consumers.c.name == EVENT_CURSOR))
        start_tx, start_position = start.one()
        conn.execute(sa.insert(hand_cursor).values(name="feed", tx=start_tx, position=start_position))
    name = "shipped" if kind == "unwaited type" else "paid"
    for first in range(0, n_events, BATCH):
        with app.engine.begin() as conn:
            rows = []
            for _ in range(min(BATCH, n_events - first)):
                stream = uuid.uuid4()
                row = {k: v for k, v in model.items() if k not in ("position", "tx")}
                row.update(event_id=uuid.uuid4(), stream_id=stream, type=name, payload={"order": str(stream)})
                rows.append(row)
            conn.execute(sa.insert(events), rows)

    feed = EventFeed(app._workflow_engine)

    def rewind(table: sa.Table, row_name: str) -> None:
        with app.engine.begin() as conn:
            conn.execute(sa.update(table).where(table.c.name == row_name).values(tx=start_tx, position=start_position))

    def kumiko() -> int:
        rewind(consumers, EVENT_CURSOR)
        started, woken = feed.consume(lambda: False)
        return started + woken

    hand, batched = (_by_hand(app.engine, rewind, batched=b) for b in (False, True))
    return app, {"kumiko": kumiko, "by hand": hand, "batched": batched}


def _by_hand(engine: sa.Engine, rewind: Callable[[sa.Table, str], None], *, batched: bool) -> Callable[[], int]:
    """The feed by hand: per event of a waited type one ``SELECT`` of its waits, or
    (``batched``) one per waited type in a batch, of the waits whose (tenant, key) is
    one of its events', matched to them in Python."""
    postgres = engine.dialect.name == "postgresql"
    waited = {"paid": "order"}  # event type -> the payload field its waits are keyed by
    cursor = sa.select(hand_cursor.c.tx, hand_cursor.c.position).where(hand_cursor.c.name == "feed")
    if postgres:
        cursor = cursor.with_for_update()
    after = sa.tuple_(events.c.tx, events.c.position) > sa.tuple_(sa.bindparam("tx"), sa.bindparam("position"))
    read = (
        sa.select(events.c.tx, events.c.position, events.c.type, events.c.payload, events.c.tenant_id)
        .where(after)
        .order_by(events.c.tx, events.c.position)
        .limit(BATCH)
    )
    w = workflow_waits.c
    waits = sa.select(w.run_id).where(
        w.event_type == sa.bindparam("type"),
        w.tenant_id == sa.bindparam("tenant"),
        w.key == sa.bindparam("key"),
        w.armed.is_(True),
        w.after_position < sa.bindparam("position"),
    )
    waits_of_batch = sa.select(w.run_id, w.tenant_id, w.key, w.after_position).where(
        w.event_type == sa.bindparam("type"),
        w.armed.is_(True),
        sa.tuple_(w.tenant_id, w.key).in_(sa.bindparam("pairs", expanding=True)),
    )
    advance = sa.update(hand_cursor).where(hand_cursor.c.name == "feed")

    def one_each(conn: sa.Connection, batch: list[sa.Row[Any]]) -> int:
        woken = 0
        for event in batch:
            field = waited.get(event.type)
            if field is None:
                continue
            params = {
                "type": event.type,
                "tenant": event.tenant_id,
                "key": str(event.payload[field]),
                "position": event.position,
            }
            woken += len(conn.execute(waits, params).all())  # a match would resume its run here
        return woken

    def one_a_type(conn: sa.Connection, batch: list[sa.Row[Any]]) -> int:
        keyed: dict[str, list[tuple[sa.Row[Any], tuple[Any, str]]]] = {}
        for event in batch:
            field = waited.get(event.type)
            if field is not None:
                keyed.setdefault(event.type, []).append((event, (event.tenant_id, str(event.payload[field]))))
        woken = 0
        for type_, pairs in keyed.items():
            found: dict[tuple[Any, str], list[int]] = {}
            for wait in conn.execute(waits_of_batch, {"type": type_, "pairs": list({p for _, p in pairs})}):
                found.setdefault((wait.tenant_id, wait.key), []).append(wait.after_position)
            for event, pair in pairs:  # in event order; a match would resume its run here
                woken += sum(at < event.position for at in found.get(pair, ()))
        return woken

    match = one_a_type if batched else one_each

    def feed() -> int:
        rewind(hand_cursor, "feed")
        woken = 0
        while True:
            with engine.begin() as conn:
                tx, position = conn.execute(cursor).one()
                batch = conn.execute(read, {"tx": tx, "position": position}).all()
                woken += match(conn, list(batch))
                if not batch:
                    return woken
                conn.execute(advance.values(tx=batch[-1].tx, position=batch[-1].position))

    return feed


def _measure(urls: Callable[[], str], n_events: int, waiting: int, rounds: int, label: str) -> dict[str, object]:
    figures: dict[str, object] = {}
    for kind in ("other keys", "unwaited type"):
        app, sides = _set_up(urls(), n_events, waiting, kind)
        for side in sides.values():
            assert side() == 0  # untimed: reads the tables into the cache; wakes nothing
        times, ratios = alternated(sides, rounds, "kumiko", "by hand")
        to_batched = [ours / theirs for ours, theirs in zip(times["kumiko"], times["batched"], strict=True)]
        ours, hand, batched = (statistics.median(times[s]) * 1000 for s in ("kumiko", "by hand", "batched"))
        ratio, ratio_batched = statistics.median(ratios), statistics.median(to_batched)
        figures[kind] = {
            "kumiko_ms": round(ours, 2),
            "hand_ms": round(hand, 2),
            "batched_ms": round(batched, 2),
            "kumiko_us_per_event": round(ours * 1000 / n_events, 1),
            "hand_us_per_event": round(hand * 1000 / n_events, 1),
            "batched_us_per_event": round(batched * 1000 / n_events, 1),
            "ratio": round(ratio, 3),
            "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "ratio_batched": round(ratio_batched, 3),
            "ratio_batched_min": round(min(to_batched), 3),
            "ratio_batched_max": round(max(to_batched), 3),
        }
        shown = (
            f"kumiko {ours:8.1f} ms  by hand {hand:8.1f} ms  batched {batched:8.1f} ms  "
            f"kumiko / by hand {ratio:6.2f}  kumiko / batched {ratio_batched:6.2f}"
        )
        print(f"{label:10} {kind:13} {n_events} events  {shown}")
        app.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=4_000)
    parser.add_argument("--waiting", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--sqlite", action="store_true", help="SQLite only")
    parser.add_argument("--quick", action="store_true", help="smoke run: 400 events, 10 waiting runs, 3 rounds")
    add_json_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.events, args.waiting, args.rounds = 400, 10, 3
    load_before = load_average()
    labels = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    with databases("feed", sqlite_only=args.sqlite) as urls:
        measured = {db: _measure(url, args.events, args.waiting, args.rounds, labels[db]) for db, url in urls.items()}
    print(load_note())
    figures = {"events": args.events, "waiting": args.waiting, "rounds": args.rounds, "databases": measured}
    write_json(args.json, "event_feed", figures, load_before=load_before)


if __name__ == "__main__":
    main()
