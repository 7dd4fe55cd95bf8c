"""A subclass of Feature gets Feature's checks: a key read in a first step, a handler
without return_, a pipeline of another feature, an undeclared tier-2 step, a trigger of
another payload."""

from __future__ import annotations

from typing import Any, TypeVar

from kumiko_typed import Feature, manual, ok

from _models import Order, SignedUp

C = TypeVar("C", bound=str, covariant=True)


class Team(Feature[C]):
    pass


class Plain(Feature[Any]):
    pass


team = Team("team", requires=["mail.send"])
sales = Team("sales")
plain = Plain("plain")

first = team.pipeline(Order).compute("a", lambda c: c.steps["count"])  # E: misc
unended = plain.write_handler("unended", plain.pipeline(Order).compute("a", lambda c: 1))  # E: kumiko-no-return  # M: A write handler needs a pipeline built with feature.pipeline(P) and ended with .return_(...), got Pipeline; end it with .return_(lambda c: ok(...))
foreign = sales.write_handler("foreign", team.pipeline(Order).return_(lambda c: ok(1)))  # E: kumiko-foreign-pipeline  # M: This pipeline was built with team.pipeline(...) but is registered on sales; build it with sales.pipeline(...) (its steps and capabilities are that feature's), or register it on team
hook = team.pipeline(Order).send_webhook(url="https://crm.example/hook")  # E: kumiko-tier  # M: Step "send_webhook" needs the tier-2 capability "webhook.send", which this feature does not declare (it declares "mail.send"); add "webhook.send" to Feature(..., requires=[...])
flow = plain.workflow("flow", trigger=manual(SignedUp), pipeline=plain.workflow_pipeline(Order))  # E: kumiko-trigger-payload  # M: The trigger gives SignedUp but the workflow pipeline takes Order; build it with feature.workflow_pipeline(SignedUp)
