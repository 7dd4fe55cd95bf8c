"""Resolvers that are not lambdas: a ``functools.partial``, an object with ``__call__``, a
bound method, an overloaded function and a function generic in the payload or the steps
give the key the type they return when called with this pipeline's context."""

from __future__ import annotations

import copy
from functools import partial
from typing import Any, TypeVar, overload

from kumiko_typed import Ctx, Feature, ok

from _models import Line, Order

shop = Feature("shop")
P = TypeVar("P")
S = TypeVar("S")
T = TypeVar("T")


def scaled(factor: int, c: Ctx[Order, Any, Any]) -> int:
    return factor * len(c.payload.lines)


class Pricer:
    def __call__(self, c: Ctx[Order, Any, Any]) -> float:
        return 1.5 * len(c.payload.lines)

    def label(self, c: Ctx[Order, Any, Any]) -> str:
        return c.payload.note


pricer = Pricer()


def payload_of(c: Ctx[P, Any, Any]) -> P:
    return c.payload


def steps_of(c: Ctx[Any, S, Any]) -> S:
    return c.steps

priced = (
    shop.pipeline(Order)
    .compute("doubled", partial(scaled, 2))
    .compute("price", pricer)
    .compute("label", pricer.label)
    .compute("read", lambda c: (reveal_type(c.steps["doubled"]), reveal_type(c.steps["price"]), reveal_type(c.steps["label"])))  # R: int # R: float # R: str # PR: int # PR: float # PR: str
    .return_(lambda c: ok(c.steps["doubled"] + c.steps["price"]))
)
reveal_type(priced)  # R: kumiko_typed._finished.Finished[_models.Order, float] # PR: Finished[Order, float]

generic = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("order", payload_of)
    .compute("before", steps_of)
    .compute("read", lambda c: (reveal_type(c.steps["order"]), reveal_type(c.steps["before"]["count"])))  # R: _models.Order # R: int # PR: Order # PR: int
    .return_(lambda c: ok(c.steps["order"].note))
)
reveal_type(generic)  # R: kumiko_typed._finished.Finished[_models.Order, str] # PR: Finished[Order, str]


# A partial of a generic function: mypy types the partial ``partial[Any]``; the key is what
# the function returns for this pipeline's context (it was Any with the plugin).
def field_of(name: str, c: Ctx[P, Any, Any]) -> P:
    return c.payload


def items_of(kind: type[T], c: Ctx[Any, Any, Any]) -> list[T]:
    return []


partial_generic = (
    shop.pipeline(Order)
    .compute("order", partial(field_of, "note"))
    .for_each("n", over=partial(items_of, int), do=lambda b: b.compute("item", lambda c: c.scope["n"]))
    .compute("read", lambda c: (reveal_type(c.steps["order"]), reveal_type(c.steps["item"])))  # R: _models.Order # R: int | None # PR: Order # PR: int | None
)


# Generic in the whole argument: ``copy.deepcopy`` as a resolver returns the context it
# is given, and an arm that returns its builder as it is adds no key.
def unchanged(b: T) -> T:
    return b


whole = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("snapshot", copy.deepcopy)
    .branch(when=lambda c: True, on_true=unchanged)
    .compute("read", lambda c: reveal_type(c.steps["snapshot"].steps["count"]))  # R: int # PR: int
)
reveal_type(whole)  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({'count'=: int, 'snapshot'=: kumiko_typed._ctx.Ctx[_models.Order, TypedDict({'count'=: int}), TypedDict({})], 'read'=: int}), TypedDict({}), Never] # PR: Pipeline[Order, Keys[Key[Literal['count'], int], Key[Literal['snapshot'], Ctx[Order, Keys[Key[Literal['count'], int]], Scope[*tuple[()]]]], Key[Literal['read'], int]], Scope[*tuple[()]], Never]


# Overloaded: the variant that takes the context decides the key (not the function itself)
# and the loop item; the others are never called by the step.
@overload
def described(c: int) -> int: ...
@overload
def described(c: Ctx[Order, Any, Any]) -> str: ...
def described(c: object) -> object:
    return c


@overload
def lines_of(c: int) -> list[int]: ...
@overload
def lines_of(c: Ctx[Order, Any, Any]) -> list[Line]: ...
def lines_of(c: object) -> object:
    return c


overloaded = (
    shop.pipeline(Order)
    .compute("described", described)
    .for_each("line", over=lines_of, do=lambda b: b.compute("sku", lambda c: reveal_type(c.scope["line"]).sku))  # R: _models.Line # PR: Line
    .compute("read", lambda c: reveal_type(c.steps["described"]))  # R: str # PR: str
    .return_(lambda c: ok(c.steps["described"]))
)
reveal_type(overloaded)  # R: kumiko_typed._finished.Finished[_models.Order, str] # PR: Finished[Order, str]
