"""What the App's SQLite functions cost where SQLite's own answer differed from
PostgreSQL's: an expression through the function against the plain expression SQLite ran
before, over 100,000 rows.

Run:  python bench/sqlite_functions.py [--rows N] [--rounds N]

A SQLite file with ``--rows`` rows (an ``integer``, a ``real``, a NUMERIC(12, 2) and a
UUID's 32 hex digits) on a connection of the App's SQLite engine (its functions
registered); each statement is ``SELECT max(expression) FROM t``, the App's SQL and the
plain one alternating within each round (median over the rounds, milliseconds, and the
ratio).  Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from kumiko_typed._engine import make_engine
from kumiko_typed._sqlite_functions import EXACT, MATH, UUID_TEXT, WHOLE

#: (what, the App's SQL, the plain SQL SQLite ran before)
PAIRS = (
    ("n + 1 (integer)", f"{WHOLE}(32, n + 1)", "n + 1"),
    ("round(x)", f"{MATH}('round', 0, x)", "round(x)"),
    ("sqrt(x)", f"{MATH}('sqrt', 0, x)", "sqrt(x)"),
    ("amt * 1.05 (numeric)", f"{EXACT}('*', 2, 2, amt, 1.05)", "amt * 1.05"),
    ("amt / 3 (numeric)", f"{EXACT}('/', 2, 0, amt, 3)", "amt / 3"),
    ("cast(ref, String)", f"{UUID_TEXT}(ref)", "ref"),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.sqlite3'}")
        with engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None
            driver.execute("CREATE TABLE t (n INTEGER, x REAL, amt NUMERIC(12, 2), ref CHAR(32))")
            driver.executemany(
                "INSERT INTO t VALUES (?, ?, ?, ?)",
                ((i, i / 7, round(i / 3, 2), uuid.UUID(int=i).hex) for i in range(args.rows)),
            )
            times: dict[str, list[float]] = {sql: [] for _, app, plain in PAIRS for sql in (app, plain)}
            for _ in range(args.rounds):
                for _, app, plain in PAIRS:
                    for sql in (app, plain):
                        started = time.perf_counter()
                        driver.execute(f"SELECT max({sql}) FROM t").fetchall()
                        times[sql].append((time.perf_counter() - started) * 1000)
        engine.dispose()
    print(f"{args.rows} rows, median of {args.rounds} rounds (ms)")
    print(f"{'expression':24} {'App':>8} {'plain':>8} {'ratio':>6} {'per row':>9}")
    for what, app, plain in PAIRS:
        ours, theirs = statistics.median(times[app]), statistics.median(times[plain])
        extra = (ours - theirs) / args.rows * 1e6
        print(f"{what:24} {ours:8.1f} {theirs:8.1f} {ours / theirs:6.2f} {extra:7.2f}ns")


if __name__ == "__main__":
    main()
