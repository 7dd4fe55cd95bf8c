"""Interpreter cost: N ``compute`` steps + ``return_`` through the interpreter, against the
same lambdas over a dict, against a plain function, and ``App.dispatch`` of the same
pipeline, at 3, 10 and 50 steps.

Run:  python bench/interpreter.py [--quick] [--rounds N] [--iterations N] [--steps 3,10,50]

Every side computes the same values (step k adds k to step k-1's value, every third
step multiplies instead; the first reads the payload) and returns the same
``ok({"last": ..., "steps": N})``:

* plain        -- a plain Python function: the N assignments written out, then ``ok``.
* lambdas      -- the same N lambdas as the pipeline, called in a loop over a list with a
                  small slotted context (``payload`` and a fresh ``steps`` dict), each
                  result stored under its key, then the return lambda.  What the
                  interpreter does, minus the interpreter.
* interpreter  -- ``kumiko_typed._interpreter.start_run`` + the block's ``run`` on the built
                  pipeline: the ``Run`` (which is the ``Ctx``), the values dict and its
                  read-only view, the step loop, the result check.  No database
                  (compute steps never touch one).
* dispatch     -- ``App.dispatch`` of the same pipeline as a write handler on an
                  in-memory SQLite App: adds the role and payload checks and whatever
                  the transaction costs when no statement is sent.

Nothing is persisted by any side.  Each round times M calls of every side, the order
rotating every round, with the garbage collector off inside a timed batch.  Reported:
median µs per call, the median per-round ratio interpreter / lambdas (goal <= 1.15 at
every N) and interpreter / plain, and, from a least-squares line over N, the
interpreter's per-step and fixed overhead in µs over the lambdas and over the plain
function, and dispatch's fixed cost over the plain function.  Nothing here passes or
fails on time.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
from _report import add_json_option, load_average, load_note, write_json

import kumiko_typed
from kumiko_typed import App, Feature, User, ok
from kumiko_typed._interpreter import start_run
from kumiko_typed._registry import Registry
from kumiko_typed._structuring import make_converter

GOAL = 1.15
USER = User(uuid.UUID(int=1), uuid.UUID(int=2), frozenset())


@attrs.frozen
class Numbers:
    x: int


Fn = Callable[[Any], Any]
Call = Callable[[Numbers], Any]


def _step(k: int) -> Fn:
    if k == 0:
        return lambda c: c.payload.x + 1
    prev = f"s{k - 1}"
    if k % 3 == 0:
        return lambda c: c.steps[prev] * 3 % 1_000_003
    return lambda c: c.steps[prev] + k


def computes(n: int) -> list[tuple[str, Fn]]:
    return [(f"s{k}", _step(k)) for k in range(n)]


def returns(n: int) -> Fn:
    last = f"s{n - 1}"
    return lambda c: ok({"last": c.steps[last], "steps": n})


# --- the sides ------------------------------------------------------------------------------


def make_plain(n: int) -> Call:
    """The computation written out as one function (generated: N assignments)."""
    lines = ["def plain(p):\n    s0 = p.x + 1"]
    for k in range(1, n):
        lines.append(f"    s{k} = s{k - 1} * 3 % 1_000_003" if k % 3 == 0 else f"    s{k} = s{k - 1} + {k}")
    lines.append(f"    return ok({{'last': s{n - 1}, 'steps': {n}}})")
    namespace: dict[str, Any] = {"ok": ok}
    exec("\n".join(lines), namespace)  # our own generated source
    plain: Call = namespace["plain"]
    return plain


class HandCtx:
    """The least the lambdas need: the payload and the values computed so far."""

    __slots__ = ("payload", "steps")

    def __init__(self, payload: object, steps: dict[str, object]) -> None:
        self.payload = payload
        self.steps = steps


def make_lambdas(n: int) -> Call:
    pairs, fr = computes(n), returns(n)

    def lambdas(payload: Numbers) -> Any:
        steps: dict[str, object] = {}
        c = HandCtx(payload, steps)
        for key, fn in pairs:
            steps[key] = fn(c)
        return fr(c)

    return lambdas


def pipeline(feature: Feature, n: int) -> Any:
    builder: Any = feature.pipeline(Numbers)
    for name, fn in computes(n):
        builder = builder.compute(name, fn)
    return builder.return_(returns(n))


def make_interpreted(n: int) -> Call:
    feature = Feature(f"bench{n}")
    finished = pipeline(feature, n)
    registry = Registry([feature], make_converter())
    session: Any = None  # compute and return_ never touch the session
    now = datetime(2026, 12, 2, tzinfo=UTC)
    correlation_id = uuid.UUID(int=3)
    handler = f"bench{n}:numbers"

    def interpreted(payload: Numbers) -> Any:
        run = start_run(finished, session, registry, (handler, payload, USER, now, correlation_id))
        return finished.block.run(run)

    return interpreted


def make_dispatch(n: int) -> tuple[Call, App]:
    feature = Feature(f"dispatch{n}")
    handler = feature.write_handler("numbers", pipeline(feature, n))
    app = App([feature], database_url="sqlite://")
    app.create_all()
    dispatch = app.dispatch

    def dispatched(payload: Numbers) -> Any:
        return dispatch(handler, payload, user=USER)

    return dispatched, app


# --- timing ---------------------------------------------------------------------------------


def batch(fn: Call, payload: Numbers, n: int) -> float:
    """Seconds per call over ``n`` calls."""
    rng = range(n)
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in rng:
            fn(payload)
        t1 = time.perf_counter()
    finally:
        if gc_was_on:
            gc.enable()
    return (t1 - t0) / n


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares line through (xs, ys): (slope, intercept)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def measure(n: int, rounds: int, iterations: int) -> dict[str, Any]:
    payload = Numbers(7)
    dispatched, app = make_dispatch(n)
    sides: dict[str, Call] = {
        "plain": make_plain(n),
        "lambdas": make_lambdas(n),
        "interpreter": make_interpreted(n),
        "dispatch": dispatched,
    }
    try:
        expected = sides["plain"](payload)
        for name, fn in sides.items():
            if (got := fn(payload)) != expected:
                raise SystemExit(f"MISMATCH at {n} steps: plain {expected!r} vs {name} {got!r}")
        per_side = {name: iterations if name != "dispatch" else max(iterations // 10, 1) for name in sides}
        for name, fn in sides.items():  # warm-up
            batch(fn, payload, per_side[name] // 4 or 1)
        times: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(batch(sides[name], payload, per_side[name]))
    finally:
        app.dispose()
    us = 1e6
    medians = {name: statistics.median(ts) * us for name, ts in times.items()}
    figures: dict[str, Any] = {f"{name}_us": value for name, value in medians.items()}
    for other in ("lambdas", "plain"):
        ratios = [i / o for i, o in zip(times["interpreter"], times[other], strict=True)]
        figures |= {
            f"{other}_ratio": statistics.median(ratios),
            f"{other}_ratio_min": min(ratios),
            f"{other}_ratio_max": max(ratios),
        }
    line = "  ".join(f"{name} {value:8.2f}" for name, value in medians.items())
    print(
        f"{n:3} steps  us/call: {line}  | interpreter/lambdas {figures['lambdas_ratio']:.3f} "
        f"(min {figures['lambdas_ratio_min']:.3f}, max {figures['lambdas_ratio_max']:.3f}), "
        f"interpreter/plain {figures['plain_ratio']:.3f}",
        flush=True,
    )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few rounds)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=None, help="calls per side per round (dispatch: a tenth)")
    parser.add_argument("--steps", default="3,10,50", help="comma-separated step counts")
    add_json_option(parser)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 25)
    iterations = args.iterations or (300 if args.quick else 10_000)
    counts = [int(s) for s in args.steps.split(",")]
    load_before = load_average()

    print(
        "bench/interpreter.py — N compute steps + return_: plain function, lambdas over a dict, interpreter, dispatch"
    )
    print(
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"kumiko-typed {kumiko_typed.__version__}, {rounds} rounds x {iterations} calls per side, order rotating"
    )
    print("nothing is persisted; dispatch runs on an in-memory SQLite App")
    print(f"{load_note()} before")
    per_n = {str(n): measure(n, rounds, iterations) for n in counts}
    print(f"{load_note()} after")

    figures: dict[str, Any] = {"rounds": rounds, "iterations": iterations, "goal": GOAL, "steps": per_n}
    worst = max(f["lambdas_ratio"] for f in per_n.values())
    verdict = "met" if worst <= GOAL else "NOT MET"
    print(f"interpreter/lambdas, worst median over N: {worst:.3f}; goal <= {GOAL}: {verdict}")
    figures["worst_lambdas_ratio"] = worst
    if len(counts) >= 2:
        for other in ("lambdas", "plain"):
            slope, fixed = fit(counts, [per_n[str(n)]["interpreter_us"] - per_n[str(n)][f"{other}_us"] for n in counts])
            figures[f"per_step_over_{other}_us"], figures[f"fixed_over_{other}_us"] = slope, fixed
            print(f"interpreter over {other}: {slope:.3f} us per step + {fixed:.2f} us fixed")
        slope, fixed = fit(counts, [per_n[str(n)]["dispatch_us"] - per_n[str(n)]["interpreter_us"] for n in counts])
        figures["dispatch_fixed_over_interpreter_us"] = fixed
        _, plain_fixed = fit(counts, [per_n[str(n)]["dispatch_us"] - per_n[str(n)]["plain_us"] for n in counts])
        figures["dispatch_fixed_over_plain_us"] = plain_fixed
        print(
            f"dispatch over the interpreter: {fixed:.2f} us fixed ({slope:.3f} us per step); "
            f"over the plain function: {plain_fixed:.2f} us fixed (issue 13 item 2 goal: <= 25 us)"
        )
    write_json(args.json, "interpreter", figures, load_before=load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
