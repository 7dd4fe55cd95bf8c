"""A query pipeline only reads: every other step is kumiko-read-only, and query and
write pipelines do not register as each other."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from kumiko_typed import Feature, ok

from _models import Order, Product

shop = Feature("shop", requires=["mail.send"])

creates = (
    shop.query_pipeline(Order)
    .create("p", Product, data=lambda c: Product(name="x", stock=1))  # E: kumiko-read-only  # M: Step "create" (aggregate.create) does more than read, and a QueryPipeline only reads (a query runs in a read-only transaction); do it in a write handler built with feature.pipeline(P) (or a workflow), and keep the query to reads, compute, branch, for_each and guard
)

mails = (
    shop.query_pipeline(Order)
    .send_mail(to="a@example.com", subject="s", body="b")  # E: kumiko-read-only  # M: Step "send_mail" (mail.send) does more than read, and a QueryPipeline only reads (a query runs in a read-only transaction); do it in a write handler built with feature.pipeline(P) (or a workflow), and keep the query to reads, compute, branch, for_each and guard
)

waits_in_arm = (
    shop.query_pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.wait(timedelta(hours=1)),  # E: kumiko-read-only  # M: Step "wait" (workflow.wait) does more than read, and a QuerySubPipeline only reads (a query runs in a read-only transaction); do it in a workflow built with feature.workflow_pipeline(P), and keep the query to reads, compute, branch, for_each and guard
    )
)

returns_in_loop = (
    shop.query_pipeline(Order)
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.return_(lambda c: ok(1)),  # E: kumiko-return-in-subpipeline  # M: return_ is not allowed inside a sub-pipeline (QuerySubPipeline: a branch arm or for_each body); end the top-level pipeline with .return_(...) instead, reading what the arm or body set from c.steps; to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))
    )
)

unfinished = shop.query_handler(
    "unfinished",
    shop.query_pipeline(Order).get_one("p", lambda c: select(Product)),  # E: kumiko-no-return  # M: A query handler needs a pipeline built with feature.query_pipeline(P) and ended with .return_(...), got a QueryPipeline that is not ended; end it with .return_(lambda c: ok(...))
)

write_as_query = shop.query_handler(
    "write-as-query",
    shop.pipeline(Order).return_(lambda c: ok(1)),  # E: kumiko-no-return  # M: A query handler needs a pipeline built with feature.query_pipeline(P) and ended with .return_(...), got Finished; build it with feature.query_pipeline(P) (write handlers take feature.pipeline(P))
)

query_as_write = shop.write_handler(
    "query-as-write",
    shop.query_pipeline(Order).return_(lambda c: ok(1)),  # E: kumiko-no-return  # M: A write handler needs a pipeline built with feature.pipeline(P), got a query pipeline (QueryFinished); register it with feature.query_handler(...) and run it with app.query(...)
)
