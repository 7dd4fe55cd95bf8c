"""What pyright (Pylance) reads without the plugin, next to what mypy reads with it: every
key-producing step kind exact, on every builder (DESIGN §4.8).  ``# PR:`` is pyright's
revealed type in basic and strict mode."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any, Final

from sqlalchemy import select

from kumiko_typed import Feature, Pipeline, manual, ok

from _models import EmailVerified, Order, Product, SignedUp

shop = Feature("shop", requires=["call_feature", "mail.send", "webhook.send"])
TOTAL: Final = "total"


class Name(StrEnum):
    NOTE = "note"


reserve = shop.write_handler("reserve", shop.pipeline(Order).return_(lambda c: ok(len(c.payload.lines))))

linear = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute(TOTAL, lambda c: reveal_type(c.steps["count"]) * 1.5)  # R: int # PR: int
    .find_one("maybe", lambda c: select(Product).where(Product.id == c.payload.id))
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .find_many("all", lambda c: select(Product), limit=10)
    .create("created", Product, data=lambda c: Product(id=c.payload.id, name="x", stock=c.steps["count"]))
    .update("updated", Product, id=lambda c: c.payload.id, changes=lambda c: {"stock": 1}, version=lambda c: 1)
    .append_event(Product, id=lambda c: c.steps["product"].id, event=lambda c: c.steps["total"])
    .call_feature("reserved", reserve, payload=lambda c: c.payload)
    .send_mail(to="a@example.com", subject="s", body=lambda c: c.steps["product"].name, html=lambda c: f"<b>{c.steps['product'].name}</b>")
    .send_webhook(url="https://example.com/hook", body=lambda c: {"n": c.steps["reserved"]})
    .compute("total_read", lambda c: reveal_type(c.steps["total"]))  # R: float # PR: float
    .compute("maybe_read", lambda c: reveal_type(c.steps["maybe"]))  # R: _models.Product | None # PR: Product | None
    .compute("product_read", lambda c: reveal_type(c.steps["product"]))  # R: _models.Product # PR: Product
    .compute("all_read", lambda c: reveal_type(c.steps["all"]))  # R: list[_models.Product] # PR: list[Product]
    .compute("created_read", lambda c: reveal_type(c.steps["created"]))  # R: kumiko_typed._saved.Saved[_models.Product] # PR: Saved[Product]
    .compute("updated_read", lambda c: reveal_type(c.steps["updated"]))  # R: kumiko_typed._saved.Saved[_models.Product] # PR: Saved[Product]
    .compute("reserved_read", lambda c: reveal_type(c.steps["reserved"]))  # R: int # PR: int
    .return_(lambda c: ok(c.steps["created"].id))
)
reveal_type(linear)  # R: kumiko_typed._finished.Finished[_models.Order, uuid.UUID] # PR: Finished[Order, UUID]

nested = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] > 0,
        on_true=lambda b: b.compute("big", lambda c: c.steps["count"] > 10)
        .compute("big_read", lambda c: reveal_type(c.steps["big"])),  # R: bool # PR: bool
    )
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["line"]).qty)  # R: _models.Line # PR: Line
        .compute("qty_read", lambda c: reveal_type(c.steps["qty"])),  # R: int # PR: int
    )
    .compute("count_read", lambda c: reveal_type(c.steps["count"]))  # R: int # PR: int
    .compute("big_after", lambda c: reveal_type(c.steps["big"]))  # R: bool | None # PR: bool | None
    .compute("qty_after", lambda c: reveal_type(c.steps["qty"]))  # R: int | None # PR: int | None
    .return_(lambda c: ok(c.steps["count"]))
)

arms = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["count"] > 0,
        on_true=lambda b: b.compute("a", lambda c: 1).compute("b", lambda c: "s"),
        on_false=lambda b: b.compute("b", lambda c: b"x").compute("a", lambda c: 2.5),
    )
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("same", lambda c: 1),
        on_false=lambda b: b.compute("same", lambda c: 2).compute("else_only", lambda c: "e"),
    )
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("l1", lambda c: 1).branch(
            when=lambda c: True,
            on_true=lambda b: b.compute("l2", lambda c: "s").branch(
                when=lambda c: True, on_true=lambda b: b.compute("l3", lambda c: reveal_type(c.steps["l2"]))  # R: str # PR: str
            ),
        ),
    )
    .compute("a_read", lambda c: reveal_type(c.steps["a"]))  # R: int | float # PR: int | float
    .compute("b_read", lambda c: reveal_type(c.steps["b"]))  # R: str | bytes # PR: str | bytes
    .compute("same_read", lambda c: reveal_type(c.steps["same"]))  # R: int # PR: int
    .compute("else_read", lambda c: reveal_type(c.steps["else_only"]))  # R: str | None # PR: str | None
    # For pyright the middle branch's arm adds two keys, a shape a nested branch does not try,
    # so the whole three-deep branch reads as Any (docs/plugin.md, "In your editor").
    .compute("l1_read", lambda c: reveal_type(c.steps["l1"]))  # R: int | None # PR: Any
    .compute("l3_read", lambda c: reveal_type(c.steps["l3"]))  # R: str | None # PR: Any
    .return_(lambda c: ok(c.steps["count"]))
)

# A nested arm pyright cannot name (a shape nested branches do not try) makes only its own
# branch read as Any: the keys before it and the branches after it stay exact.
after_nested = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("x", lambda c: 1).branch(
            when=lambda c: True, on_true=lambda b: b.compute("y", lambda c: 1).compute("z", lambda c: 2)
        ),
    )
    .branch(when=lambda c: True, on_true=lambda b: b.compute("w", lambda c: "s"))
    .compute("count_read", lambda c: reveal_type(c.steps["count"]))  # R: int # PR: int
    .compute("w_read", lambda c: reveal_type(c.steps["w"]))  # R: str | None # PR: str | None
    .compute("x_read", lambda c: reveal_type(c.steps["x"]))  # R: int | None # PR: Any
    .return_(lambda c: ok(c.steps["count"]))
)

onboarding = shop.workflow(
    "onboarding",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(SignedUp)
    .wait_for_event(
        "verified", EmailVerified, key=lambda c: c.payload.user_id, event_key=lambda e: e.user_id, timeout="P7D"
    )
    .retry(times=3, do=lambda b: b.compute("attempted", lambda c: c.steps["verified"] is not None))
    .compute("verified_read", lambda c: reveal_type(c.steps["verified"]))  # R: _models.EmailVerified | None # PR: EmailVerified | None
    .compute("attempted_read", lambda c: reveal_type(c.steps["attempted"]))  # R: bool # PR: bool
    .branch(
        when=lambda c: c.steps["attempted"],
        on_true=lambda b: b.wait(timedelta(hours=1)).compute("in_arm", lambda c: reveal_type(c.steps["verified"])),  # R: _models.EmailVerified | None # PR: EmailVerified | None
    ),
)

# A retry body holding a branch of a shape it does not try: the body's keys read as Any.
retried = shop.workflow(
    "retried",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(SignedUp)
    .compute("first", lambda c: 1)
    .retry(
        times=2,
        do=lambda b: b.compute("r1", lambda c: 1).branch(
            when=lambda c: True, on_true=lambda b: b.compute("r2", lambda c: 2).compute("r3", lambda c: "s")
        ),
    )
    .compute("first_read", lambda c: reveal_type(c.steps["first"]))  # R: int # PR: int
    .compute("r1_read", lambda c: reveal_type(c.steps["r1"])),  # R: int # PR: Any
)


degraded = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute(Name.NOTE, lambda c: "n")
    .compute("count_read", lambda c: reveal_type(c.steps["count"]))  # R: int # PR: int
    .return_(lambda c: ok(c.steps["count"]))
)


def add_total(b: Pipeline[Order, Any, Any, Any]) -> Pipeline[Order, Any, Any, Any]:
    """A helper typed with the public generics: its keys are ``Any``, never an error."""
    return b.compute("total", lambda c: reveal_type(c.steps["anything"]))  # R: Any # PR: Any


helped = add_total(shop.pipeline(Order)).compute("after", lambda c: reveal_type(c.steps["total"]))  # R: Any # PR: Any


longer = (
    shop.pipeline(Order)
    .compute("k0", lambda c: 0).compute("k1", lambda c: 1).compute("k2", lambda c: 2).compute("k3", lambda c: 3)
    .compute("k4", lambda c: 4).compute("k5", lambda c: 5).compute("k6", lambda c: 6).compute("k7", lambda c: 7)
    .compute("k8", lambda c: 8).compute("k9", lambda c: 9).compute("k10", lambda c: 10).compute("k11", lambda c: 11)
    .compute("k12", lambda c: reveal_type(c.steps["k11"]))  # R: int # PR: int
    .compute("k13", lambda c: reveal_type(c.steps["k12"]))  # R: int # PR: Any
    .return_(lambda c: ok(c.steps["k0"]))
)
