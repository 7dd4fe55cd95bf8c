"""Mistakes that mypy's own checks catch once the plugin has made the types exact."""

from __future__ import annotations

from typing import Any, TypedDict

from typing_extensions import TypeGuard, TypeIs

from sqlalchemy import select

from kumiko_typed import Ctx, Feature, manual, ok

from _models import Line, Order, Product, SignedUp

shop = Feature("shop")

missing_key = (
    shop.pipeline(Order)
    .compute("total", lambda c: 1)
    .compute("t2", lambda c: c.steps["totl"])  # E: misc
)

wrong_use = (
    shop.pipeline(Order)
    .compute("total", lambda c: 1)
    .compute("t2", lambda c: c.steps["total"] + "x")  # E: operator
)


one_arm = (
    shop.pipeline(Order)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("n", lambda c: 1))
    .compute("m", lambda c: c.steps["n"] + 1)  # E: operator
)

# One error, at the pipeline (mypy's own "Cannot infer value of type parameter" for the
# same mistake is taken back).
mismatch = shop.workflow(
    "wf",
    trigger=manual(SignedUp),
    pipeline=shop.workflow_pipeline(Order),  # E: kumiko-trigger-payload  # M: The trigger gives SignedUp but the workflow pipeline takes Order; build it with feature.workflow_pipeline(SignedUp)
)


def poke(c: Ctx[Order, Any, Any]) -> None:
    c.payload = c.payload  # E: misc


bad_creation_event = shop.pipeline(Order).create(
    "p",
    Product,
    data=lambda c: Product(id=c.payload.id, name="x", stock=1),
    event=lambda c: c.steps["nope"],  # E: misc
)
not_a_resolver = shop.pipeline(Order).create(
    "p",
    Product,
    data=lambda c: Product(id=c.payload.id, name="x", stock=1),
    event=SignedUp,  # E: arg-type
)

# An else-arm given as None adds no keys, and leaves no others open to a typo.
none_else = (
    shop.pipeline(Order)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("n", lambda c: 1), on_false=None)
    .compute("m", lambda c: c.steps["nn"])  # E: misc
)

# A compute step without its function: mypy's own error, and no crash writing the cache.
no_fn = shop.pipeline(Order).compute("x")  # E: call-arg

# ``.get`` of a key no step produced is an error (mypy alone types it ``object``); a known
# key reads as its type (every key before a step exists). Other TypedDicts keep mypy's ``.get``.
gets = (
    shop.pipeline(Order)
    .compute("first", lambda c: c.steps.get("total"))  # E: kumiko-unknown-key  # M: c.steps.get("total"): no step before this one is named "total"; no key exists yet: read a key only after the step that produces it
    .compute("total", lambda c: 1)
    .compute("known", lambda c: reveal_type(c.steps.get("total")))  # R: int
    .compute("typo", lambda c: c.steps.get("totl"))  # E: kumiko-unknown-key  # M: c.steps.get("totl"): no step before this one is named "totl"; did you mean "total"?
    .compute("late", lambda c: c.steps.get("later", 0))  # E: kumiko-unknown-key  # M: c.steps.get("later"): no step before this one is named "later"; read one of "first", "total", "known", "typo"
    .compute("outside", lambda c: c.scope.get("line"))  # E: kumiko-unknown-key  # M: c.scope.get("line"): no for_each around this step has its item named "line"; no loop item is in scope: read c.scope inside a for_each body
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("i", lambda c: c.scope.get("lines", 0)))  # E: kumiko-unknown-key  # M: c.scope.get("lines"): no for_each around this step has its item named "lines"; did you mean "line"?
)
# A workflow's resolvers get a WorkflowCtx (a Ctx whose c.workflow is set): the same check.
workflow_gets = (
    shop.workflow_pipeline(Order)
    .compute("total", lambda c: 1)
    .compute("typo", lambda c: c.steps.get("totl"))  # E: kumiko-unknown-key  # M: c.steps.get("totl"): no step before this one is named "totl"; did you mean "total"?
)

# ``in`` of a key no step produced is the same error (mypy checks ``in`` of any ``str``): in
# a step, an arm's condition, a loop body, combined with and/not, in a workflow too. A
# known key is no error; nor is ``in`` of another mapping.
tests = (
    shop.workflow_pipeline(Order)
    .compute("total", lambda c: 1)
    .compute("typo", lambda c: "totl" in c.steps)  # E: kumiko-unknown-key  # M: "totl" in c.steps: no step before this one is named "totl"; did you mean "total"?
    .branch(
        when=lambda c: "total" in c.steps and not ("later" not in c.steps),  # E: kumiko-unknown-key  # M: "later" not in c.steps: no step before this one is named "later"; read one of "total", "typo"
        on_true=lambda b: b.compute("arm", lambda c: "total" in c.steps and "x" in {"x": 1}),
    )
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("i", lambda c: "lien" in c.scope))  # E: kumiko-unknown-key  # M: "lien" in c.scope: no for_each around this step has its item named "lien"; did you mean "line"?
)


class Plain(TypedDict):
    a: int


def plain_get(p: Plain) -> None:
    reveal_type(p.get("b"))  # R: object

# ``when=`` narrows inside the arms what it tests against None (and/or/not of such tests);
# after the branch the key keeps its type.
narrowed = (
    shop.pipeline(Order)
    .compute("note", lambda c: c.payload.note or None)
    .compute("other", lambda c: c.payload.note or None)
    .branch(
        when=lambda c: c.steps["note"] is not None and not (c.steps["other"] is None),
        on_true=lambda b: b.compute("u", lambda c: (reveal_type(c.steps["note"]), reveal_type(c.steps["other"]))),  # R: str # R: str
        on_false=lambda b: b.compute("u", lambda c: reveal_type(c.steps["note"])),  # R: str | None
    )
    .branch(
        when=lambda c: c.steps["note"] is None or None is c.steps["other"],
        on_true=lambda b: b.compute("v", lambda c: reveal_type(c.steps["note"])),  # R: str | None
        on_false=lambda b: b.compute("v", lambda c: (reveal_type(c.steps["note"]), reveal_type(c.steps["other"]))),  # R: str # R: str
    )
    .for_each(
        "item",
        over=lambda c: [c.steps["note"]],
        do=lambda b: b.branch(
            when=lambda c: c.scope["item"] is None,
            on_true=lambda b: b.compute("w", lambda c: reveal_type(c.scope["item"])),  # R: None
            on_false=lambda b: b.compute("w", lambda c: reveal_type(c.scope["item"]).upper()),  # R: str
        ),
    )
    .compute("after", lambda c: c.steps["note"].upper())  # E: union-attr
)

# A key bound by a walrus in the test (the form pyright narrows within an expression) is
# tested as well: the arms read it narrowed (they read it as str | None, an error at .upper()).
walrus = (
    shop.pipeline(Order)
    .compute("note", lambda c: c.payload.note or None)
    .branch(
        when=lambda c: (note := c.steps["note"]) is not None and len(note) > 1,
        on_true=lambda b: b.compute("u", lambda c: reveal_type(c.steps["note"]).upper()),  # R: str
        on_false=lambda b: b.compute("u", lambda c: reveal_type(c.steps["note"])),  # R: str | None
    )
    .branch(
        when=lambda c: None is (note := c.steps["note"]),
        on_true=lambda b: b.compute("v", lambda c: reveal_type(c.steps["note"])),  # R: None
        on_false=lambda b: b.compute("v", lambda c: reveal_type(c.steps["note"]).upper()),  # R: str
    )
)

# A key that cannot be None, tested ``is None`` (a pointless test, which pyright's strict
# mode reports): that arm never runs, and reads the key as ``Never``, as mypy's own ``if x
# is None`` does for an ``int``, instead of ``None``, which made every use there an error.
defensive = (
    shop.pipeline(Order)
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .compute("count", lambda c: len(c.payload.lines))
    .branch(
        when=lambda c: c.steps["product"] is None,
        on_true=lambda b: b.compute("label", lambda c: reveal_type(c.steps["product"]).name),  # R: Never
        on_false=lambda b: b.compute("label", lambda c: reveal_type(c.steps["product"]).name),  # R: _models.Product
    )
    .branch(
        when=lambda c: not (c.steps["count"] is not None),
        on_true=lambda b: b.compute("more", lambda c: reveal_type(c.steps["count"]) + 1),  # R: Never
    )
    .return_(lambda c: ok((c.steps["label"], c.steps["more"])))
)
reveal_type(defensive)  # R: kumiko_typed._finished.Finished[_models.Order, tuple[str, int | None]]


# ``when=`` narrows the arms as mypy's own ``if`` narrows: ``isinstance`` (a tuple of
# classes too), a ``TypeIs`` function (both arms), a ``TypeGuard`` (the true arm only), a
# comparison with a literal; a class no key's type is gets mypy's ad-hoc intersection.
# A test in a function returning a plain ``bool`` narrows nothing, as in mypy.
def is_text(x: object) -> TypeIs[str]:
    return isinstance(x, str)


def all_text(x: list[object]) -> TypeGuard[list[str]]:
    return all(isinstance(i, str) for i in x)


def looks_like_text(x: object) -> bool:
    return isinstance(x, str)


by_class = (
    shop.pipeline(Order)
    .compute("code", lambda c: len(c.payload.lines) if c.payload.note else c.payload.note.upper())
    .compute("parts", lambda c: list[object](c.payload.lines))
    .compute("owner", lambda c: Line("x", 1) if c.payload.note else Product())
    .compute("level", lambda c: "high" if c.payload.note else None)
    .branch(
        when=lambda c: isinstance(c.steps["code"], int),
        on_true=lambda b: b.compute("a", lambda c: reveal_type(c.steps["code"]) + 1),  # R: int
        on_false=lambda b: b.compute("a", lambda c: len(reveal_type(c.steps["code"]))),  # R: str
    )
    .branch(
        when=lambda c: is_text(c.steps["code"]) and isinstance(c.steps["owner"], (Line, str)),
        on_true=lambda b: b.compute("b", lambda c: reveal_type((c.steps["code"], c.steps["owner"]))),  # R: tuple[str, _models.Line]
        on_false=lambda b: b.compute("b", lambda c: reveal_type((c.steps["code"], c.steps["owner"]))),  # R: tuple[int | str, _models.Line | _models.Product]
    )
    .branch(
        when=lambda c: not is_text(c.steps["code"]),
        on_true=lambda b: b.compute("c", lambda c: reveal_type(c.steps["code"])),  # R: int
        on_false=lambda b: b.compute("c", lambda c: reveal_type(c.steps["code"])),  # R: str
    )
    .branch(
        when=lambda c: all_text(c.steps["parts"]),
        on_true=lambda b: b.compute("d", lambda c: reveal_type(c.steps["parts"])),  # R: list[str]
        on_false=lambda b: b.compute("d", lambda c: reveal_type(c.steps["parts"])),  # R: list[object]
    )
    .branch(
        when=lambda c: c.steps["level"] == "high",
        on_true=lambda b: b.compute("e", lambda c: reveal_type(c.steps["level"]).upper()),  # R: str
    )
    .branch(
        when=lambda c: isinstance(c.steps["owner"], Order),
        on_true=lambda b: b.compute("f", lambda c: reveal_type(c.steps["owner"].lines)),  # R: list[_models.Line]
    )
    .branch(
        when=lambda c: looks_like_text(c.steps["code"]),
        on_true=lambda b: b.compute("g", lambda c: c.steps["code"].upper()),  # E: union-attr
    )
    .compute("after", lambda c: reveal_type(c.steps["code"]))  # R: int | str
)


# A read step keeps one value per row: a query of two columns is one arg-type error, which
# names the rule and the fix (mypy's repeat of it in the lambda, return-value, is taken back).
two_columns = (
    shop.pipeline(Order)
    .find_many("pairs", lambda c: select(Product.name, Product.stock))  # E: arg-type
    .find_one("one", lambda c: select(Product.name, Product.stock).where(Product.id == c.payload.id))  # E: arg-type
    .find_many("names", lambda c: select(Product.name))
    .compute("read", lambda c: (reveal_type(c.steps["pairs"]), reveal_type(c.steps["names"])))  # R: Any # R: list[str]
)


# No select at all: one arg-type error that says so (it was three: the argument, its repeat in
# the lambda, and a missing annotation for the key's list[Never]); the key reads as Any.
not_a_select = (
    shop.pipeline(Order)
    .find_many("rows", lambda c: len(c.payload.lines))  # E: arg-type
    .compute("n", lambda c: reveal_type(c.steps["rows"]))  # R: Any
)
