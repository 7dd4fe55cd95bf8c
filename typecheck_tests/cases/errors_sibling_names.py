"""Sibling steps of a workflow sharing a name that a wait's, a branch's or a retry's
``name=`` gives: boot refuses them (a stored run's path would be ambiguous), and so does
the plugin, at the later step.  Unnamed siblings of one method, one name in two arms, and
a handler's steps (no stored runs) are fine."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import Order

dup = Feature("dup")

pipeline = (
    dup.workflow_pipeline(Order)
    .compute("quote", lambda c: 1)
    .wait("PT1H", name="cool-off")
    .wait("PT1H")
    .wait("PT1H")
    .wait("PT2H", name="cool-off")  # E: kumiko-duplicate-step  # M: Sibling steps workflow.wait "cool-off" and workflow.wait "cool-off" have the same name "cool-off": a stored run's path would be ambiguous; give the workflow.wait another name=, e.g. "cool-off-2"
    .wait("PT1H", name="quote")  # E: kumiko-duplicate-step  # M: Sibling steps compute "quote" and workflow.wait "quote" have the same name "quote": a stored run's path would be ambiguous; give the workflow.wait another name=, e.g. "quote-2"
    .branch(
        name="vip",
        when=lambda c: True,
        on_true=lambda b: b.wait("PT1H", name="hold").retry(times=2, name="hold", do=lambda r: r),  # E: kumiko-duplicate-step  # M: Sibling steps workflow.wait "hold" and workflow.retry "hold" have the same name "hold": a stored run's path would be ambiguous; give the workflow.retry another name=, e.g. "hold-2"
        on_false=lambda b: b.wait("PT1H", name="hold"),
    )
)
dup.workflow("job", trigger=manual(Order), pipeline=pipeline)

# The step with name= is the earlier one: it is the one to rename (a key has no name=).
keyed_later = dup.workflow_pipeline(Order).wait("PT1H", name="total").compute(
    "total",  # E: kumiko-duplicate-step  # M: Sibling steps workflow.wait "total" and compute "total" have the same name "total": a stored run's path would be ambiguous; give the workflow.wait another name=, e.g. "total-2"
    lambda c: 1,
)

# A loop's item is its name; a retry body's steps are a workflow's too.
looped = (
    dup.workflow_pipeline(Order)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.wait("PT1M"))
    .retry(
        times=2,
        do=lambda b: b.compute("sent", lambda c: 1).branch(when=lambda c: True, on_true=lambda a: a, name="sent"),  # E: kumiko-duplicate-step  # M: Sibling steps compute "sent" and branch "sent" have the same name "sent": a stored run's path would be ambiguous; give the branch another name=, e.g. "sent-2"
        name="line",  # E: kumiko-duplicate-step  # M: Sibling steps for_each "line" and workflow.retry "line" have the same name "line": a stored run's path would be ambiguous; give the workflow.retry another name=, e.g. "line-2"
    )
)

handler = dup.write_handler(
    "h",
    dup.pipeline(Order)
    .compute("x", lambda c: 1)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("y", lambda c: 2), name="x")
    .return_(lambda c: ok(c.steps["x"])),
)
