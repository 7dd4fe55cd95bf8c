"""A branch arm, loop body or retry body that chooses its builder with a conditional
expression: a key only one side sets is ``T | None`` after the step, as a key of one arm
is.  mypy alone joins the two builders into the keys both set (a feature without
``requires=`` makes their join, not their union), so a key of one side was no key at all."""

from __future__ import annotations

from typing import NoReturn

from kumiko_typed import Feature, manual, ok

from _models import Order

shop = Feature("shop")
mailing = Feature("mailing", requires=["mail.send"])
DETAILED = True


def refuse() -> NoReturn:
    raise SystemExit("not configured")


chosen = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] > 1,
        on_true=lambda b: b.compute("big", lambda c: c.steps["count"]) if DETAILED else b.compute("label", lambda c: "many"),
    )
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("sku", lambda c: c.scope["line"].sku) if DETAILED else b,
    )
    .branch(
        when=lambda c: c.steps["count"] == 0,
        on_true=lambda b: b.compute("n", lambda c: 1) if DETAILED else (b.compute("n", lambda c: "one") if c_ok() else refuse()),
        on_false=lambda b: b.compute("n", lambda c: 0),
    )
    .return_(
        lambda c: ok(
            (
                reveal_type(c.steps["big"]),  # R: int | None # PR: Any
                reveal_type(c.steps["label"]),  # R: str | None # PR: Any
                reveal_type(c.steps["sku"]),  # R: str | None # PR: Any
                reveal_type(c.steps["n"]),  # R: int | str # PR: Any
                reveal_type(c.steps["count"]),  # R: int # PR: int
            )
        )
    )
)


def c_ok() -> bool:
    return DETAILED


# With requires=, mypy makes the union of the two builders, which was read as Any steps.
mailed = (
    mailing.pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("x", lambda c: 1) if DETAILED else b.send_mail(to="a@example.com", subject="s", body="b"),
    )
    .compute("after", lambda c: reveal_type(c.steps["x"]))  # R: int | None # PR: Any
    .return_(lambda c: ok(c.steps["after"]))
)


retried = shop.workflow(
    "retried",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .retry(times=2, do=lambda b: b.compute("tries", lambda c: 1) if DETAILED else b)
    .compute("seen", lambda c: reveal_type(c.steps["tries"])),  # R: int | None # PR: Any
)
