"""A tier-2 step in a helper generic over the capabilities cannot be checked where it is
written; the error says so and what to write instead (the App's boot still checks it)."""

from __future__ import annotations

from typing import Any, TypeVar

from kumiko_typed import Feature, SubPipeline

from _models import Order

S = TypeVar("S")
Sc = TypeVar("Sc")
C = TypeVar("C", bound=str)

shop = Feature("shop", requires=["mail.send"])


def notify(b: SubPipeline[Order, S, Sc, C]) -> SubPipeline[Order, S, Sc, C]:
    return b.send_mail(to="a@example.com", subject="s", body="b")  # E: kumiko-tier  # M: Cannot tell whether the feature declares "mail.send": the capabilities are the type variable C of a generic helper; give the builder Any capabilities there (SubPipeline[P, S, Sc, Any]) and the App's boot validation checks the step


def notify_any(b: SubPipeline[Order, S, Sc, Any]) -> SubPipeline[Order, S, Sc, Any]:
    return b.send_mail(to="a@example.com", subject="s", body="b")


def stringly(b: SubPipeline[Order, S, Sc, str]) -> SubPipeline[Order, S, Sc, str]:
    return b.send_mail(to="a@example.com", subject="s", body="b")  # E: kumiko-tier  # M: Cannot tell whether the feature declares "mail.send" (its capabilities are str); create it as Feature("name", requires=["..."]) with string literals


# A helper generic over the steps cannot name the keys it adds in its return type: the
# error says to give it Any steps, which keeps the keys before it exact where it is used.
def audit(b: SubPipeline[Order, S, Sc, C]) -> SubPipeline[Order, Any, Sc, C]:
    return b.compute("audit", lambda c: 1)  # E: kumiko-unanalyzable  # M: Cannot tell which step keys exist before "compute": the steps are the type variable S of a generic helper, whose return type cannot name the keys it adds; give its builder Any steps (SubPipeline[P, Any, Sc, C]): where it is used, the keys before it stay exact and its own read as Any


def audit_any(b: SubPipeline[Order, Any, Sc, C]) -> SubPipeline[Order, Any, Sc, C]:
    return b.compute("audit", lambda c: 1).branch(when=lambda c: True, on_true=lambda b: b.compute("more", lambda c: 2))
