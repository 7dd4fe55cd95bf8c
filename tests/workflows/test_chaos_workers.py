"""Chaos probe of the many-workers promise (DESIGN §7, §8; docs/operations.md "Workers").

Three worker processes loop on one database (a PostgreSQL database, or one SQLite file)
while a mixed workload arrives (tests/_chaos_app.py: handlers whose events start runs with
``wait_for_event``, ``wait``, a flaky ``retry`` and webhooks; manual starts with keys; a
cron trigger) and a chaos thread, every 0.5–1 s, SIGKILLs a random worker and starts a new
one or (PostgreSQL, one time in three) cuts every worker's connections; the receiver is
slow and answers some requests 503.  After a quiet period with the workers running, the database and the real HTTP
receiver must show: every expected run once, completed, with its result; each event
appended once; each committed step effect once; every outbox row sent, received at least
once, every copy carrying that row's ``Idempotency-Key``; no logical webhook queued twice;
no run left running or suspended; ``check_runs`` clean.

``KUMIKO_CHAOS_SEED`` replays a round's choices (which fault, which worker, the waits
between faults and arrivals, the receiver's answers); the seed is printed.  Timing is not
replayed: a fault lands where it lands.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

from _chaos_app import (  # noqa: E402
    SPEED,
    USER,
    WORKER_BOOT,
    Confirm,
    Job,
    Order,
    Place,
    confirm,
    create_tables,
    effects,
    job,
    make_app,
    order_flow,
    place,
    tick,
)
from _receiver import Receiver  # noqa: E402

from kumiko_typed import App, Failure, Ok, User  # noqa: E402
from kumiko_typed._tables import outbox, workflow_runs  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
WORKERS = 3
ADMIN = User(id=uuid.UUID(int=13), tenant_id=USER.tenant_id, roles=frozenset({"sysadmin"}))
ORDERS = 40
JOBS = 20
CHAOS_S = 20.0
#: PostgreSQL ``application_name``s: what a cut closes.
WORKER_APP_NAME = "kumiko-chaos-worker"
DRIVER_APP_NAME = "kumiko-chaos-driver"
#: Past the chaos: the outbox lease (5 min) at SPEED, plus the slowest waits and retries.
QUIET_S = 5 * 60 / SPEED + 15


def _seed() -> int:
    given = os.environ.get("KUMIKO_CHAOS_SEED")
    return int(given) if given else random.randrange(2**32)


_SEED = _seed()


class Workers:
    """``WORKERS`` worker processes; :meth:`kill` SIGKILLs one and starts its successor.
    A worker that exits by itself (not killed) is a finding: its stderr is kept.

    A worker takes seconds to boot (imports, the App, its first connection), up to 9 s
    on a loaded machine: a kill or cut that lands before it is ``ready`` hits a process
    that has claimed nothing, and rounds whose every kill landed so passed having tested
    nothing.  So the faults wait for their targets to be ready, and the kills of working
    workers are counted."""

    def __init__(self, url: str, origin: float, hook: str, logs: Path) -> None:
        if url.startswith("postgresql"):  # named, for _cut
            url += f"?application_name={WORKER_APP_NAME}"
        self.url, self.origin, self.logs = url, origin, logs
        self.env = {**os.environ, "CHAOS_HOOK": hook}
        self.procs: list[subprocess.Popen[str]] = []
        self.ready: dict[int, threading.Event] = {}  # by pid: printed "ready"
        self.boots: list[float] = []  # seconds from start to ready
        self.killed: set[int] = set()
        self.ended: list[str] = []
        self.spawned = 0
        self.lock = threading.Lock()

    def _spawn(self) -> subprocess.Popen[str]:
        self.spawned += 1
        log = (self.logs / f"worker-{self.spawned}.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER_BOOT, str(TESTS), self.url, repr(self.origin)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=TESTS.parent,
            env=self.env,
        )
        self.ready[proc.pid] = threading.Event()
        threading.Thread(target=self._await_ready, args=(proc, time.monotonic()), daemon=True).start()
        return proc

    def _await_ready(self, proc: subprocess.Popen[str], started: float) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # to its end: a full pipe would block the worker
            if line.strip() == "ready":
                self.boots.append(time.monotonic() - started)
                self.ready[proc.pid].set()

    def start(self) -> None:
        self.procs = [self._spawn() for _ in range(WORKERS)]

    def await_ready(self, indexes: range | list[int], stop: threading.Event) -> bool:
        """Wait until the workers at ``indexes`` are ready (or have ended, or ``stop``)."""
        for i in indexes:
            proc = self.procs[i]
            while not self.ready[proc.pid].wait(0.05):
                if stop.is_set():
                    return False
                if proc.poll() is not None:
                    break
        return True

    def kill(self, i: int) -> None:
        with self.lock:
            proc = self.procs[i]
            if proc.poll() is not None:  # it had ended by itself
                self.ended.append(f"worker {proc.pid} exited {proc.returncode}")
            self.killed.add(proc.pid)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            self.procs[i] = self._spawn()

    def unexpected_exits(self) -> list[str]:
        """Workers that ended though nobody killed them."""
        with self.lock:
            return self.ended + [
                f"worker {p.pid} exited {p.returncode}"
                for p in self.procs
                if p.poll() is not None and p.pid not in self.killed
            ]

    def logged(self) -> list[str]:
        """What the workers logged besides the retries' planned first failures."""
        found = []
        for n in range(1, self.spawned + 1):
            parts = (self.logs / f"worker-{n}.log").read_text().split("\nTraceback")
            for before, record in itertools.pairwise(parts):
                if "first attempt fails" not in record:  # the log line, then its traceback's end
                    found.append(before.splitlines()[-1] + "\n" + record[-1500:])
        return found

    def stop(self) -> list[int | None]:
        """Close every live worker's stdin (a clean stop); their exit codes."""
        with self.lock:
            for proc in self.procs:
                assert proc.stdin is not None
                proc.stdin.close()
            codes = []
            for proc in self.procs:
                try:
                    codes.append(proc.wait(30))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    codes.append(None)
            return codes

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


#: The driver's calls tried again, by what the first try met.
RETRIED: collections.Counter[str] = collections.Counter()


def _retrying(what: str, call: Any) -> Any:
    """``call()`` until the database is not busy (a worker holding SQLite's write lock):
    each call carries the same idempotency key, so a retry is the same request."""
    for _ in range(100):
        try:
            result = call()
        except sa.exc.OperationalError as exc:
            RETRIED[f"{what}: {type(exc.orig).__name__}"] += 1
            time.sleep(0.1)
            continue
        if isinstance(result, Failure) and result.code == "unavailable":
            RETRIED[f"{what}: unavailable"] += 1
            time.sleep(0.1)
            continue
        return result
    raise AssertionError("the database stayed busy")


def _arrive(app: App, rng: random.Random, stop_at: float) -> tuple[dict[int, uuid.UUID], dict[int, uuid.UUID]]:
    """Place and confirm the orders and start the jobs (each twice, by key), spread over
    the chaos; the order ids and the jobs' run ids."""
    orders: dict[int, uuid.UUID] = {}
    jobs: dict[int, uuid.UUID] = {}
    pace = (stop_at - time.monotonic()) * 0.6 / (ORDERS + JOBS)
    work = [("order", n) for n in range(ORDERS)] + [("job", n) for n in range(JOBS)]
    rng.shuffle(work)
    for kind, n in work:
        if kind == "order":
            placed = _retrying(
                "place", lambda n=n: app.dispatch(place, Place(n), user=USER, idempotency_key=f"place-{n}")
            )
            assert isinstance(placed, Ok), placed
            orders[n] = placed.data
            confirmed = _retrying(
                "confirm",
                lambda n=n: app.dispatch(confirm, Confirm(orders[n], n), user=USER, idempotency_key=f"confirm-{n}"),
            )
            assert confirmed == Ok(n)
        else:
            first = _retrying("start", lambda n=n: app.start_workflow(job, Job(n), user=USER, key=f"job-{n}"))
            again = _retrying("start", lambda n=n: app.start_workflow(job, Job(n), user=USER, key=f"job-{n}"))
            assert first == again
            jobs[n] = first
        time.sleep(rng.uniform(0, 2 * pace))
    return orders, jobs


def _cut(app: App) -> collections.Counter[str]:
    """Close every worker's PostgreSQL connection, and the other connections of the
    test's own App (its dispatches and starts), from the server side: what a network cut
    or a failover does to them, mid-statement or mid-COMMIT.  How many, by whose."""
    with app.engine.begin() as conn:
        closed = conn.execute(
            sa.text(
                "SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name IN (:worker, :driver) AND datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ),
            {"worker": WORKER_APP_NAME, "driver": DRIVER_APP_NAME},
        ).all()
    return collections.Counter(name for name, done in closed if done)


def _chaos(
    app: App, workers: Workers, rng: random.Random, stop: threading.Event, faults: collections.Counter[str]
) -> None:
    """Every 0.5–1 s SIGKILL a random worker (and start another), or on PostgreSQL, one
    time in three, cut every worker's connections (and the driver's) instead; each fault
    once its targets are ready (see :class:`Workers`)."""
    while not stop.wait(rng.uniform(0.5, 1.0)):
        if app.engine.dialect.name == "postgresql" and rng.random() < 1 / 3:
            if workers.await_ready(range(WORKERS), stop):
                cut = _retrying("cut", lambda: _cut(app))
                faults["worker connections cut"] += cut[WORKER_APP_NAME]
                faults["driver connections cut"] += cut[DRIVER_APP_NAME]
                faults["cuts"] += 1
        else:
            i = rng.randrange(WORKERS)
            if workers.await_ready([i], stop):
                workers.kill(i)
                faults["kills"] += 1


def _settled(app: App) -> bool:
    """No run of the workload left open and no outbox row older than a few seconds
    pending (a cron tick may have just queued one)."""
    recent = app.clock() - timedelta(seconds=3 * SPEED)
    with app.engine.connect() as conn:
        open_runs = conn.scalar(
            sa.select(sa.func.count())
            .select_from(workflow_runs)
            .where(workflow_runs.c.status.in_(["running", "suspended"]))
        )
        stale = conn.scalar(
            sa.select(sa.func.count())
            .select_from(outbox)
            .where(outbox.c.status == "pending", outbox.c.created_at < recent)
        )
        done = conn.scalar(
            sa.select(sa.func.count()).select_from(workflow_runs).where(workflow_runs.c.status == "completed")
        )
    return open_runs == 0 and stale == 0 and (done or 0) >= ORDERS + JOBS


def _drain(app: App) -> None:
    """Deliver what a cron tick queued in the last seconds, and its retries: the receiver
    answers 503 at times, and one pass left such a row pending (a retry a moment later)."""
    for _ in range(50):
        app.run_worker(once=True)
        with app.engine.connect() as conn:
            if not conn.scalar(sa.select(sa.func.count()).select_from(outbox).where(outbox.c.status == "pending")):
                return
        time.sleep(0.2)


def _result(app: App, workflow: Any, run_id: uuid.UUID) -> Any:
    result = app.result(workflow, run_id, user=ADMIN)
    assert isinstance(result, Ok), result
    return result.data


def _check(
    app: App, receiver: Receiver, orders: dict[int, uuid.UUID], jobs: dict[int, uuid.UUID], stopped_at: datetime
) -> None:
    # Each order once, with its two events once each, in order.
    with app.engine.connect() as conn:
        ns = sorted(conn.scalars(sa.select(Order.__table__.c.n).execution_options(kumiko_all_tenants=True)))
    assert ns == list(range(ORDERS))
    streams = {n: app.read_stream(Order, order_id, user=USER) for n, order_id in orders.items()}
    kinds = {n: [type(e.event).__name__ for e in s.data] for n, s in streams.items() if isinstance(s, Ok)}
    assert kinds == {n: ["AggregateCreated", "Placed", "Confirmed"] for n in range(ORDERS)}

    # Every expected run once, completed, with its result; none open.
    order_runs = app.runs(order_flow.name)
    assert [(r.status, r.path, r.error) for r in order_runs if r.status != "completed"] == []
    results = collections.Counter(_result(app, order_flow, r.run_id) for r in order_runs)
    assert results == collections.Counter(n * 10 + 1 for n in range(ORDERS))
    job_runs = app.runs(job.name)
    assert sorted(r.run_id for r in job_runs) == sorted(jobs.values())
    assert {n: _result(app, job, run_id) for n, run_id in jobs.items()} == {n: n * 100 for n in jobs}
    tick_runs = app.runs(tick.name)
    ticks = sorted(datetime.fromisoformat(_result(app, tick, r.run_id)) for r in tick_runs)
    # Each tick once, none skipped from the first (a worker's first cron pass) to the last due.
    assert ticks[-1] >= stopped_at.replace(second=0, microsecond=0)
    assert [b - a for a, b in itertools.pairwise(ticks)] == [timedelta(minutes=1)] * (len(ticks) - 1)
    with app.engine.connect() as conn:
        statuses = collections.Counter(conn.scalars(sa.select(workflow_runs.c.status)))
        per_step = conn.execute(
            sa.select(effects.c.run_id, effects.c.step, sa.func.count()).group_by(effects.c.run_id, effects.c.step)
        ).all()
        rows = conn.execute(sa.select(outbox.c.id, outbox.c.status, outbox.c.last_error, outbox.c.message)).all()
    assert statuses == {"completed": ORDERS + JOBS + len(ticks)}
    counts = {(run_id, step): c for run_id, step, c in per_step}
    assert {c for c in counts.values()} == {1}, "a committed step effect twice"
    expected = {(r.run_id, s) for r in [*order_runs, *job_runs] for s in ("start", "after_wait", "done")}
    expected |= {(r.run_id, "start") for r in tick_runs}
    assert set(counts) == expected
    assert app.check_runs() == []

    # Every outbox row sent; received whole at least once, under its row's key; every copy
    # of a row is its body byte for byte, or one cut short by its sender's kill (fewer
    # bytes than its Content-Length, never answered): a beginning of that body.
    assert [(i, s, e) for i, s, e, _ in rows if s != "sent"] == []
    texts = {str(i): message["text"].encode() for i, _, _, message in rows}
    copies = _copies(receiver)
    assert set(copies) == set(texts)
    foreign = {
        key: [body for body, whole in bodies if not (texts[key] == body if whole else texts[key].startswith(body))]
        for key, bodies in copies.items()
    }
    assert {key: bodies for key, bodies in foreign.items() if bodies} == {}, "a copy that is not its row's body"
    assert [key for key, bodies in copies.items() if (texts[key], True) not in bodies] == [], "no whole copy"
    logical = collections.Counter(json.dumps(json.loads(text), sort_keys=True) for text in texts.values())
    assert [body for body, c in logical.items() if c > 1] == [], "a webhook queued twice"
    assert len(logical) == 2 * ORDERS + JOBS + len(ticks)


def _copies(receiver: Receiver) -> dict[str, list[tuple[bytes, bool]]]:
    """Each ``Idempotency-Key``'s requests: their bodies, and whether each came whole
    (as long as its ``Content-Length``)."""
    found: dict[str, list[tuple[bytes, bool]]] = collections.defaultdict(list)
    for request in receiver.requests:
        whole = len(request.body) == int(request.headers.get("content-length", -1))
        found[request.headers.get("idempotency-key", "")].append((request.body, whole))
    return found


def _evidence(app: App, receiver: Receiver) -> str:
    """What a failed round leaves to explain it: each outbox row with its copies as they
    arrived (in order), and every run not completed."""
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(outbox).order_by(outbox.c.created_at)).all()
        runs = conn.execute(
            sa.select(
                workflow_runs.c.run_id,
                workflow_runs.c.workflow,
                workflow_runs.c.status,
                workflow_runs.c.path,
                workflow_runs.c.error,
            ).where(workflow_runs.c.status != "completed")
        ).all()
    arrived = collections.defaultdict(list)
    for n, request in enumerate(receiver.requests):
        arrived[request.headers.get("idempotency-key", "")].append((n, request))
    lines = []
    for row in rows:
        lines.append(
            f"row {row.id} {row.status} attempts={row.attempts} created={row.created_at} sent={row.sent_at} "
            f"handler={row.handler} error={row.last_error!r} body={row.message.get('text')!r}"
        )
        lines += [
            f"  copy #{n} length {len(r.body)}/{r.headers.get('content-length')} body={r.body!r}"
            for n, r in arrived.pop(str(row.id), [])
        ]
    lines += [
        f"request #{n} under no row's key {key!r}: {r.headers} {r.body!r}" for key, rs in arrived.items() for n, r in rs
    ]
    lines += [f"run {run}" for run in runs]
    return "\n".join(lines)


@pytest.fixture
def hook_receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The webhooks' peer: it takes up to 100 ms to answer (so a kill finds deliveries in
    flight) and answers one request in ten 503 (so rows are retried)."""
    r = Receiver()
    answers = random.Random(_SEED + 2)

    def respond(_index: int, _path: str) -> tuple[int, dict[str, str]]:
        time.sleep(answers.uniform(0, 0.1))
        return (503 if answers.random() < 0.1 else 200), {}

    r.respond = respond
    monkeypatch.setenv("CHAOS_HOOK", r.url())
    yield r
    r.close()


def test_workers_killed_at_random_lose_nothing_and_double_nothing(
    db_url: str, hook_receiver: Receiver, tmp_path: Path
) -> None:
    seed = _SEED
    print(f"chaos seed {seed} on {db_url.split(':', 1)[0]} (KUMIKO_CHAOS_SEED={seed} replays its choices)")
    origin = time.time()
    app = make_app(db_url + (f"?application_name={DRIVER_APP_NAME}" if db_url.startswith("postgresql") else ""), origin)
    create_tables(app)
    workers = Workers(db_url, origin, hook_receiver.url(), tmp_path)
    stop = threading.Event()
    faults: collections.Counter[str] = collections.Counter()
    chaos = threading.Thread(target=_chaos, args=(app, workers, random.Random(seed), stop, faults), daemon=True)
    try:
        workers.start()
        chaos.start()
        chaos_ends = time.monotonic() + CHAOS_S
        orders, jobs = _arrive(app, random.Random(seed + 1), chaos_ends)
        stop.wait(max(0.0, chaos_ends - time.monotonic()))
        stop.set()
        chaos.join(30)
        deadline = time.monotonic() + QUIET_S
        while not _retrying("settled", lambda: _settled(app)) and time.monotonic() < deadline:
            time.sleep(0.5)
        print(f"settled {QUIET_S - (deadline - time.monotonic()):.1f} s after the chaos")
        assert workers.unexpected_exits() == []
        for record in workers.logged():
            print("worker logged:", record)
        assert workers.stop() == [0] * WORKERS
        stopped_at = app.clock()
        _drain(app)
        boots = sorted(workers.boots)
        print(f"{dict(faults)}, driver retries {dict(RETRIED)}, {workers.spawned} workers started")
        if boots:
            median, most = boots[len(boots) // 2], boots[-1]
            print(f"workers were ready {median:.1f} s after their start (median), {most:.1f} s at most")
        short = [r for r in hook_receiver.requests if len(r.body) != int(r.headers.get("content-length", -1))]
        print(f"{len(hook_receiver.requests)} requests, {len(short)} cut short by a kill")
        try:
            _check(app, hook_receiver, orders, jobs, stopped_at)
        except AssertionError:
            print(f"chaos seed {seed} failed; the outbox rows, their copies, the runs not completed:")
            print(_evidence(app, hook_receiver))
            print(f"the workers' logs: {tmp_path}")
            raise
        # A round whose faults all landed on workers still booting tested nothing.
        assert faults["kills"] >= 3, faults
    finally:
        stop.set()
        workers.kill_all()
        app.dispose()
