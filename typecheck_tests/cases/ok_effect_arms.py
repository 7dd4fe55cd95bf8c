"""A branch whose arm adds no key, only writes, sends or guards (``append_event``,
``send_mail``, ``guard``), as the ports' sagas and SLAs have: pyright keeps every key around
it exact, nested in an arm, in a loop body and in a ``retry`` body, and with an ``on_false``
given that sets no key (docs/plugin.md, "In your editor").  Before, such a branch fitted no
shape pyright tried, and the keys of the arm, body or retry holding it read as ``Any``."""

from __future__ import annotations

from datetime import timedelta

from kumiko_typed import Feature, fail, manual, ok

from _models import EmailVerified, Order, SignedUp

shop = Feature("shop", requires=["mail.send", "webhook.send"])

# Nested in a branch arm (examples/ports/helpdesk.py's first-response SLA).
in_arm = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] > 0,
        on_true=lambda b: b.compute("big", lambda c: c.steps["count"] > 10).branch(
            when=lambda c: reveal_type(c.steps["big"]),  # R: bool # PR: bool
            on_true=lambda b: b.send_mail(to="a@example.com", subject="s", body="b"),
        ),
    )
    .compute("big_read", lambda c: reveal_type(c.steps["big"]))  # R: bool | None # PR: bool | None
    .return_(lambda c: ok(c.steps["count"]))
)

# Nested in a loop body, both arms given and neither setting a key.
in_body = (
    shop.pipeline(Order)
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("qty", lambda c: c.scope["line"].qty).branch(
            when=lambda c: c.steps["qty"] > 1,
            on_true=lambda b: b.send_mail(to="a@example.com", subject="s", body=lambda c: c.scope["line"].sku),
            on_false=lambda b: b.send_webhook(url="https://hooks.example/one", body=lambda c: {"qty": c.steps["qty"]}),
        ),
    )
    .compute("qty_read", lambda c: reveal_type(c.steps["qty"]))  # R: int | None # PR: int | None
    .return_(lambda c: ok(1))
)

# Nested in a loop body: one arm refuses, the other sets a key.
guarded = (
    shop.pipeline(Order)
    .compute("limit", lambda c: 10)
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.branch(
            when=lambda c: c.scope["line"].qty > c.steps["limit"],
            on_true=lambda b: b.guard(lambda c: False, otherwise=lambda c: fail("unprocessable", "too many")),
            on_false=lambda b: b.compute("left", lambda c: c.steps["limit"] - c.scope["line"].qty),
        ),
    )
    .compute("left_read", lambda c: reveal_type(c.steps["left"]))  # R: int | None # PR: int | None
    .return_(lambda c: ok(c.steps["limit"]))
)

# Nested in an arm: one arm sets a key, the other only sends.
nested_else = (
    shop.pipeline(Order)
    .branch(
        when=lambda c: bool(c.payload.lines),
        on_true=lambda b: b.branch(
            when=lambda c: c.payload.note == "",
            on_true=lambda b: b.compute("noted", lambda c: len(c.payload.lines)),
            on_false=lambda b: b.send_mail(to="a@example.com", subject="s", body=lambda c: c.payload.note),
        ),
    )
    .compute("noted_read", lambda c: reveal_type(c.steps["noted"]))  # R: int | None # PR: int | None
    .return_(lambda c: ok(1))
)

# A top-level on_false given that sets no key: the other arm's key is T | None.
else_effect = (
    shop.pipeline(Order)
    .branch(
        when=lambda c: bool(c.payload.lines),
        on_true=lambda b: b.compute("first", lambda c: c.payload.lines[0]),
        on_false=lambda b: b.send_mail(to="a@example.com", subject="empty", body="no lines"),
    )
    .compute("first_read", lambda c: reveal_type(c.steps["first"]))  # R: _models.Line | None # PR: Line | None
    .return_(lambda c: ok(1))
)

# Nested in a retry body (examples/ports/order_saga.py's reservation): its keys are plain
# after it, and the keys of the steps after it exact too.
saga = shop.workflow(
    "saga",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(SignedUp)
    .retry(
        name="reserve",
        times=3,
        base_delay=timedelta(seconds=1),
        do=lambda b: b.compute("reserved", lambda c: "@" in c.payload.email).branch(
            when=lambda c: c.steps["reserved"],
            on_true=lambda b: b.send_webhook(url="https://hooks.example/reserve", body=lambda c: {"ok": True}),
        ),
    )
    .branch(
        name="charge",
        when=lambda c: reveal_type(c.steps["reserved"]),  # R: bool # PR: bool
        on_true=lambda b: b.wait_for_event(
            "verified", EmailVerified, key=lambda c: c.payload.user_id, event_key=lambda e: e.user_id, timeout="P1D"
        ).branch(
            name="escalate",
            when=lambda c: c.steps["verified"] is None,
            on_true=lambda b: b.send_mail(to="a@example.com", subject="s", body="b"),
        ),
    )
    .compute("verified_read", lambda c: reveal_type(c.steps["verified"]))  # R: _models.EmailVerified | None # PR: EmailVerified | None
    .return_(lambda c: ok(reveal_type(c.steps["reserved"]))),  # R: bool # PR: bool
)
