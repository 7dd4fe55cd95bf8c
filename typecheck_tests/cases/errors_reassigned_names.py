"""A step named at run time in a builder assigned back to its own name, ``p = p.compute(name,
...)``: mypy narrows the variable's keys to ``Never``, after which every step on it was a
second error (``kumiko-unanalyzable``) for the one mistake.  The step-name error is the only
one; until it is fixed the keys after it read as ``Any``, as in a chain."""

from __future__ import annotations

from typing import Any

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")


def by_region(region: str) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    p = p.compute(region, lambda c: 2)  # E: kumiko-step-name  # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    p = p.branch(when=lambda c: c.steps["count"] > 1, on_true=lambda b: b.compute("many", lambda c: True))
    p = p.for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("qty", lambda c: c.scope["line"].qty))
    p = p.compute("doubled", lambda c: c.steps["count"] * 2)
    handler = shop.write_handler("by-region", p.return_(lambda c: ok(c.steps["doubled"])))
    reveal_type(handler)  # R: kumiko_typed._feature.WriteHandler[_models.Order, Any]


def in_a_loop(regions: list[str]) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    for region in regions:
        p = p.compute(region, lambda c: 2)  # E: kumiko-step-name  # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    p.return_(lambda c: ok(c.steps["count"]))


def arm(b: Any) -> Any:
    return b


def started_again(region: str) -> None:
    # A builder of its own assigned after the mistake: its own mistakes are reported.
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    p = p.compute(region, lambda c: 2)  # E: kumiko-step-name  # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    p = shop.pipeline(Order).compute("count", lambda c: 1)
    p = p.branch(when=lambda c: True, on_true=arm)
    p.return_(lambda c: ok(c.steps["count"]))  # E: kumiko-unanalyzable  # M: Cannot tell which step keys exist before "return_": mypy reads them as Never here, as it does for a builder assigned back to its own name (p = p.branch(...)) after a step whose keys are partly unknown (an arm or body typed Any, a step named at run time); assign such a builder to a new name (p2 = p.branch(...))
