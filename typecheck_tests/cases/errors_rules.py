"""Each kumiko-* error at the line of the offending step."""

from __future__ import annotations

from datetime import timedelta

from kumiko_typed import Feature, ok

from _models import EmailVerified, Order

plain = Feature("plain")
name = "dynamic"

bad_name = plain.pipeline(Order).compute(
    name,  # E: kumiko-step-name  # M: The name of step "compute" must be a string literal, a Final constant or a StrEnum member: the plugin types c.steps["..."] from it; for values named at run time (in a loop, by an f-string), compute one key holding them by name, .compute("totals", lambda c: {n: ... for n in names})
    lambda c: 1,
)

dup = (
    plain.pipeline(Order)
    .compute("x", lambda c: 1)
    .compute("x", lambda c: 2)  # E: kumiko-duplicate-step  # M: Step name "x" is already used in this pipeline; give each step a unique name
)

dup_in_arm = (
    plain.pipeline(Order)
    .compute("x", lambda c: 1)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.compute("x", lambda c: 2),  # E: kumiko-duplicate-step  # M: Step name "x" is already used in this pipeline; give each step a unique name
    )
)

returns_in_arm = (
    plain.pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.return_(lambda c: ok(1)),  # E: kumiko-return-in-subpipeline  # M: return_ is not allowed inside a sub-pipeline (SubPipeline: a branch arm, for_each or retry body); end the top-level pipeline with .return_(...) instead, reading what the arm or body set from c.steps; to stop early with a failure, use .guard(check, otherwise=lambda c: fail(...))
    )
)

mail_undeclared = (
    plain.pipeline(Order)
    .send_mail(to="a@example.com", subject="s", body="b")  # E: kumiko-tier  # M: Step "send_mail" needs the tier-2 capability "mail.send", which this feature does not declare (it declares nothing); add "mail.send" to Feature(..., requires=[...])
)

waits_in_handler = (
    plain.pipeline(Order)
    .wait(timedelta(hours=1))  # E: kumiko-workflow-only  # M: Step "wait" (workflow.wait) suspends a workflow run and is only allowed in a workflow pipeline, not in a Pipeline; build it with feature.workflow_pipeline(P) and register it with feature.workflow(...)
)

event_wait_in_arm = (
    plain.pipeline(Order)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.wait_for_event("v", EmailVerified, key=lambda c: 1, event_key=lambda e: 1, timeout="P1D"),  # E: kumiko-workflow-only  # M: Step "wait_for_event" (workflow.wait_for_event) suspends a workflow run, which a SubPipeline cannot: a write handler's branch arm or loop body, or a retry body (an attempt must not suspend half-way); in a handler, build it with feature.workflow_pipeline(P) and register it with feature.workflow(...); in a retry body, move the step before or after the retry
    )
)

wait_in_retry = plain.workflow_pipeline(Order).retry(
    times=2,
    do=lambda b: b.wait("PT1M"),  # E: kumiko-workflow-only  # M: Step "wait" (workflow.wait) suspends a workflow run, which a SubPipeline cannot: a write handler's branch arm or loop body, or a retry body (an attempt must not suspend half-way); in a handler, build it with feature.workflow_pipeline(P) and register it with feature.workflow(...); in a retry body, move the step before or after the retry
)

typo = Feature("typo", requires=["mail.sned"])  # E: kumiko-tier  # M: "mail.sned" in requires= is not a tier-2 step kind; use one of "call_feature", "mail.send", "webhook.send"
caps = ["mail.send"]
not_literal = Feature("nl", requires=caps)  # E: kumiko-tier  # M: requires= must be a list of string literals (e.g. requires=["mail.send"]), or a constant whose type names them (KINDS: Final = ("mail.send",)), so that the plugin can check each tier-2 step
kind = "mail.send"
not_literal_entry = Feature("nle", requires=[kind])  # E: kumiko-tier  # M: requires= entries must be string literals or Final constants (e.g. requires=["mail.send"]) so that the plugin can check each tier-2 step


DETAILED = True


class Stored:
    """A real duplicate in an ``if`` block of a class body is still reported."""

    base = plain.pipeline(Order).compute("x", lambda c: 1)
    if DETAILED:
        base = base.compute("x", lambda c: 2)  # E: kumiko-duplicate-step  # M: Step name "x" is already used in this pipeline; give each step a unique name
