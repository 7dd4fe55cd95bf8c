"""``call_feature``: another feature's handler, run inside the caller's transaction in
a savepoint (its Failure rolls back only its own work), as the caller or — for a
sysadmin — as another user.  The framework's refusal of the called handler's program
(``PROGRAM_REFUSALS``) is the calling step's own refusal, so that a ``retry`` around the
call fails its run at once, as for a refusal of its own steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .. import _interpreter  # a module reference: _interpreter imports this package
from .._access import deny, wrong_payload
from .._ctx import correlation_of
from .._errors import StepCrash, StepRefused
from .._results import Failure, fail
from ._base import Fn, NamedStep, Result, called, resolve

if TYPE_CHECKING:
    from .._feature import WriteHandler
    from .._interpreter import Run

__all__ = ["CallFeature"]


@attrs.frozen(slots=True)
class CallFeature(NamedStep):
    kind = "call_feature"
    handler: WriteHandler[Any, Any]
    payload: Fn
    as_user: object

    def execute(self, run: Run) -> Result:
        as_user = resolve(self.as_user, run, "as_user=")
        if as_user is not None and not run.user.has_role("sysadmin"):
            return fail("access_denied", f'step "{self.name}": as_user needs the sysadmin role')
        handler, user, payload = self.handler, as_user or run.user, called(self.payload, run, "payload=")
        refused = deny(handler, user) or wrong_payload(handler, payload)
        if refused is not None:
            return refused
        call = (handler.name, payload, user, run.now, correlation_of(run))
        nested = _interpreter.start_run(handler.pipeline, run.db, run.registry, call)
        nested.called = True
        try:
            result = _interpreter.run_in_scope(
                handler.pipeline, nested, who=f"handler {handler.name}", nested=True, span_name="kumiko.call_feature"
            )
        except StepCrash as crash:  # the framework refused the program: the same at every try
            cause, what = crash.cause, type(crash.cause).__name__
            raise StepRefused(
                f"the called handler {handler.name} refused: step {crash.where()} raised {what}: {cause}"
            ) from cause
        if isinstance(result, Failure):
            if result is nested.settled_failure():  # as final for the caller
                run.settled = result
            return result
        assert not isinstance(result, BaseException)  # a handler never suspends
        run.values[self.name] = result.data
        return None
