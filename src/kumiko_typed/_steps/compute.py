"""``compute`` and ``return_``: the two steps that only call a resolver.

A block fuses them into the generated function of a segment
(:class:`~kumiko_typed._steps._block.Block`): consecutive computes, then the step
after them, ``return_``'s resolver written in line.  ``execute`` is what runs when a
traced run takes the steps one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._awaitables import checked
from .._errors import StepRefused
from .._results import Failure, Ok
from ._base import Fn, NamedStep, Result, Step, called

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["Compute", "Return", "returned"]


@attrs.frozen(slots=True)
class Compute(NamedStep):
    kind = "compute"
    fn: Fn

    def execute(self, run: Run) -> Result:
        run.values[self.name] = called(self.fn, run, "fn=")
        return None


@attrs.frozen(slots=True)
class Return(Step):
    kind = "return"
    fn: Fn

    def execute(self, run: Run) -> Result:
        return returned(run, called(self.fn, run, "fn="))


def returned(run: Run, result: object) -> Ok[object] | Failure:
    """``return_``'s result, refused unless it is an ``Ok`` or a ``Failure`` (an awaitable
    with the refusal that says why, see :func:`checked`).  A ``Failure`` is the run's
    own answer (:meth:`~kumiko_typed._interpreter.Run.answered`)."""
    if isinstance(result, Ok):
        return result
    if isinstance(result, Failure):
        return run.answered(result)
    checked(result, "fn=")
    raise StepRefused(f"return_ must give ok(...) or fail(...), not {type(result).__name__}")
