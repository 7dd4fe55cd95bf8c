"""A real PostgreSQL restart (``pg_ctl restart``, on a private server of the test's own)
under a looping worker and a client dispatching with idempotency keys: the worker rides
out the restart (the shutdown's killed connections, then refused ones while the server is
down and starting) without stopping, every event starts exactly one run, every run
completes once, and every dispatch the client repeated with its key committed once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _worker_thread import Passes, Worker
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok, on_event
from kumiko_typed.testing.postgres import PostgresServer, _run, start_test_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
ORDERS = 30


class RsOrder(Entity):
    __tablename__ = "rs_order"
    n: Mapped[int]


class RsShipment(Entity):
    __tablename__ = "rs_shipment"
    n: Mapped[int] = mapped_column(unique=True)


@attrs.frozen
class Place:
    n: int


@attrs.frozen
class Placed:
    n: int


f: Feature[Any] = Feature("rs")
f.entity(RsOrder)
f.entity(RsShipment)
f.event(Placed, name="rs-placed")
place = f.write_handler(
    "place",
    f.pipeline(Place)
    .create("o", RsOrder, data=lambda c: RsOrder(n=c.payload.n), event=lambda c: Placed(c.payload.n))
    .return_(lambda c: ok(c.steps["o"].id)),
)
f.workflow(
    "ship",
    trigger=on_event(Placed),
    pipeline=f.workflow_pipeline(Placed).create("s", RsShipment, data=lambda c: RsShipment(n=c.payload.n)),
)


@pytest.fixture
def private_server() -> Iterator[PostgresServer]:
    server = start_test_postgres()
    if server is None or server.external or server.bin_dir is None or server.data_dir is None:
        pytest.skip("needs a server of the test's own to restart")
    try:
        yield server
    finally:
        server.stop()


def _restart(server: PostgresServer) -> None:
    assert server.bin_dir is not None and server.data_dir is not None and server.base_dir is not None
    argv = [str(server.bin_dir / "pg_ctl"), "restart", "-D", str(server.data_dir), "-m", "fast", "-w", "-t", "60"]
    argv += ["-l", str(server.log_file)]
    done = _run(argv, server.base_dir, server.run_as)
    assert done.returncode == 0, done.stderr


def test_a_looping_worker_and_keyed_dispatches_ride_out_a_server_restart(
    private_server: PostgresServer, worker_passes: Passes
) -> None:
    app = App([f], database_url=private_server.url)
    app.create_all()
    answers: dict[int, list[Ok[Any] | Failure]] = {}

    def client() -> None:
        for n in range(ORDERS):
            tries = answers.setdefault(n, [])
            while not tries or isinstance(tries[-1], Failure):
                tries.append(app.dispatch(place, Place(n), user=USER, idempotency_key=f"order-{n}"))
                if isinstance(tries[-1], Failure):
                    time.sleep(0.1)
            time.sleep(0.05)

    dispatching = threading.Thread(target=client, daemon=True)
    worker = Worker(app)
    try:
        worker_passes.await_first(worker.thread)  # the restart is an outage, not a wrong URL
        dispatching.start()
        time.sleep(0.5)  # dispatches under way when the server goes (whenever: each is repeated)
        _restart(private_server)
        dispatching.join(60)
        assert not dispatching.is_alive()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            len(app.runs()) < ORDERS or any(r.status != "completed" for r in app.runs())
        ):
            time.sleep(0.1)
        assert worker.thread.is_alive() and not worker.raised, worker.raised
    finally:
        worker.stop()
    try:
        for n, tries in answers.items():
            assert all(isinstance(t, Ok) or t.code == "unavailable" for t in tries), (n, tries)
        with app.engine.connect() as conn:
            orders = sorted(conn.scalars(sa.select(RsOrder.n)))
            shipments = sorted(conn.scalars(sa.select(RsShipment.n)))
            events = conn.scalar(sa.select(sa.func.count()).select_from(sa.table("kumiko_events")))
        assert orders == list(range(ORDERS))  # each keyed dispatch committed once
        assert shipments == list(range(ORDERS))  # each event's run, once
        assert events == 2 * ORDERS
        runs = app.runs()
        assert len(runs) == ORDERS and {r.status for r in runs} == {"completed"}
        print("failures seen:", sum(isinstance(t, Failure) for tries in answers.values() for t in tries))
    finally:
        app.dispose()


def _pg_ctl(server: PostgresServer, *action: str) -> None:
    assert server.bin_dir is not None and server.data_dir is not None and server.base_dir is not None
    argv = [str(server.bin_dir / "pg_ctl"), *action, "-D", str(server.data_dir), "-w", "-t", "60"]
    done = _run(argv, server.base_dir, server.run_as)
    assert done.returncode == 0, done.stderr


def test_a_worker_whose_first_pass_the_restart_cut_waits_for_the_server(private_server: PostgresServer) -> None:
    """The first pass had reached the server (its connection was then killed by the
    shutdown): the refused connections while the server is down are an outage, not a
    wrong URL.  The worker stopped with ``Connection refused`` when the restart cut its
    very first pass."""
    gate = threading.Event()
    held = threading.Event()

    def slow(c: Any) -> int:
        held.set()
        assert gate.wait(30)
        return c.payload.n

    g: Feature[Any] = Feature("rs_first")
    g.entity(RsOrder)
    g.event(Placed, name="rs-first-placed")
    first = g.write_handler(
        "place",
        g.pipeline(Place)
        .create("o", RsOrder, data=lambda c: RsOrder(n=c.payload.n), event=lambda c: Placed(c.payload.n))
        .return_(lambda c: ok(c.steps["o"].id)),
    )
    g.workflow("slow", trigger=on_event(Placed), pipeline=g.workflow_pipeline(Placed).compute("n", slow))
    app = App([g], database_url=private_server.url)
    app.create_all()
    assert isinstance(app.dispatch(first, Place(1), user=USER), Ok)

    worker = Worker(app)
    try:
        assert held.wait(30)  # the first pass is in the run's step
        _pg_ctl(private_server, "stop", "-m", "fast")
        gate.set()  # the pass goes on, on a killed connection, and the next ones find no server
        time.sleep(1)
        assert worker.thread.is_alive() and not worker.raised, worker.raised
        _pg_ctl(private_server, "start", "-l", str(private_server.log_file), "-o", f"-p {private_server.port}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and [r.status for r in app.runs()] != ["completed"]:
            time.sleep(0.1)
        assert worker.thread.is_alive() and not worker.raised, worker.raised
        assert [(r.status, dict(r.steps)) for r in app.runs()] == [("completed", {"n": 1})]
    finally:
        gate.set()
        worker.stop()
        app.dispose()
