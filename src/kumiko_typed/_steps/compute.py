"""``compute``: a pure function of the context, its value stored under the step's name.

The interpreter fuses consecutive computes into one generated function
(:class:`~kumiko_typed._interpreter.Block`); ``execute`` is what runs otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._base import Fn, NamedStep, Result

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["Compute"]


@attrs.frozen(slots=True)
class Compute(NamedStep):
    kind = "compute"
    fn: Fn

    def execute(self, run: Run) -> Result:
        run.values[self.name] = self.fn(run.ctx)
        return None
