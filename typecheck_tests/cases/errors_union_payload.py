"""A union where a payload class belongs: ``type[P]`` takes one class, so both checkers
refuse it (and ``App(...)`` is a BootError naming the handler)."""

from __future__ import annotations

import attrs

from kumiko_typed import Feature

shop = Feature("shop")


@attrs.frozen
class Paid:
    amount: int


@attrs.frozen
class Refunded:
    amount: int


shop.pipeline(Paid | Refunded)  # E: arg-type # PE: reportArgumentType
