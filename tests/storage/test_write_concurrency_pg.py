"""Writers without a global lock on PostgreSQL (issue 13.3, DESIGN §6): writers of different
aggregates overlap, a read-decide-write handler stays correct across processes (a stock is
never oversold), and a tailer never gets an event before an earlier writer's.

Every test gets its own empty database (``fresh_postgres_url``); the writers are in
tests/_write_racer.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import _write_racer
import pytest
import sqlalchemy as sa
from _write_racer import HOLD, NewStock, Take, WrStock, feature, hold, new_stock, reserve
from sqlalchemy.orm import Session

from kumiko_typed import App, Failure, Ok, User
from kumiko_typed._eventstore import read_after
from kumiko_typed._tables import events

pytestmark = pytest.mark.postgres

RACER = Path(_write_racer.__file__).resolve()
RACERS = 4
STOCK = 60


@pytest.fixture
def app(fresh_postgres_url: str) -> Iterator[App]:
    app = App([feature], database_url=fresh_postgres_url)
    app.create_all()
    yield app
    app.dispose()


def new(app: App, user: User, count: int) -> uuid.UUID:
    result = app.dispatch(new_stock, NewStock(count), user=user)
    assert isinstance(result, Ok), result
    sid: uuid.UUID = result.data
    return sid


def stream_of(app: App, sid: uuid.UUID) -> list[sa.Row[tuple[int, dict[str, int]]]]:
    with app.engine.connect() as conn:
        stmt = sa.select(events.c.stream_version, events.c.payload).where(events.c.stream_id == sid)
        return list(conn.execute(stmt.order_by(events.c.stream_version)))


# --- read-decide-write across processes ---------------------------------------------------------


def test_racing_processes_never_oversell_a_stock(
    app: App, fresh_postgres_url: str, racers: list[subprocess.Popen[str]]
) -> None:
    """4 processes reserve one unit at a time from one stock until it is exhausted.  The
    handler reads the stock, decides and appends: a racer whose read was overtaken gets
    ``version_conflict``, one that finds nothing left a clean ``unprocessable``."""
    tenant = uuid.uuid4()
    sid = new(app, User(id=uuid.uuid4(), tenant_id=tenant), STOCK)
    for _ in range(RACERS):
        racers.append(
            subprocess.Popen(
                [sys.executable, str(RACER), fresh_postgres_url, str(sid), str(tenant)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=RACER.parent.parent,
            )
        )
    for proc in racers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    for proc in racers:  # all at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    codes: Counter[str] = Counter()
    for proc in racers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        line = next(line for line in out.splitlines() if line.startswith("result "))
        codes.update(json.loads(line[len("result ") :]))

    with Session(app.engine) as s:
        left, version = s.execute(sa.select(WrStock.count, WrStock.version).where(WrStock.id == sid)).one()
    assert left == 0  # every racer went on until it was refused for want of stock
    assert codes["ok"] == STOCK - left, codes  # no reservation lost, none sold twice
    assert codes["unprocessable"] == RACERS
    assert set(codes) <= {"ok", "unprocessable", "version_conflict"}, codes
    assert codes["version_conflict"] > 0, codes  # they really raced
    stream = stream_of(app, sid)
    assert [r.stream_version for r in stream] == list(range(1, version + 1))
    assert len(stream) == 1 + codes["ok"]
    assert sum(r.payload["amount"] for r in stream[1:]) == STOCK


# --- writers of different aggregates overlap ----------------------------------------------------


def test_writers_of_different_aggregates_overlap_and_a_tailer_waits_for_the_older(app: App) -> None:
    """Writer A appends to stock 1 and holds its transaction open until writer B, on
    stock 2, has committed: with a lock shared by all writers, B would wait for A.
    While A is open, B's event (a later position, committed first) is not handed to a
    tailer yet; once A commits, the tailer gets A's event, then B's."""
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    first, second = new(app, user, 10), new(app, user, 10)
    with Session(app.engine) as s:
        start = read_after(s, (0, 0))[-1].cursor
    seen_while_open: list[list[uuid.UUID]] = []
    other: list[Ok[int] | Failure] = []

    def let_b_commit() -> None:
        thread = threading.Thread(target=lambda: other.append(app.dispatch(reserve, Take(second, 2), user=user)))
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), "writer B waited for writer A's transaction"
        with Session(app.engine) as s:
            seen_while_open.append([e.stream_id for e in read_after(s, start)])

    HOLD.append(let_b_commit)
    try:
        assert app.dispatch(hold, Take(first, 1), user=user) == Ok(9)
    finally:
        HOLD.clear()
    assert other == [Ok(8)]
    assert seen_while_open == [[]]  # B's event waits behind A's running transaction
    with Session(app.engine) as s:
        after = read_after(s, start)
    assert [e.stream_id for e in after] == [first, second]
    assert after[0].position < after[1].position
    assert after[0].tx < after[1].tx
