"""``# type: ignore[kumiko-...]`` where users put it: on the line of the step's method name
when its arguments are on lines of their own (formatters split a long step so), as well as
on the line the error is reported at (its argument's).  An ignore on another step's line
silences nothing."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")

split = (
    shop.pipeline(Order)
    .compute("x", lambda c: 1)
    .send_mail(  # type: ignore[kumiko-tier]
        to="a@example.com",
        subject="s",
        body="b",
    )
    .compute(  # type: ignore[kumiko-duplicate-step]
        "x",
        lambda c: 2,
    )
    .branch(
        when=lambda c: c.steps["x"] > 1,
        on_true=lambda b: b.send_mail(  # type: ignore[kumiko-tier]
            to="a@example.com",
            subject="s",
            body="b",
        ),
    )
    .return_(lambda c: ok(c.steps["x"]))
)
reveal_type(split)  # R: kumiko_typed._finished.Finished[_models.Order, int]

other_line = (
    shop.pipeline(Order)  # type: ignore[kumiko-tier]  # E: unused-ignore
    .send_mail(
        to="a@example.com",  # E: kumiko-tier  # M: Step "send_mail" needs the tier-2 capability "mail.send", which this feature does not declare (it declares nothing); add "mail.send" to Feature(..., requires=[...])
        subject="s",
        body="b",
    )
)
