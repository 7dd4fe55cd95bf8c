"""What a segment of a run suspended inside a ``for_each`` costs, by the loop's length:
milliseconds per segment, bytes the segment sends to the database and bytes it reads
from it; and the bytes the run's start sends, which stores the loop's items at its first
suspension.

Run:  python bench/foreach_state.py [--quick] [--sizes 1000,10000,50000] [--segments N]
                                    [--rounds N] [--sqlite] [--before SRC] [--json PATH]

The workflow: a ``compute`` builds ``n`` small dicts (a text, an int, a UUID each), a
``for_each`` over them whose body is a 0-second ``wait``: every iteration is one segment
(a worker pass resumes a run once).  A fresh database per measurement (a SQLite file in
WAL; a database of the tests' throw-away PostgreSQL server), the run started, two
segments untimed, then ``--segments`` worker passes timed one by one (median, ms).  The
bytes sent are those of the parameters of every INSERT/UPDATE the pass sends (JSON as the
driver gets it), the bytes read those of the values of every row its SELECTs fetch (JSON
as text), each summed per pass (median); ``first``, the bytes the start sends, so (the
run's row, the value the loop runs over and the loop's items).

``--before SRC``: also measure the kumiko-typed of another source tree (e.g. the main
branch's ``src``), each measurement in its own process, the two sides alternating within
each round (which goes first rotating).  Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
USER_ID, TENANT_ID = uuid.UUID(int=1), uuid.UUID(int=2)


def measure(url: str, n: int, segments: int) -> dict[str, float]:
    """One measurement, in this process (the kumiko-typed on ``sys.path``)."""
    import attrs
    from sqlalchemy import event

    from kumiko_typed import App, Feature, User, manual

    @attrs.frozen
    class Go:
        n: int

    feature = Feature("fe")
    pipeline = (
        feature.workflow_pipeline(Go)
        .compute(
            "items",
            lambda c: [{"name": f"item {i}", "count": i, "id": str(uuid.UUID(int=i))} for i in range(c.payload.n)],
        )
        .for_each("item", over=lambda c: c.steps["items"], do=lambda b: b.wait("PT0S"))
    )
    flow = feature.workflow("loop", trigger=manual(Go), pipeline=pipeline)
    app = App([feature], database_url=url)
    app.create_all()
    sent, read = [0], [0]

    def count(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        if not statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            return
        rows = parameters if many else [parameters]
        for row in rows:
            values = row.values() if isinstance(row, dict) else row
            sent[0] += sum(_size(v) for v in values)

    def reading(_conn: Any, cursor: Any, statement: str, _parameters: Any, context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            context.cursor = _Sizing(cursor, read)

    event.listen(app.engine, "before_cursor_execute", count)
    event.listen(app.engine, "after_cursor_execute", reading)
    run_id = app.start_workflow(flow, Go(n), user=User(id=USER_ID, tenant_id=TENANT_ID, roles=frozenset()))
    first = sent[0]
    for _ in range(2):  # untimed: the first resumes warm the caches
        app.run_worker(once=True)
    times, sizes, reads = [], [], []
    for _ in range(segments):
        sent[0] = read[0] = 0
        start = time.perf_counter()
        app.run_worker(once=True)
        times.append(time.perf_counter() - start)
        sizes.append(sent[0])
        reads.append(read[0])
    info = app.get_run(run_id)
    assert info is not None and info.status == "suspended", info
    app.dispose()
    return {
        "ms": round(statistics.median(times) * 1000, 2),
        "bytes": int(statistics.median(sizes)),
        "read": int(statistics.median(reads)),
        "first": first,
    }


class _Sizing:
    """A DBAPI cursor that adds the bytes of the values fetched from it to ``read[0]``."""

    def __init__(self, cursor: Any, read: list[int]) -> None:
        self._cursor, self._read = cursor, read

    def _sized(self, rows: Any) -> Any:
        self._read[0] += sum(_fetched(v) for row in rows for v in row)
        return rows

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        return row if row is None else self._sized([row])[0]

    def fetchmany(self, *args: Any) -> Any:
        return self._sized(self._cursor.fetchmany(*args))

    def fetchall(self) -> Any:
        return self._sized(self._cursor.fetchall())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def _fetched(value: object) -> int:
    """The bytes of a fetched value: text as it is, JSON (psycopg hands it parsed) as text."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, dict | list):
        return len(json.dumps(value, default=str))
    return 0


def _size(value: object) -> int:
    """The bytes of a parameter as sent: text, or JSON (psycopg gets a wrapper it dumps)."""
    if isinstance(value, str | bytes):
        return len(value)
    if not hasattr(value, "obj"):
        return 0
    dumps = getattr(value, "dumps", None) or json.dumps
    return len(dumps(value.obj))


def _child(src: str | None, url: str, n: int, segments: int) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    command = [sys.executable, str(Path(__file__)), "--child", url, str(n), str(segments)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    sys.path.insert(0, str(HERE))
    from _databases import databases
    from _report import add_json_option, load_average, load_note, write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--segments", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sqlite", action="store_true", help="SQLite only")
    parser.add_argument("--before", default=None, metavar="SRC", help="also measure this source tree")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 items, 3 segments, 1 round")
    add_json_option(parser)
    args = parser.parse_args()
    sizes = [200] if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.quick:
        args.segments, args.rounds = 3, 1
    load_before = load_average()
    print(f"load average before: {load_before}", flush=True)
    sides: dict[str, str | None] = {"now": str(HERE.parent / "src")}
    if args.before is not None:
        sides = {"before": args.before, **sides}
    figures: dict[str, Any] = {"segments": args.segments, "rounds": args.rounds, "databases": {}}
    with databases("fe", sqlite_only=args.sqlite) as urls:
        for db, url in urls.items():
            per_size: dict[str, Any] = {}
            for n in sizes:
                got: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
                for round_ in range(args.rounds):
                    order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
                    for side in order:
                        got[side].append(_child(sides[side], url(), n, args.segments))
                per_size[str(n)] = {
                    side: {
                        "ms": round(statistics.median(m["ms"] for m in runs), 2),
                        "bytes": int(statistics.median(m["bytes"] for m in runs)),
                        "read": int(statistics.median(m["read"] for m in runs)),
                        "first": int(statistics.median(m["first"] for m in runs)),
                    }
                    for side, runs in got.items()
                }
                shown = "   ".join(
                    f"{side} {f['ms']:8.2f} ms {f['bytes']:>9} B sent {f['read']:>9} B read {f['first']:>10} B first"
                    for side, f in per_size[str(n)].items()
                )
                print(f"{db:10} {n:>6} items   {shown}", flush=True)
            figures["databases"][db] = per_size
    print(load_note())
    write_json(args.json, "foreach_state", figures, load_before=load_before)


if __name__ == "__main__":
    main()
