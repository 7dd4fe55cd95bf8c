"""kumiko-unanalyzable: where the plugin cannot work out the keys, it says so instead of
falling back to Any."""

from __future__ import annotations

from typing import Any, Never

from kumiko_typed import Feature, Pipeline, fail, ok

from _models import Order

shop = Feature("shop")
steps: Any = ...

not_a_function = shop.pipeline(Order).for_each("n", over=steps, do=lambda b: b)  # E: kumiko-unanalyzable # M: for_each over= must be a function returning an iterable (got Any); e.g. over=lambda c: c.payload.lines
# Not a function but typed: mypy's own error at the argument is the only one (it was
# reported twice, the second time as kumiko-unanalyzable).
a_list = shop.pipeline(Order).for_each("n", over=[1, 2], do=lambda b: b)  # E: arg-type


def extend(b: Pipeline[Order, dict[str, int], Any, Never]) -> None:
    # A steps type that no builder produces.
    b.compute("y", lambda c: 1)  # E: kumiko-unanalyzable # M: Cannot tell which step keys exist before "compute" (the steps type is dict[str, int]); build pipelines by chaining a feature's pipeline(...) builder


# A step called through a variable holding the bound method: no hook sees it, so its marker
# stays; the next step says so, one that adds no key (return_) too, instead of reading Any.
compute = shop.pipeline(Order).compute
aliased = compute("x", lambda c: 1)
ended = aliased.return_(lambda c: ok(c.steps["x"]))  # E: kumiko-unanalyzable # M: Cannot tell which step keys exist before "return_": the step before it was not called as a method of its builder (e.g. through a variable, m = b.compute; m(...)), so the plugin never saw it; call each step on the builder, b.compute(...)
more = aliased.guard(lambda c: True, otherwise=lambda c: fail("conflict", "no"))  # E: kumiko-unanalyzable # M: Cannot tell which step keys exist before "guard": the step before it was not called as a method of its builder (e.g. through a variable, m = b.compute; m(...)), so the plugin never saw it; call each step on the builder, b.compute(...)


# A lambda with *args or **kwargs: mypy does not infer it from the step, checks its body as
# untyped code and gives it an Any result (the items, the arm's keys, the key), unreported.
starred = (
    shop.pipeline(Order)
    .for_each("n", over=lambda *_: [1, 2], do=lambda b: b.compute("seen", lambda c: c.scope["n"]))  # E: kumiko-unanalyzable # M: over= of step "for_each" is a lambda with *args or **kwargs, which mypy does not check against the step: its body is checked as untyped code and its result is Any; give it one parameter, lambda c: ...
    .branch(when=lambda c: True, on_true=lambda b, *_: b.compute("arm", lambda c: 1))  # E: kumiko-unanalyzable # M: on_true= of step "branch" is a lambda with *args or **kwargs, which mypy does not check against the step: its body is checked as untyped code and its result is Any; give it one parameter, lambda b: ...
    .compute("total", lambda c, **_: [c])  # E: kumiko-unanalyzable # M: fn= of step "compute" is a lambda with *args or **kwargs, which mypy does not check against the step: its body is checked as untyped code and its result is Any; give it one parameter, lambda c: ...
)


# A lambda with yield is a generator function: the step gets a generator object, while mypy
# types the lambda by its body (Any for a yield, None for a yield from), unreported.  Where
# the result's type is fixed (an arm), mypy's own error says it, alone; where a resolver's is
# (when=, otherwise=, return_: generator_results below), mypy said only that a generator
# function must be typed Generator, and the plugin says what to return instead; an over=
# generator would run, and mypy's arg-type there (the lambda returns None) is taken back.
generators = (
    shop.pipeline(Order)
    .compute("note", lambda c: (yield c.payload.note))  # E: kumiko-unanalyzable # M: fn= of step "compute" is a lambda with yield, so the step would get a generator object, not a value, and mypy does not type the lambda as one; return the value itself (a list rather than its items: lambda c: [...])
    .compute("skus", lambda c: (yield from c.payload.lines))  # E: kumiko-unanalyzable # M: fn= of step "compute" is a lambda with yield, so the step would get a generator object, not a value, and mypy does not type the lambda as one; return the value itself (a list rather than its items: lambda c: [...])
    .branch(when=lambda c: (yield True), on_true=lambda b: b)  # E: kumiko-unanalyzable # M: when= of step "branch" is a lambda with yield, so the step would get a generator object, not its result; it must return a bool, True to run on_true (False runs on_false, if given); compare or test the value: .branch(when=lambda c: len(c.payload.lines) > 0, on_true=...)
    .for_each("line", over=lambda c: (yield from c.payload.lines), do=lambda b: b)  # E: kumiko-unanalyzable # M: over= of step "for_each" is a lambda with yield, which mypy does not type as a generator; return the items instead, over=lambda c: [...] or a generator expression, over=lambda c: (x for x in ...)
    .return_(lambda c: ok(reveal_type(c.steps["skus"])))  # R: None
)


# A builder assigned back to its own name after a step whose keys are partly unknown (an
# arm typed Any, a step named at run time): mypy narrows the name to a builder whose keys
# are Never, so every key read Never and nothing after it was checked, unreported.
def any_arm(b: Any) -> Any:
    return b


def reassigned() -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    p = p.branch(when=lambda c: True, on_true=any_arm)
    p.return_(lambda c: ok(c.steps["count"].upper()))  # E: kumiko-unanalyzable # M: Cannot tell which step keys exist before "return_": mypy reads them as Never here, as it does for a builder assigned back to its own name (p = p.branch(...)) after a step whose keys are partly unknown (an arm or body typed Any, a step named at run time); assign such a builder to a new name (p2 = p.branch(...))
    p.branch(when=lambda c: True, on_true=any_arm)  # E: kumiko-unanalyzable # M: Cannot tell which step keys exist before "branch": mypy reads them as Never here, as it does for a builder assigned back to its own name (p = p.branch(...)) after a step whose keys are partly unknown (an arm or body typed Any, a step named at run time); assign such a builder to a new name (p2 = p.branch(...))
    q = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    q2 = q.branch(when=lambda c: True, on_true=any_arm)
    q2.return_(lambda c: ok(c.steps["count"].upper()))  # E: attr-defined
    q2.guard(lambda c: reveal_type(c.steps["count"]) > 0, otherwise=lambda c: fail("conflict", "none"))  # R: int


generator_results = (
    shop.pipeline(Order)
    .branch(when=lambda c: True, on_true=lambda b: (yield b))  # E: kumiko-unanalyzable # M: on_true= of step "branch" is a lambda with yield, so the step would get a generator object, not its result; it must return the sub-pipeline b it is given, with its steps added: on_true=lambda b: b.compute(...)
    .guard(lambda c: True, otherwise=lambda c: (yield fail("conflict", "none")))  # E: kumiko-unanalyzable # M: otherwise= of step "guard" is a lambda with yield, so the step would get a generator object, not its result; it must return a Failure (fail(code, message)), which ends the whole pipeline when the condition is false: .guard(..., otherwise=lambda c: fail("unprocessable", "..."))
    .return_(lambda c: (yield ok(1)))  # E: kumiko-unanalyzable # M: The resolver of step "return_" is a lambda with yield, so the step would get a generator object, not its result; it must return ok(value), whose value becomes the handler's result, or a Failure (fail(...)): .return_(lambda c: ok(...))
)
# A yield from: mypy also said the lambda returns None (arg-type), the same mistake.
yielded_from = shop.pipeline(Order).return_(lambda c: (yield from [ok(1)]))  # E: kumiko-unanalyzable # M: The resolver of step "return_" is a lambda with yield, so the step would get a generator object, not its result; it must return ok(value), whose value becomes the handler's result, or a Failure (fail(...)): .return_(lambda c: ok(...))
