"""Waits of a workflow.  ``wait_for_event`` ending the pipeline given to ``feature.workflow``:
its ``event_key=`` is checked against the awaited event in both checkers (pyright solved the
step's type variables from the type ``workflow`` expected of the pipeline first, which was
``WorkflowPipeline[P, Any, Any, Any]``: the event became ``Any`` and a misspelt attribute
passed).  With the plugin: ``key=`` and ``event_key=`` that are never equal, a duration
text the App's boot refuses, a duration given as a number (mypy's own error, said as what to
write), and a retry's literal ``times=`` the boot refuses (test_cases.py checks the arg-type
messages)."""

from __future__ import annotations

from typing import Final

from kumiko_typed import Feature, manual, ok

from _models import EmailVerified, Order

shop = Feature("shop")

last = shop.workflow(
    "last",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order).wait_for_event(
        "verified",
        EmailVerified,
        key=lambda c: c.payload.id,
        event_key=lambda e: reveal_type(e).user_ud,  # E: attr-defined # R: _models.EmailVerified # PE: reportAttributeAccessIssue # PR: EmailVerified
        timeout="P1D",
    ),
)
reveal_type(last)  # R: kumiko_typed._feature.Workflow[_models.Order, None] # PR: Workflow[Order, None]

ended = shop.workflow(
    "ended",
    trigger=manual(Order),
    pipeline=shop.workflow_pipeline(Order)
    .wait_for_event(
        "verified",
        EmailVerified,
        key=lambda c: c.payload.id,
        event_key=lambda e: reveal_type(e).user_ud,  # E: attr-defined # R: _models.EmailVerified # PE: reportAttributeAccessIssue # PR: EmailVerified
        timeout="P1D",
    )
    .return_(lambda c: ok(c.steps["verified"] is not None)),
)
reveal_type(ended)  # R: kumiko_typed._feature.Workflow[_models.Order, bool] # PR: Workflow[Order, bool]

# key= and event_key= returning types no two values of which are equal: the run would match
# no event and time out (the plugin only: pyright and the App cannot tell).
keyed = (
    shop.workflow_pipeline(Order)
    .wait_for_event("by_text", EmailVerified, key=lambda c: c.payload.id, event_key=lambda e: str(e.user_id), timeout="P1D")  # E: arg-type
    .wait_for_event("by_list", EmailVerified, key=lambda c: (c.payload.id,), event_key=lambda e: [e.user_id], timeout="P1D")  # E: arg-type
    # Values that may be equal are no error: 1 and 1.0 match, as do True and 1, a key and None.
    .wait_for_event("number", EmailVerified, key=lambda c: len(c.payload.lines), event_key=lambda e: 1.0, timeout="P1D")
    .wait_for_event("flag", EmailVerified, key=lambda c: True, event_key=lambda e: 1, timeout="P1D")
    .wait_for_event("maybe", EmailVerified, key=lambda c: c.payload.id if c.payload.note else None, event_key=lambda e: e.user_id, timeout="P1D")
)

# A duration text the App's boot refuses, read with the boot's grammar (pyright sees a str).
HOURLY: Final = "1h"
timed = (
    shop.workflow_pipeline(Order)
    .wait("1h")  # E: kumiko-duration  # M: duration= of step "wait": '1h' is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)
    .wait(HOURLY)  # E: kumiko-duration  # M: duration= of step "wait": '1h' is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)
    .wait("P1M")  # E: kumiko-duration  # M: duration= of step "wait": 'P1M' is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)
    .wait(" pt30m ", name="spaced")
    .wait_for_event("late", EmailVerified, key=lambda c: c.payload.id, event_key=lambda e: e.user_id, timeout="7 days")  # E: kumiko-duration  # M: timeout= of step "wait_for_event": '7 days' is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)
    .branch(when=lambda c: True, on_true=lambda b: b.wait("P99999999999D"))  # E: kumiko-duration  # M: duration= of step "wait": 'P99999999999D' is longer than the longest duration, 999999999 days
)

# A duration given as a number: one arg-type error saying what to write (test_cases.py checks
# its words); pyright reports it too, in its own words (and the wait_for_event as matching no overload).
SECONDS: Final = 5
counted = (
    shop.workflow_pipeline(Order)
    .wait(5)  # E: arg-type  # PE: reportArgumentType
    .wait(1.5)  # E: arg-type  # PE: reportArgumentType
    .wait(SECONDS)  # E: arg-type  # PE: reportArgumentType
)
counted_event = shop.workflow_pipeline(Order).wait_for_event("counted", EmailVerified, key=lambda c: c.payload.id, event_key=lambda e: e.user_id, timeout=30)  # E: arg-type  # PE: reportArgumentType  # PE: reportCallIssue

# A retry's times= the App's boot refuses, read from a literal or a Final constant (pyright
# sees an int, a bool being one, and says nothing); a count computed at run time is boot's.
NEVER: Final = 0
attempts = len("abc")
retried = (
    shop.workflow_pipeline(Order)
    .retry(times=0, do=lambda b: b)  # E: kumiko-duration  # M: retry(times=0) must try at least once
    .retry(times=-2, do=lambda b: b)  # E: kumiko-duration  # M: retry(times=-2) must try at least once
    .retry(times=True, do=lambda b: b)  # E: kumiko-duration  # M: retry's times must be a whole number of attempts, not bool
    .retry(times=NEVER, do=lambda b: b)  # E: kumiko-duration  # M: retry(times=0) must try at least once
    .retry(times=attempts, do=lambda b: b)
    .retry(times=1, do=lambda b: b)
)

# A bool, or a negative number, given as a duration: the same arg-type error, which says why
# no number is mended by reading it as seconds (test_cases.py checks its words).
NEGATIVE: Final = -3
refused_numbers = (
    shop.workflow_pipeline(Order)
    .wait(True)  # E: arg-type  # PE: reportArgumentType
    .wait(-5)  # E: arg-type  # PE: reportArgumentType
    .wait(-1.5)  # E: arg-type  # PE: reportArgumentType
    .wait(NEGATIVE)  # E: arg-type  # PE: reportArgumentType
)
refused_timeout = shop.workflow_pipeline(Order).wait_for_event("neg", EmailVerified, key=lambda c: c.payload.id, event_key=lambda e: e.user_id, timeout=-5)  # E: arg-type  # PE: reportArgumentType  # PE: reportCallIssue

# A negative timedelta written with number literals, which the boot refuses in the same words
# (pyright sees a timedelta); one computed at run time is the boot's.
from datetime import timedelta  # noqa: E402

backwards = (
    shop.workflow_pipeline(Order)
    .wait(timedelta(seconds=-1))  # E: kumiko-duration  # M: duration= of step "wait" must not be negative, got -1 seconds
    .wait(timedelta(-1, hours=2))  # E: kumiko-duration  # M: duration= of step "wait" must not be negative, got -79200 seconds
    .wait(timedelta(0))
    .wait(timedelta(seconds=NEGATIVE))
    .wait_for_event("neg", EmailVerified, key=lambda c: c.payload.id, event_key=lambda e: e.user_id, timeout=timedelta(days=-1))  # E: kumiko-duration  # M: timeout= of step "wait_for_event" must not be negative, got -86400 seconds
)
