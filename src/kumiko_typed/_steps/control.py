"""Control flow: ``branch``, ``for_each`` and ``guard`` (``return_`` is in ``compute``, fused with it).

The same code runs a handler and a workflow segment; a resumed workflow run re-enters
a branch arm or a loop iteration through ``resume`` (its arm and iteration are parts of
the stored path), where a handler only ever calls ``execute``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._errors import StepRefused
from .._results import Failure
from ._base import Fn, Result, Resume, Step, StepCrash, Suspend, called
from ._block import Block

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .._interpreter import Run

__all__ = ["Branch", "ForEach", "Guard"]


@attrs.frozen(slots=True)
class Branch(Step):
    kind = "branch"
    when: Fn
    on_true: Block
    on_false: Block
    name: str | None = None

    @property
    def step_name(self) -> str | None:
        return self.name

    def children(self) -> Iterable[tuple[str, Block]]:
        return (("on_true", self.on_true), ("on_false", self.on_false))

    def execute(self, run: Run) -> Result:
        if called(self.when, run, "when="):
            return self._arm(run, "on_true", self.on_true, None)
        return self._arm(run, "on_false", self.on_false, None)

    def resume(self, run: Run, at: Resume) -> Result:
        arm = at.head
        return self._arm(run, arm, self.on_true if arm == "on_true" else self.on_false, at.enter())

    @staticmethod
    def _arm(run: Run, arm: str, block: Block, resume: Resume | None) -> Result:
        try:
            return block.run(run, resume, arm)
        except (StepCrash, Suspend) as unwinding:
            unwinding.path.insert(0, arm)
            raise


@attrs.frozen(slots=True)
class ForEach(Step):
    """The body once per item, with the item in ``c.scope``.  A run suspended inside
    the body stores the items (they are not computed again) and the value the item's
    scope key shadowed, so the loop goes on at the same iteration when it resumes; and
    what ``over=`` returned (``over``), by which the engine finds a loop over a step value
    whose items it need not store twice.  A resumed loop's items may be a ``PagedItems``
    (``_lazy_parts``), read as reached."""

    kind = "for_each"
    item: str
    over: Fn
    body: Block

    @property
    def step_name(self) -> str | None:
        return self.item

    def children(self) -> Iterable[tuple[str, Block]]:
        return (("do", self.body),)

    def execute(self, run: Run) -> Result:
        scope = run.open_scope()
        shadows = self.item in scope
        over = called(self.over, run, "over=")
        try:
            items = iter(over)
        except TypeError:  # else "raised TypeError", the run's error saying no more
            wanted = "an iterable such as a list, a tuple or a set"
            raise StepRefused(f"for_each {self.item!r}: over= returned {type(over).__name__}, not {wanted}") from None
        return self._iterate(run, list(items), 0, None, shadows, scope.get(self.item), over)

    def resume(self, run: Run, at: Resume) -> Result:
        segment = run.workflow_segment()
        loop = segment.loops[at.entered()] if segment is not None else None
        if loop is None or at.head != "do":
            raise LookupError(f"no stored loop at {at.path}")
        first = int(at.enter().head[1:])
        return self._iterate(run, loop["items"], first, at.enter(2), loop["shadows"], loop["shadowed"], None)

    def _iterate(
        self,
        run: Run,
        items: Sequence[Any],
        first: int,
        resume: Resume | None,
        shadows: bool,
        shadowed: object,
        over: object,
    ) -> Result:
        scope = run.open_scope()
        result: Result = None
        for n in range(first, len(items)):
            scope[self.item] = items[n]
            try:
                label = f"do/#{n}" if run.trace is not None else ""  # the path part only a traced run reads
                result = self.body.run(run, resume if n == first else None, label)
            except Suspend as suspend:
                suspend.path[0:0] = ["do", f"#{n}"]
                record = {"items": items, "shadows": shadows, "shadowed": shadowed, "over": over}
                suspend.loops.append((len(suspend.path), record))
                raise  # the scope is stored as it is, the item in it
            except StepCrash as crash:
                crash.path[0:0] = ["do", f"#{n}"]
                _unshadow(scope, self.item, shadows, shadowed)
                raise
            if result is not None:
                break
        _unshadow(scope, self.item, shadows, shadowed)
        return result


def _unshadow(scope: dict[str, object], item: str, shadows: bool, shadowed: object) -> None:
    if shadows:
        scope[item] = shadowed
    else:
        scope.pop(item, None)


@attrs.frozen(slots=True)
class Guard(Step):
    """A business refusal without a step key: ``otherwise``'s Failure is returned like
    ``return_``'s, so it unwinds every enclosing branch arm and loop body and ends the
    handler (rolled back) or the workflow run."""

    kind = "guard"
    when: Fn
    otherwise: Fn

    def execute(self, run: Run) -> Result:
        if called(self.when, run, "when="):
            return None
        failure = called(self.otherwise, run, "otherwise=")
        if not isinstance(failure, Failure):
            raise StepRefused(f"guard's otherwise= must give fail(...), not {type(failure).__name__}")
        run.refused = failure
        return run.answered(failure)
