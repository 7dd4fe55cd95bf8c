"""Around a branch whose arms add no key (they only write, send or guard), pyright flags a
wrong key and a wrong use of a key's type as mypy with the plugin does, nested in a loop
body and in a ``retry`` body.  Before, such a branch fitted no shape pyright tried: every
key of the body read as ``Any``, and these lines were no error in the editor."""

from __future__ import annotations

from datetime import timedelta

from kumiko_typed import Feature, fail, manual, ok

from _models import Order, SignedUp

shop = Feature("shop", requires=["webhook.send"])

saga = shop.workflow(
    "saga",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(SignedUp)
    .retry(
        times=3,
        base_delay=timedelta(seconds=1),
        do=lambda b: b.compute("reserved", lambda c: "@" in c.payload.email).branch(
            when=lambda c: c.steps["reserved"],
            on_true=lambda b: b.send_webhook(url="https://hooks.example/reserve", body=lambda c: {"ok": True}),
        ),
    )
    .compute("typo", lambda c: c.steps["reserverd"])  # E: misc # PE: reportArgumentType
    .compute("wrong_use", lambda c: c.steps["reserved"].upper())  # E: attr-defined # PE: reportAttributeAccessIssue
    .return_(lambda c: ok(1)),
)

looped = (
    shop.pipeline(Order)
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.branch(
            when=lambda c: c.scope["line"].qty > 10,
            on_true=lambda b: b.guard(lambda c: False, otherwise=lambda c: fail("unprocessable", "too many")),
            on_false=lambda b: b.compute("sku", lambda c: c.scope["line"].sku),
        ),
    )
    .compute("loud", lambda c: c.steps["sku"].upper())  # E: union-attr # PE: reportOptionalMemberAccess
    .return_(lambda c: ok(1))
)
