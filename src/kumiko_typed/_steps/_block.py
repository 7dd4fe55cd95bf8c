"""THE control-flow loop: a compiled step sequence (:class:`Block`) and
:func:`run_block`, which handlers and workflow segments alike run — from the start, or
(a resumed workflow run) from inside the step a stored path names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import NoneType
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from .._awaitables import PLAIN, checked
from .._lazy_parts import LateUnreadable
from .._results import Ok
from ._base import Fn, Result, Resume, Step, StepCrash, Suspend
from .compute import Compute, Return, returned

if TYPE_CHECKING:
    from types import CodeType

    from .._interpreter import Run
    from .._observe import Trace

__all__ = ["EMPTY", "NOT_A_STEPS_FAILURE", "Block", "run_block"]

#: What leaves a step as it came, never as the step's failure: the process being stopped
#: (Ctrl-C, ``sys.exit``) and a run's stored value found unreadable (``LateUnreadable``:
#: the worker strands or fails the run).  Anything else a step's code raises fails the
#: step, also a ``BaseException`` such as ``asyncio.CancelledError``: let through, it
#: ended the worker's pass at that run, and at every pass after it.  (A ``GeneratorExit``
#: is thrown into a generator being closed, never into a block: one here is a step's.)
NOT_A_STEPS_FAILURE: Final = (KeyboardInterrupt, SystemExit, LateUnreadable)

#: ``(index, name, fn)`` of one ``compute`` step.
Fused: TypeAlias = tuple[int, str, Fn]
#: Runs a segment: ``runner(run)``, its result as a step's ``execute`` gives it.
Runner: TypeAlias = Callable[[Any], Result]
#: The line of a segment's generated function that runs its first compute.
_FIRST_LINE: Final = 3


class Segment:
    """A run of consecutive ``compute`` steps, then the step after them (``None`` when
    the group ends the block): one generated function runs them all (``runner``)."""

    __slots__ = ("code", "fused", "position", "runner", "step", "step_index")

    def __init__(self, fused: tuple[Fused, ...], step_index: int, step: Step | None, position: int) -> None:
        self.fused = fused
        self.step_index = step_index
        self.step = step
        #: This segment's index in its block's ``segments``.
        self.position = position
        self.runner, self.code = _fuse(fused, step)

    def failed_index(self, exc: BaseException) -> int:
        """The index of the step that raised ``exc`` while this segment ran."""
        if self.code is not None:
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code is self.code:
                    j = tb.tb_lineno - _FIRST_LINE
                    return self.fused[j][0] if 0 <= j < len(self.fused) else self.step_index
                tb = tb.tb_next
        return self.step_index


def _fuse(fused: tuple[Fused, ...], step: Step | None) -> tuple[Runner, CodeType | None]:
    """Generate ``values["k0"] = f0(run); ...; return step(run)`` as one function.

    As attrs generates ``__init__``: a fused ``compute`` then costs what the same
    line written by hand costs, with no loop or dispatch per step, and ``return_``'s
    resolver is called in line.  A crash is mapped back to its step through the line
    number (see ``failed_index``).  A lone step other than ``return_`` is its own
    ``execute``.
    """
    if not fused and step is not None and type(step) is not Return:
        return step.execute, None
    namespace: dict[str, Any] = {"Ok": Ok, "returned": returned}

    def learned(value: object, j: int) -> object:
        """A value of another type than the last one line ``j`` let through: refused if
        it is an awaitable, else its type kept for the line to test first (a type
        :data:`PLAIN` holds: never a generator's, which is told apart per value)."""
        kind = type(value)
        if kind not in PLAIN:
            checked(value, "fn=")
        if kind in PLAIN:
            namespace[f"t{j}"] = kind
        return value

    namespace["learned"] = learned
    lines = ["def run(run):", "    values = run.values"]
    for j, (_index, name, fn) in enumerate(fused):
        namespace[f"f{j}"] = fn
        namespace[f"t{j}"] = NoneType  # no awaitable: the first other type is learned
        # One line per step (failed_index maps lines to steps); an awaitable is refused
        # as Compute.execute refuses it.  A value of the type the line last let through
        # passes by an identity test with no call: what a compute paid before awaitables
        # other than coroutines were refused.
        # A name that is no str (a plain Enum member, which boot refuses) has no repr to
        # write in source: it is looked up, so building the pipeline does not raise first.
        key = repr(name) if type(name) is str else f"n{j}"
        namespace[f"n{j}"] = name
        lines.append(f"    values[{key}] = v if type(v := f{j}(run)) is t{j} else learned(v, {j})")
    if type(step) is Return:  # exactly Return, as Compute below
        namespace["fr"] = step.fn
        lines += ["    result = fr(run)", "    return result if type(result) is Ok else returned(run, result)"]
    elif step is not None:
        namespace["step"] = step.execute
        lines.append("    return step(run)")
    exec(compile("\n".join(lines), f"<kumiko-typed: {len(fused)} fused steps>", "exec"), namespace)
    runner: Runner = namespace["run"]
    return runner, runner.__code__


class Block:
    """An immutable step sequence, compiled once when it is built.

    Each run of consecutive ``compute`` steps (the hot path) is fused with the step
    after it into one generated function, so such a step costs one call of its
    resolver, without a dispatch through ``execute``.
    """

    __slots__ = ("by_index", "segments", "steps")

    def __init__(self, steps: tuple[Step, ...]) -> None:
        self.steps = steps
        segments: list[Segment] = []
        fused: list[Fused] = []
        for i, step in enumerate(steps):
            if type(step) is Compute:  # exactly Compute: a subclass may override execute
                fused.append((i, step.name, step.fn))
            else:
                segments.append(Segment(tuple(fused), i, step, len(segments)))
                fused = []
        if fused:
            segments.append(Segment(tuple(fused), len(steps), None, len(segments)))
        self.segments: tuple[Segment, ...] = tuple(segments)
        #: The segment ending in each non-compute step: where a resumed run re-enters.
        self.by_index: Mapping[int, Segment] = {s.step_index: s for s in segments if s.step is not None}

    def __repr__(self) -> str:
        return f"Block({list(self.steps)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Block) and other.steps == self.steps

    def __hash__(self) -> int:
        return hash(self.steps)


EMPTY: Final = Block(())


def run_block(block: Block, run: Run, resume: Resume | None = None, label: str = "") -> Result:
    """Run ``block`` in order; stop at the first step that ends the pipeline.

    With ``resume`` (a suspended workflow run), start inside the step it names; the
    steps before it ran in an earlier segment.  A crash or a suspension leaving a step
    prepends that step's index to its path.  ``label`` is the block's part of the path
    (``on_true``, ``do/#2``), for the spans of a traced run (``_observe``).
    """
    trace = run.trace
    segments = block.segments
    segment = None if resume is None else _resumed(block, resume)
    outer = None if trace is None or not label else trace.enter(label)
    try:
        if segment is not None:
            assert resume is not None and segment.step is not None
            # A traced run re-enters its step in the step's span, as a fresh run enters
            # it: the span, and the paths below it, are the ones a run that never
            # suspended has.
            at = resume.enter()
            step = segment.step
            result = step.resume(run, at) if trace is None else trace.step(step, segment.step_index, run, at)
            if result is not None:
                return result
            segments = segments[segment.position + 1 :]
        for segment in segments:
            result = segment.runner(run) if trace is None else _traced(trace, segment, run, block.steps)
            if result is not None:
                return result
    except BaseException as exc:
        if isinstance(exc, NOT_A_STEPS_FAILURE):
            raise
        crash = _crash(exc, block, segment, trace)
        if crash is None:
            raise
        raise crash from exc
    finally:
        if outer is not None:
            trace.prefix = outer  # type: ignore[union-attr]  # set whenever outer is
    return None


def _resumed(block: Block, resume: Resume) -> Segment:
    """The segment whose step a resumed run re-enters.  A path that names no step here
    is the stored run's fault, not a step's: ``LookupError``, not a crash."""
    segment = block.by_index.get(int(resume.head)) if resume.head.isdigit() else None
    if segment is None:
        raise LookupError(f"no step to resume at {resume.path}")
    return segment


def _crash(exc: BaseException, block: Block, segment: Segment | None, trace: Trace | None) -> StepCrash | None:
    """``exc`` left ``segment`` of ``block``: a crash or a suspension from inside its
    step goes on with that step's index prepended to its path (``None``: re-raise it);
    any other exception becomes a crash naming the step that raised it."""
    assert segment is not None
    if isinstance(exc, (StepCrash, Suspend)):
        exc.path.insert(0, str(segment.step_index))
        return None
    i = trace.failed if trace is not None and trace.failed is not None else segment.failed_index(exc)
    return StepCrash([str(i)], block.steps[i], exc)


def _traced(trace: Trace, segment: Segment, run: Run, steps: tuple[Step, ...]) -> Result:
    """A segment of a traced run: its steps one by one, each in its span."""
    if segment.fused:
        trace.computes(segment, run, steps)
    step = segment.step
    return None if step is None else trace.step(step, segment.step_index, run)
