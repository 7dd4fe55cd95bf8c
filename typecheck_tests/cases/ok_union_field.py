"""A payload that takes either of two shapes: one class whose field is a union of tagged
members; a step narrows it with ``isinstance`` and the key gets the narrowed member's type."""

from __future__ import annotations

from typing import Any

from kumiko_typed import Ctx, Feature, ok

from _models import Refund, Settle

shop = Feature("shop")


def reason(c: Ctx[Settle, Any, Any]) -> str | None:
    how = c.payload.how
    return how.reason if isinstance(how, Refund) else None


settle = shop.write_handler(
    "settle",
    shop.pipeline(Settle).compute("why", reason).return_(lambda c: ok(c.steps["why"])),
)
reveal_type(settle)  # R: kumiko_typed._feature.WriteHandler[_models.Settle, str | None] # PR: WriteHandler[Settle, str | None]
