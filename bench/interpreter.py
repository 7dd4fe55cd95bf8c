"""Interpreter overhead: 10 ``compute`` steps + ``return_`` by hand vs. through the interpreter.

Run:  python bench/interpreter.py [--quick] [--rounds N] [--iterations N]

Both sides run the SAME 11 lambdas (10 computes reading ``c.payload`` and earlier
``c.steps`` values, then a ``return_`` that wraps its data with ``ok()``):

* by hand      -- what you would write without the framework: a fresh ``dict`` for the
                  step values, a small slotted context object carrying ``payload`` and
                  that dict as ``steps``, the 10 lambdas called in order with each result
                  stored under its key, then the return lambda (which calls ``ok()``).
* interpreter  -- ``kumiko_typed._interpreter.start_run`` + ``run_block`` on the
                  ``Finished`` pipeline built once with ``Feature(...).pipeline(P)
                  .compute(...)...return_(...)``.  That includes everything a
                  dispatch does per call besides the role and payload checks and the
                  transaction: the ``Ctx``, the read-only views, the ``Run``, the step
                  loop and the ``isinstance`` check on the return value.  No database:
                  compute steps never touch the session, so a placeholder is passed.

Each round times N calls of one side then N calls of the other (the order alternates
every round), with the garbage collector off inside a timed batch as ``timeit`` does.
The figures are the median per-call time of each side and the median of the per-round
ratios interpreter / by hand.  Nothing here passes or fails on time.
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
from typing import Any, cast

import attrs
from _report import add_json_option, load_average, load_note, write_json

import kumiko_typed
from kumiko_typed import Feature, Ok, User, ok
from kumiko_typed._interpreter import start_run
from kumiko_typed._registry import Registry
from kumiko_typed._steps import run_block
from kumiko_typed._structuring import make_converter

TARGET = 1.5


@attrs.frozen
class AdjustStock:
    sku: str
    quantity: int
    unit_price: float
    discount_pct: float
    warehouse: str


# --- the lambdas, shared by both sides -------------------------------------------------

Fn = Callable[[Any], Any]

COMPUTES: list[tuple[str, Fn]] = [
    ("qty", lambda c: max(c.payload.quantity, 0)),
    ("gross", lambda c: c.steps["qty"] * c.payload.unit_price),
    ("discount", lambda c: c.steps["gross"] * c.payload.discount_pct / 100),
    ("net", lambda c: c.steps["gross"] - c.steps["discount"]),
    ("tax", lambda c: round(c.steps["net"] * 0.2, 2)),
    ("total", lambda c: c.steps["net"] + c.steps["tax"]),
    ("sku", lambda c: c.payload.sku.strip().upper()),
    ("label", lambda c: f"{c.steps['sku']}@{c.payload.warehouse} x{c.steps['qty']}"),
    ("large", lambda c: c.steps["total"] > 1000),
    ("priority", lambda c: "high" if c.steps["large"] else "normal"),
]
RETURN: Fn = lambda c: ok(  # noqa: E731
    {"label": c.steps["label"], "total": c.steps["total"], "priority": c.steps["priority"]}
)


# --- (a) by hand -------------------------------------------------------------------------


class HandCtx:
    """The least a by-hand version needs: the payload and the values computed so far."""

    __slots__ = ("payload", "steps")

    def __init__(self, payload: object, steps: dict[str, object]) -> None:
        self.payload = payload
        self.steps = steps


def make_by_hand() -> Callable[[object], Ok[object]]:
    (k0, f0), (k1, f1), (k2, f2), (k3, f3), (k4, f4), (k5, f5), (k6, f6), (k7, f7), (k8, f8), (k9, f9) = COMPUTES
    fr = RETURN

    def by_hand(payload: object) -> Ok[object]:
        steps: dict[str, object] = {}
        c = HandCtx(payload, steps)
        steps[k0] = f0(c)
        steps[k1] = f1(c)
        steps[k2] = f2(c)
        steps[k3] = f3(c)
        steps[k4] = f4(c)
        steps[k5] = f5(c)
        steps[k6] = f6(c)
        steps[k7] = f7(c)
        steps[k8] = f8(c)
        steps[k9] = f9(c)
        return cast("Ok[object]", fr(c))

    return by_hand


# --- (b) through the interpreter ------------------------------------------------------------


def make_interpreted() -> Callable[[object], Any]:
    feature = Feature("bench")
    builder: Any = feature.pipeline(AdjustStock)
    for name, fn in COMPUTES:
        builder = builder.compute(name, fn)
    finished = builder.return_(RETURN)
    handler = "bench:adjust"
    user = User(uuid.UUID(int=1), uuid.UUID(int=2), frozenset({"clerk"}))
    session: Any = None  # compute and return_ never touch the session
    now = datetime(2026, 12, 2, tzinfo=UTC)
    correlation_id = uuid.UUID(int=3)
    registry = Registry([feature], make_converter())

    def interpreted(payload: object) -> Any:
        run = start_run(finished, session, registry, (handler, payload, user, now, correlation_id))
        return run_block(finished.block, run)

    return interpreted


# --- timing ------------------------------------------------------------------------------------


def batch(fn: Callable[[object], object], payload: object, n: int) -> float:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (few rounds)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=None)
    add_json_option(parser)
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 30)
    iterations = args.iterations or (2_000 if args.quick else 20_000)

    payload = AdjustStock(sku=" ab-123 ", quantity=40, unit_price=31.5, discount_pct=7.5, warehouse="north")
    by_hand = make_by_hand()
    interpreted = make_interpreted()

    load_before = load_note()
    load_avg_before = load_average()

    # Sanity: both sides compute the same thing.
    expected = by_hand(payload)
    got = interpreted(payload)
    if got != expected:
        print(f"MISMATCH: by hand {expected!r} vs interpreter {got!r}", file=sys.stderr)
        return 2

    # Warm-up (specialising interpreter, caches).
    batch(by_hand, payload, iterations // 4 or 1)
    batch(interpreted, payload, iterations // 4 or 1)

    hand_times: list[float] = []
    interp_times: list[float] = []
    ratios: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            h = batch(by_hand, payload, iterations)
            i = batch(interpreted, payload, iterations)
        else:
            i = batch(interpreted, payload, iterations)
            h = batch(by_hand, payload, iterations)
        hand_times.append(h)
        interp_times.append(i)
        ratios.append(i / h)

    us = 1e6
    med_h = statistics.median(hand_times) * us
    med_i = statistics.median(interp_times) * us
    ratio = statistics.median(ratios)
    print("bench/interpreter.py — 10 compute steps + return_, by hand vs interpreter")
    print(
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"kumiko-typed {kumiko_typed.__version__}, {rounds} rounds x {iterations} calls, alternating"
    )
    print(f"{load_before} before, {load_note()} after")
    print(
        f"by hand       median {med_h:8.3f} us/call  (min {min(hand_times) * us:.3f}, max {max(hand_times) * us:.3f})"
    )
    print(
        f"interpreter   median {med_i:8.3f} us/call  (min {min(interp_times) * us:.3f}, "
        f"max {max(interp_times) * us:.3f})"
    )
    print(f"overhead      median {med_i - med_h:8.3f} us/call")
    print(
        f"ratio interpreter/by-hand: median {ratio:.3f}  (min {min(ratios):.3f}, max {max(ratios):.3f}; "
        f"target <= {TARGET})"
    )
    figures = {
        "rounds": rounds,
        "iterations": iterations,
        "by_hand_us": med_h,
        "interpreter_us": med_i,
        "ratio": ratio,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "target": TARGET,
    }
    write_json(args.json, "interpreter", figures, load_before=load_avg_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
