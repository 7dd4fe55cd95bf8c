"""A key no earlier step produced is an error for pyright (Pylance) without the plugin, on the
same line as mypy's with it (DESIGN §4.8).  ``# PE:`` is pyright's rule in basic mode."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")

typo = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("double", lambda c: c.steps["cuont"] * 2)  # E: misc # PE: reportArgumentType
    .return_(lambda c: ok(c.steps["count"]))
)

first_step = shop.pipeline(Order).compute("x", lambda c: c.steps["x"]).return_(lambda c: ok(1))  # E: misc # PE: reportIndexIssue

forward = (
    shop.pipeline(Order)
    .compute("early", lambda c: c.steps["late"])  # E: misc # PE: reportIndexIssue
    .compute("late", lambda c: 1)
    .return_(lambda c: ok(1))
)

in_arm = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("a", lambda c: c.steps["b"]),  # E: misc # PE: reportArgumentType
        on_false=lambda b: b.compute("b", lambda c: 1),
    )
    .return_(lambda c: ok(1))
)

scope = (
    shop.pipeline(Order)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("q", lambda c: c.scope["lien"]))  # E: misc # PE: reportArgumentType
    .return_(lambda c: ok(1))
)


def dynamic_name() -> str:
    return "dynamic"


dynamic = (
    shop.pipeline(Order)
    .compute(dynamic_name(), lambda c: 1)  # E: kumiko-step-name # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    .compute("read", lambda c: c.steps["whatever"])  # no second error: after it any other key reads as Any, as in pyright
    .return_(lambda c: ok(1))
)

one_arm = (
    shop.pipeline(Order)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("note", lambda c: "n"))
    .compute("loud", lambda c: c.steps["note"].upper())  # E: union-attr # PE: reportOptionalMemberAccess
    .return_(lambda c: ok(1))
)
