"""A branch arm, loop body or retry body that chooses its builder with a conditional
expression: a key every side sets has the type each gives it (their union).  mypy alone
joins two builders (for a feature without ``requires=``, whose ``Never`` capabilities make
it join, not unite), which drops a key the sides type differently, and reads their union
(with ``requires=``) as no steps type at all."""

from __future__ import annotations

from typing import NoReturn

from kumiko_typed import Feature, manual, ok

from _models import Order

shop = Feature("shop")
mailing = Feature("mailing", requires=["mail.send"])
DETAILED = True


def refuse() -> NoReturn:
    raise SystemExit("not configured")


def counted() -> bool:
    return DETAILED


chosen = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] == 0,
        on_true=lambda b: b.compute("n", lambda c: 1) if DETAILED else (b.compute("n", lambda c: "one") if counted() else refuse()),
        on_false=lambda b: b.compute("n", lambda c: 0),
    )
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("sku", lambda c: c.scope["line"].sku) if DETAILED else b.compute("sku", lambda c: 0),
    )
    .return_(
        lambda c: ok(
            (
                reveal_type(c.steps["n"]),  # R: int | str # PR: Any
                reveal_type(c.steps["sku"]),  # R: str | int | None # PR: Any
                reveal_type(c.steps["count"]),  # R: int # PR: int
            )
        )
    )
)

mailed = (
    mailing.pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("x", lambda c: 1) if DETAILED else b.compute("x", lambda c: 2.0).send_mail(to="a@example.com", subject="s", body="b"),
    )
    .compute("after", lambda c: reveal_type(c.steps["x"]))  # R: int | float | None # PR: float | None
    .return_(lambda c: ok(c.steps["after"]))
)

retried = shop.workflow(
    "retried",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .retry(times=2, do=lambda b: b.compute("tries", lambda c: 1) if DETAILED else b.compute("tries", lambda c: "none"))
    .compute("seen", lambda c: reveal_type(c.steps["tries"])),  # R: int | str # PR: Any
)
