"""Code half-typed in an editor: one error per mistake, saying what to do; mypy's own error
where it already names the argument, and no follow-on error at each read of the key."""

from __future__ import annotations

from enum import StrEnum

from kumiko_typed import Feature, fail, ok

from _models import Order

shop = Feature("shop")


class Key(StrEnum):
    TOTAL = "total"


def dynamic_name() -> str:
    return "dynamic"


no_name = shop.pipeline(Order).compute()  # E: call-arg
not_a_str = shop.pipeline(Order).compute(1, lambda c: 2)  # E: arg-type
fn_for_name = shop.pipeline(Order).compute(lambda c: 2)  # E: call-arg  # E: arg-type
misspelt_member = shop.pipeline(Order).compute(Key.TOTL, lambda c: 1)  # E: attr-defined
not_yet_defined = shop.pipeline(Order).compute(undefined_name, lambda c: 1)  # E: name-defined
item_not_a_str = shop.pipeline(Order).for_each(1, over=lambda c: c.payload.lines, do=lambda b: b)  # E: arg-type

# The one error is at the name; the key it adds (whatever it is) then reads as Any.
formatted = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute(f"line_{dynamic_name()}", lambda c: 1)  # E: kumiko-step-name  # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    .compute("read", lambda c: c.steps["line_dynamic"])
    .return_(lambda c: ok((c.steps["count"], c.steps["read"])))
)
reveal_type(formatted)  # R: kumiko_typed._finished.Finished[_models.Order, tuple[int, Any]]
item = shop.pipeline(Order).for_each(
    dynamic_name(),  # E: kumiko-step-name  # M: The name of step "for_each" must be a string literal, a Final constant or a StrEnum member: the plugin types c.scope["..."] from it; an item needs no name chosen at run time: name it with a literal, .for_each("item", ...)
    over=lambda c: c.payload.lines,
    do=lambda b: b.compute("sku", lambda c: c.scope["dynamic"]),
)

# Where a refused step belongs: a workflow's arm is no retry body, and a query's suspension
# goes to a workflow (a write handler refuses it too).
returns_in_workflow_arm = shop.workflow_pipeline(Order).branch(
    when=lambda c: True,
    on_true=lambda b: b.return_(lambda c: fail("conflict", "no")),  # E: kumiko-return-in-subpipeline  # M: return_ is not allowed inside a sub-pipeline (WorkflowSubPipeline: a branch arm or for_each body); end the top-level pipeline with .return_(...) instead, reading what the arm or body set from c.steps; to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))
)
retries_in_query = shop.query_pipeline(Order).retry(times=2, do=lambda b: b)  # E: kumiko-read-only  # M: Step "retry" (workflow.retry) does more than read, and a QueryPipeline only reads (a query runs in a read-only transaction); do it in a workflow built with feature.workflow_pipeline(P), and keep the query to reads, compute, branch, for_each and guard

# A handler given no pipeline, or something that is none: mypy's error alone (it was
# followed by "Need type annotation" or by kumiko-no-return saying to end it with return_).
no_pipeline = shop.write_handler("no-pipeline")  # E: call-arg
not_a_pipeline = shop.write_handler("not-a-pipeline", 3)  # E: arg-type
not_a_query = shop.query_handler("not-a-query", 3)  # E: arg-type

# A query pipeline given to write_handler: ending it would not help, the message said to.
query_as_write = shop.write_handler(
    "query-as-write",
    shop.query_pipeline(Order).compute("x", lambda c: 1),  # E: kumiko-no-return  # M: A write handler needs a pipeline built with feature.pipeline(P), got a query pipeline (QueryPipeline); register it with feature.query_handler(...) and run it with app.query(...)
)
