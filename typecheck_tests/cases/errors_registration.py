"""Registering a pipeline: one feature's pipeline on another feature; a handler without return_."""

from __future__ import annotations

from kumiko_typed import Feature, manual, ok

from _models import Order, SignedUp

plain = Feature("plain")
mailer = Feature("mailer", requires=["mail.send"])

foreign = plain.write_handler(
    "h",
    mailer.pipeline(Order).compute("a", lambda c: 1).return_(lambda c: ok(c.steps["a"])),  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.pipeline(...) but is registered on plain; build it with plain.pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
)
foreign_workflow = plain.workflow(
    "wf",
    trigger=manual(SignedUp),
    pipeline=mailer.workflow_pipeline(SignedUp).compute("a", lambda c: 1),  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.workflow_pipeline(...) but is registered on plain; build it with plain.workflow_pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
)
foreign_query = plain.query_handler(
    "q",
    mailer.query_pipeline(Order).return_(lambda c: ok(1)),  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.query_pipeline(...) but is registered on plain; build it with plain.query_pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
)
no_return = plain.write_handler("x", plain.pipeline(Order).compute("a", lambda c: 1))  # E: kumiko-no-return  # M: A write handler needs a pipeline built with feature.pipeline(P) and ended with .return_(...), got Pipeline; end it with .return_(lambda c: ok(...))
workflow_as_handler = plain.write_handler("w", plain.workflow_pipeline(Order).return_(lambda c: ok(1)))  # E: kumiko-no-return  # M: A write handler needs a pipeline built with feature.pipeline(P), got a workflow pipeline (WorkflowFinished); build it with feature.pipeline(P), or register it with feature.workflow(name, trigger=..., pipeline=...)
unended_workflow = plain.write_handler("u", plain.workflow_pipeline(Order).compute("a", lambda c: 1))  # E: kumiko-no-return  # M: A write handler needs a pipeline built with feature.pipeline(P), got a workflow pipeline (WorkflowPipeline); build it with feature.pipeline(P), or register it with feature.workflow(name, trigger=..., pipeline=...)
alias = plain  # the same feature under another name: not foreign
aliased = alias.write_handler("aliased", plain.pipeline(Order).return_(lambda c: ok(1)))


# A pipeline kept in a variable first (or extended, or built in a function) is told apart
# too: its type carries the feature it was started from. It passed, left to the App's boot.
held = mailer.pipeline(Order).compute("a", lambda c: 1)
held_handler = plain.write_handler("held", held.return_(lambda c: ok(c.steps["a"])))  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.pipeline(...) but is registered on plain; build it with plain.pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
ended = held.return_(lambda c: ok(1))
held_ended = plain.write_handler("held-ended", ended)  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.pipeline(...) but is registered on plain; build it with plain.pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
waiting = mailer.workflow_pipeline(SignedUp).compute("a", lambda c: 1)
held_workflow = plain.workflow("held-wf", trigger=manual(SignedUp), pipeline=waiting)  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.workflow_pipeline(...) but is registered on plain; build it with plain.workflow_pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
queried = mailer.query_pipeline(Order).return_(lambda c: ok(1))
held_query = plain.query_handler("held-q", queried)  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.query_pipeline(...) but is registered on plain; build it with plain.query_pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
anonymous = Feature("billing").write_handler("anon", ended)  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.pipeline(...) but is registered on billing; build it with billing.pipeline(...) (its steps and capabilities are that feature's), or register it on mailer
own_held = plain.pipeline(Order).compute("a", lambda c: 1)
plain.write_handler("own-held", own_held.return_(lambda c: ok(c.steps["a"])))


def build() -> None:
    steps = mailer.pipeline(Order)
    plain.write_handler("in-function", steps.return_(lambda c: ok(1)))  # E: kumiko-foreign-pipeline  # M: This pipeline was built with mailer.pipeline(...) but is registered on plain; build it with plain.pipeline(...) (its steps and capabilities are that feature's), or register it on mailer


def register(feature: Feature[str]) -> None:
    """Any feature may be passed: the App's boot tells whether it is the pipeline's."""
    feature.write_handler("given", plain.pipeline(Order).return_(lambda c: ok(1)))


own = plain.write_handler("own", plain.pipeline(Order).return_(lambda c: ok(1)))
reveal_type(own)  # R: kumiko_typed._feature.WriteHandler[_models.Order, int]
