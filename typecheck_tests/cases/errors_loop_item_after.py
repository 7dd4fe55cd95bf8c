"""A loop item read after its loop: mypy's error said only that no such key exists; the
plugin adds which loop's item it was and what to read after the loop (test_cases.py)."""

from __future__ import annotations

from kumiko_typed import Feature, fail, ok

from _models import Order

shop = Feature("shop")

after = (
    shop.pipeline(Order)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: c.scope["line"].qty))
    .compute("late", lambda c: c.scope["line"])  # E: misc # PE: reportIndexIssue
    .return_(lambda c: ok(1))
)

no_results = (
    shop.pipeline(Order)
    .compute("n", lambda c: 1)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.guard(lambda c: True, otherwise=lambda c: fail("x", "y")))
    .compute("late", lambda c: c.scope["line"])  # E: misc # PE: reportIndexIssue
    .return_(lambda c: ok(1))
)

nested = (
    shop.pipeline(Order)
    .for_each(
        "order",
        over=lambda c: [c.payload],
        do=lambda b: b.for_each("line", over=lambda c: c.scope["order"].lines, do=lambda b: b.compute("q", lambda c: 1))
        .compute("late", lambda c: c.scope["line"]),  # E: misc # PE: reportArgumentType
    )
    .return_(lambda c: ok(1))
)
