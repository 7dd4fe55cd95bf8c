"""Workflow throughput: kumiko-typed against DBOS Transact (start -> complete, runs per
second, one process), and workflow resumes by 1, 2 and 4 worker processes against a
receiver that answers after 5 ms.

Run:  python bench/workflows.py [--quick] [--rounds N] [--runs N] [--db sqlite|postgres|both]
                                [--no-dbos] [--no-scaling] [--scaling-runs N]

**Against DBOS** (same process, one thread; each run's result is checked).  Workloads:

* ``ten``    -- 10 compute steps (each adds its index to the previous value).
* ``step10`` -- the same 10 steps, each durable before the next runs.
* ``wait0``  -- one 0-second wait, then one compute step.

Sides (all do the same arithmetic and return the same value):

* kumiko      -- a ``WorkflowPipeline`` started with ``app.start_workflow``.  ``ten``
                 completes inside the start: one transaction inserts the run row with its
                 final state.  ``step10`` has a 0-second ``wait`` between consecutive
                 steps: each step's value is committed (the suspension) before the next
                 step runs, and ``app.run_worker(once=True)`` passes resume the due runs
                 until all completed.  ``wait0``: the start commits the suspension, worker
                 passes resume the runs.
* dbos        -- ``@DBOS.workflow`` calling 10 ``@DBOS.step`` functions (DBOS records the
                 workflow and each step's output), for ``ten`` and ``step10``; ``wait0``:
                 ``DBOS.sleep(0)`` (a recorded durable sleep) then one step.
* dbos-plain  -- ``ten`` with 10 plain functions: DBOS records the workflow's start and
                 its result, no step.

Goals (kumiko runs/s / DBOS runs/s, median of the per-round ratios, PostgreSQL):
``step10`` / dbos steps >= 5, ``ten`` / dbos-plain >= 3.  A round times ``--runs`` runs of
each side back to back, the side order rotating every round, after one untimed warm-up
round.  Each side has its own database: on SQLite a file each, both in WAL with
synchronous=FULL (kumiko's App sets it; DBOS's file is switched to WAL before DBOS opens
it); on PostgreSQL two databases on the tests' throw-away server (fsync,
full_page_writes and synchronous_commit OFF) or the server of ``KUMIKO_BENCH_POSTGRES_URL``.
DBOS runs background threads while launched, i.e. also while kumiko is timed.  ``pip
install dbos`` (or the project's ``bench`` extra) adds DBOS; without it, or with
``--no-dbos``, kumiko-typed is measured alone.

**Resume scaling** (PostgreSQL): ``--scaling-runs`` runs of a workflow whose first
segment ends at a 0-second wait; its second segment POSTs (``http.client``, the
connection kept alive across the runs of a worker) to an HTTP receiver on 127.0.0.1 that
answers after 5 ms, then completes.  1, 2 and 4 worker processes
(``--resume-worker`` mode of this script: warmed up before the start signal, then
``run_worker(once=True)`` until a pass finds no run left to claim) resume them; the
figure is runs / (start signal to the last worker done), configurations rotating per
round, with the CPU milliseconds per run by side (workers, the receiver in this process,
PostgreSQL).  Goal: 4 workers >= 3x one.  Persisted per run: the
run row (inserted at the start, updated to completed by the resume).  Nothing here
passes or fails on time.

**Slow peer** (PostgreSQL, same workers): 60 runs, the receiver answering after 50 ms --
where a worker that claimed a batch at once kept runs it had not started from workers
with nothing to do (``_claim_size``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _cpu import CpuMeter, worker_cpu  # noqa: E402
from _outbox_worker import LoopbackReceiver, WorkerProcesses  # noqa: E402
from _report import add_json_option, load_average, load_note, write_json  # noqa: E402

from kumiko_typed import App, Feature, User, manual  # noqa: E402
from kumiko_typed._tables import workflow_runs  # noqa: E402
from kumiko_typed.testing.postgres import PostgresServer, start_test_postgres, unavailable_reason  # noqa: E402

try:
    from dbos import DBOS

    DBOS_ERROR: str | None = None
except Exception as exc:  # not installed, or does not import here
    DBOS = None
    DBOS_ERROR = f"{type(exc).__name__}: {exc}"

USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=2), roles=frozenset())
TEN_RESULT = 45  # 0 + 1 + ... + 9 added to the start value
GOAL_STEPS = 5.0  # step10 / dbos (steps)
GOAL_PLAIN = 3.0  # ten / dbos-plain
GOAL_SCALING = 3.0
RECEIVER_DELAY = 0.005
#: The slow peer's configuration: fewer runs (60, not a multiple of 4 workers' batches of
#: 10), each resume waiting 50 ms for the receiver.
SLOW_RUNS = 60
SLOW_DELAY = 0.05


# --- kumiko-typed -------------------------------------------------------------------------


@attrs.frozen
class Start:
    x: int


@attrs.frozen
class Ping:
    url: str
    x: int


#: The ping step's HTTP connection, kept alive across the runs a worker resumes (what a
#: step calling a peer over and over would do), per host and port.
_CONNECTIONS: dict[tuple[str, int], http.client.HTTPConnection] = {}


def _post(url: str, i: int) -> int:
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    body = json.dumps({"i": i}).encode()
    for attempt in (1, 2):  # a kept connection the peer closed meanwhile: once more on a new one
        conn = _CONNECTIONS.get((host, port)) or http.client.HTTPConnection(host, port, timeout=30)
        _CONNECTIONS[(host, port)] = conn
        try:
            conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            return int(response.status)
        except (ConnectionError, http.client.HTTPException):
            conn.close()
            del _CONNECTIONS[(host, port)]
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


feature = Feature("wfbench")
_ten = feature.workflow_pipeline(Start).compute("s0", lambda c: c.payload.x + 0)
_step10 = feature.workflow_pipeline(Start).compute("s0", lambda c: c.payload.x + 0)
for _k in range(1, 10):
    _ten = _ten.compute(f"s{_k}", lambda c, k=_k: c.steps[f"s{k - 1}"] + k)
    _step10 = _step10.wait("PT0S").compute(f"s{_k}", lambda c, k=_k: c.steps[f"s{k - 1}"] + k)
ten_flow = feature.workflow("ten", trigger=manual(Start), pipeline=_ten)
step10_flow = feature.workflow("step10", trigger=manual(Start), pipeline=_step10)
wait_flow = feature.workflow(
    "wait0",
    trigger=manual(Start),
    pipeline=feature.workflow_pipeline(Start).wait("PT0S").compute("s9", lambda c: c.payload.x + TEN_RESULT),
)
ping_flow = feature.workflow(
    "ping",
    trigger=manual(Ping),
    pipeline=feature.workflow_pipeline(Ping)
    .wait("PT0S")
    .compute("status", lambda c: _post(c.payload.url, c.payload.x)),
)


def unfinished(app: App) -> int:
    with app.engine.connect() as conn:
        query = sa.select(sa.func.count()).where(workflow_runs.c.status.in_(("running", "suspended")))
        return int(conn.scalar(query) or 0)


class Kumiko:
    name = "kumiko"

    def __init__(self, url: str) -> None:
        self.app = App([feature], database_url=url)
        self.app.create_all()

    def ten(self, runs: int, base: int) -> None:
        for i in range(runs):
            self.app.start_workflow(ten_flow, Start(base + i), user=USER)

    def _resumed(self, flow: Any, runs: int, base: int, resumes: int) -> None:
        for i in range(runs):
            self.app.start_workflow(flow, Start(base + i), user=USER)
        resumed = 0
        while resumed < runs * resumes:
            resumed += self.app.run_worker(once=True)["resumed"]

    def step10(self, runs: int, base: int) -> None:
        self._resumed(step10_flow, runs, base, 9)

    def wait0(self, runs: int, base: int) -> None:
        self._resumed(wait_flow, runs, base, 1)

    def check(self, done: int) -> None:
        """Every run so far completed with the right last value (read once, untimed)."""
        with self.app.engine.connect() as conn:
            rows = conn.execute(sa.select(workflow_runs.c.status, workflow_runs.c.state, workflow_runs.c.payload)).all()
        assert len(rows) == done, (len(rows), done)
        for status, state, payload in rows:
            x = self.app.codec.decode(payload).x
            assert status == "completed" and self.app.codec.decode(state["values"])["s9"] == x + TEN_RESULT, status

    def close(self) -> None:
        self.app.dispose()


# --- DBOS Transact ------------------------------------------------------------------------

if DBOS is not None:

    @DBOS.step()
    def add_step(x: int, k: int) -> int:
        return x + k

    def add_plain(x: int, k: int) -> int:
        return x + k

    @DBOS.workflow()
    def dbos_ten(x: int) -> int:
        for k in range(10):
            x = add_step(x, k)
        return x

    @DBOS.workflow()
    def dbos_ten_plain(x: int) -> int:
        for k in range(10):
            x = add_plain(x, k)
        return x

    @DBOS.workflow()
    def dbos_wait0(x: int) -> int:
        DBOS.sleep(0)
        return add_step(x, TEN_RESULT)


class Dbos:
    name = "dbos"

    def __init__(self, url: str) -> None:
        assert DBOS is not None
        if url.startswith("sqlite:///"):  # WAL, as kumiko-typed's file (the mode is stored in the file)
            with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
        DBOS(config={"name": "kumiko-bench", "system_database_url": url, "log_level": "WARNING"})
        DBOS.launch()
        if url.startswith("sqlite:///"):
            with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
                self.journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])

    def _check(self, got: int, x: int, what: str) -> None:
        if got != x + TEN_RESULT:
            raise AssertionError(f"dbos {what}: wrong result")

    def ten(self, runs: int, base: int) -> None:
        for i in range(runs):
            self._check(dbos_ten(base + i), base + i, "ten")

    def ten_plain(self, runs: int, base: int) -> None:
        for i in range(runs):
            self._check(dbos_ten_plain(base + i), base + i, "ten (plain)")

    def wait0(self, runs: int, base: int) -> None:
        for i in range(runs):
            self._check(dbos_wait0(base + i), base + i, "wait0")

    def close(self) -> None:
        assert DBOS is not None
        DBOS.destroy(destroy_registry=False)


# --- against DBOS ---------------------------------------------------------------------------

#: (kumiko side, DBOS side, goal or None for context)
COMPARISONS = (
    ("kumiko step10", "dbos ten", GOAL_STEPS),
    ("kumiko ten", "dbos-plain ten", GOAL_PLAIN),
    ("kumiko ten", "dbos ten", None),
    ("kumiko wait0", "dbos wait0", None),
)


def timed(fn: Callable[[int, int], None], runs: int, base: int) -> float:
    started = time.perf_counter()
    fn(runs, base)
    return runs / (time.perf_counter() - started)


def measure(label: str, kumiko_url: str, dbos_url: str | None, rounds: int, runs: int) -> dict[str, Any]:
    kumiko = Kumiko(kumiko_url)
    dbos = Dbos(dbos_url) if dbos_url is not None else None
    sides: dict[str, Callable[[int, int], None]] = {
        "kumiko ten": kumiko.ten,
        "kumiko step10": kumiko.step10,
        "kumiko wait0": kumiko.wait0,
    }
    if dbos is not None:
        sides |= {"dbos ten": dbos.ten, "dbos-plain ten": dbos.ten_plain, "dbos wait0": dbos.wait0}
        if hasattr(dbos, "journal"):
            label += f" (DBOS's file: journal_mode={dbos.journal})"
    figures: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    base = kumiko_runs = 0
    try:
        for r in range(rounds + 1):  # round 0 warms up
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rate = timed(sides[name], runs, base)
                base += runs
                if name.startswith("kumiko"):
                    kumiko_runs += runs
                if r:
                    figures[name].append(rate)
            kumiko.check(kumiko_runs)
    finally:
        kumiko.close()
        if dbos is not None:
            dbos.close()
    print(f"\n{label}: {rounds} rounds x {runs} runs per side (runs/s, median [min-max])")
    for name, rates in figures.items():
        print(f"  {name:<16} {statistics.median(rates):8.1f}  [{min(rates):.1f}-{max(rates):.1f}]")
    result: dict[str, Any] = {
        "rounds": rounds,
        "runs": runs,
        "runs_per_s": {name: statistics.median(rates) for name, rates in figures.items()},
        "ratios": {},
    }
    if dbos is not None:
        for mine, other, goal in COMPARISONS:
            ratios = [k / d for k, d in zip(figures[mine], figures[other], strict=True)]
            median = statistics.median(ratios)
            verdict = "context" if goal is None else f"goal >= {goal}: " + ("met" if median >= goal else "NOT MET")
            print(f"  {mine} / {other}: median ratio {median:.2f}  ({verdict})")
            result["ratios"][f"{mine} / {other}"] = {"median": median, "min": min(ratios), "max": max(ratios)}
    return result


# --- resume scaling -------------------------------------------------------------------------


def resume_worker(url: str) -> int:
    """In a child: warm up, ``ready``, wait for a line, resume runs until a pass finds none
    left to claim, ``done N CPU-seconds``.

    The warm-up (before ``ready``, so outside the timed window, alike in every
    configuration): a first pass on the still empty database and one ``wait0`` run started
    and resumed, which compile the worker's statements and run its first segment once --
    a one-off cost of a process, which inside the window each of 4 workers would pay on
    the 2 CPUs while 1 worker pays it once.  A pass that claims nothing ends the worker:
    what is left is held by other workers, which complete it (the parent checks every run
    completed); polling on would add, to the configurations with more than one worker
    only, idle passes on the shared CPUs and up to a poll's sleep after the last commit."""
    app = App([feature], database_url=url)
    try:
        app.run_worker(once=True)
        app.start_workflow(wait_flow, Start(0), user=USER)
        while unfinished(app):  # the warm-up runs of all workers (another may hold one)
            if not app.run_worker(once=True)["resumed"]:
                time.sleep(0.005)
        print("ready", flush=True)
        sys.stdin.readline()
        cpu = time.process_time()
        resumed = 0
        while got := app.run_worker(once=True)["resumed"]:
            resumed += got
        print(f"done {resumed} {time.process_time() - cpu:.4f}", flush=True)
    finally:
        app.dispose()
    return 0


def resume_once(url: str, runs: int, workers: int, meter: CpuMeter, delay: float) -> tuple[float, dict[str, float]]:
    """Start ``runs`` ping runs on the fresh database ``url``; resume them with ``workers``
    processes: runs per second, and CPU milliseconds per run by side."""
    app = App([feature], database_url=url)
    try:
        app.create_all()
        with LoopbackReceiver(delay) as receiver, WorkerProcesses() as fleet:
            procs = fleet.start(url, workers, command=(sys.executable, __file__, "--resume-worker"))
            for i in range(runs):  # once the workers warmed up on the empty database
                app.start_workflow(ping_flow, Ping(receiver.url, i), user=USER)
            outputs, elapsed = fleet.timed(procs, meter)
            with app.engine.connect() as conn:
                statuses = set(conn.scalars(sa.select(workflow_runs.c.status)))
            if statuses != {"completed"} or sorted(receiver.numbers) != list(range(runs)):
                raise RuntimeError(f"not every run completed once: {statuses}, {receiver.count} requests")
        cpu = {"workers": worker_cpu(outputs), "receiver": meter.here}
        if meter.postgres is not None:
            cpu["postgres"] = meter.postgres
        return runs / elapsed, {side: 1000 * seconds / runs for side, seconds in cpu.items()}
    finally:
        app.dispose()


def resume_scaling(server: PostgresServer, runs: int, rounds: int, delay: float, *, goal: bool) -> dict[str, Any]:
    rates: dict[int, list[float]] = {n: [] for n in (1, 2, 4)}
    cpu: dict[int, list[dict[str, float]]] = {n: [] for n in rates}
    configs = list(rates)
    meter = CpuMeter(server)
    for r in range(rounds):
        for n in configs[r % 3 :] + configs[: r % 3]:
            name = f"bench_wr_{uuid.uuid4().hex[:8]}"
            try:
                rate, per_run = resume_once(server.create_database(name), runs, n, meter, delay)
            finally:
                server.drop_database(name)
            rates[n].append(rate)
            cpu[n].append(per_run)
    print(
        f"\nresume scaling (PostgreSQL): {runs} runs, each resume POSTs to 127.0.0.1 answering after "
        f"{delay * 1000:.0f} ms; {rounds} round(s), configurations rotating (runs/s, median [min-max]; "
        "CPU ms per run: workers + receiver + PostgreSQL)"
    )
    result: dict[str, Any] = {
        "runs": runs,
        "rounds": rounds,
        "delay_ms": delay * 1000,
        "runs_per_s": {},
        "cpu_ms_per_run": {},
    }
    for n, values in rates.items():
        sides = {side: statistics.median(c[side] for c in cpu[n]) for side in cpu[n][0]}
        result["runs_per_s"][str(n)] = statistics.median(values)
        result["cpu_ms_per_run"][str(n)] = sides
        parts = " + ".join(f"{v:.2f}" for v in sides.values())
        print(
            f"  {n} worker(s) {statistics.median(values):8.1f}  [{min(values):.1f}-{max(values):.1f}]"
            f"   CPU {parts} = {sum(sides.values()):.2f} ms"
        )
    for n in (2, 4):
        ratios = [many / one for one, many in zip(rates[1], rates[n], strict=True)]
        result[f"scaling_{n}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        print(f"  {n} workers vs 1: {statistics.median(ratios):.2f}x")
    if goal:
        met = result["scaling_4"]["median"] >= GOAL_SCALING
        print(f"  goal 4 workers >= {GOAL_SCALING}x one: {'met' if met else 'NOT MET'}")
    return result


# --- command line ---------------------------------------------------------------------------


def postgres_urls(server: PostgresServer | None) -> tuple[str, str] | None:
    url = os.environ.get("KUMIKO_BENCH_POSTGRES_URL")
    if url:
        return url, url
    if server is None:
        return None
    suffix = uuid.uuid4().hex[:8]
    return server.create_database(f"bench_k_{suffix}"), server.create_database(f"bench_d_{suffix}")


def main() -> None:
    if sys.argv[1:2] == ["--resume-worker"]:
        sys.exit(resume_worker(sys.argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds x 6 runs, 12 scaling runs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=40, help="runs per side per round")
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--no-dbos", action="store_true", help="measure kumiko-typed alone")
    parser.add_argument("--no-scaling", action="store_true", help="skip the resume-scaling part")
    parser.add_argument("--scaling-runs", type=int, default=150, help="runs resumed per configuration")
    add_json_option(parser)
    args = parser.parse_args()
    load_before = load_average()
    rounds, runs = (2, 6) if args.quick else (args.rounds, args.runs)
    scaling_runs, scaling_rounds = (12, 1) if args.quick else (args.scaling_runs, 3)
    results: dict[str, Any] = {"goal_steps": GOAL_STEPS, "goal_plain": GOAL_PLAIN, "goal_scaling": GOAL_SCALING}
    use_dbos = DBOS is not None and not args.no_dbos
    dbos_version = "" if DBOS is None else f" {metadata.version('dbos')}"
    print(
        f"bench/workflows.py — kumiko-typed {metadata.version('kumiko-typed')} vs DBOS Transact{dbos_version}; "
        f"CPython {platform.python_version()}, {os.cpu_count()} CPUs, {load_note()}"
    )
    print(
        "persisted per run: kumiko -- the run row (ten: one insert; step10: an insert and 9 updates, one per "
        "durable step; wait0: an insert and an update); DBOS -- its workflow status row and one row per recorded "
        "step or sleep (plain: none).  SQLite: both files WAL, synchronous=FULL; PostgreSQL: throw-away server, "
        "fsync, full_page_writes and synchronous_commit OFF"
    )
    if DBOS is None:
        print(f"DBOS Transact not measured: {DBOS_ERROR}")
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="kumiko-wfbench-") as folder:
            dbos_url = f"sqlite:///{folder}/dbos.sqlite3" if use_dbos else None
            results["sqlite"] = measure("SQLite", f"sqlite:///{folder}/kumiko.sqlite3", dbos_url, rounds, runs)
    if args.db in ("postgres", "both"):
        server = None if os.environ.get("KUMIKO_BENCH_POSTGRES_URL") else start_test_postgres()
        try:
            urls = postgres_urls(server)
            if urls is None:
                print(f"PostgreSQL: skipped ({unavailable_reason()})")
            else:
                dbos_url = urls[1] if use_dbos else None
                results["postgres"] = measure("PostgreSQL", urls[0], dbos_url, rounds, runs)
                if server is not None and not args.no_scaling:
                    scaling = (scaling_runs, scaling_rounds, RECEIVER_DELAY)
                    results["resume_scaling"] = resume_scaling(server, *scaling, goal=True)
                    slow = (12 if args.quick else SLOW_RUNS, scaling_rounds, SLOW_DELAY)
                    results["resume_scaling_slow"] = resume_scaling(server, *slow, goal=False)
        finally:
            if server is not None:
                server.stop()
    print(f"\n{load_note()} at the end")
    write_json(args.json, "workflows", results, load_before=load_before)


if __name__ == "__main__":
    main()
