"""THE control-flow loop: a compiled step sequence (:class:`Block`) and
:func:`run_block`, which handlers and workflow segments alike run — from the start, or
(a resumed workflow run) from inside the step a stored path names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from ._base import Fn, Result, Resume, Step, StepCrash, Suspend
from .compute import Compute

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["EMPTY", "Block", "run_block"]

#: ``(index, name, fn)`` of one ``compute`` step.
Fused: TypeAlias = tuple[int, str, Fn]
#: Runs a fused group: ``runner(values, ctx)``.
Runner: TypeAlias = Callable[[dict[str, object], Any], None]


class Segment:
    """A run of consecutive ``compute`` steps (fused into one generated function), then
    the step after them (``None`` when the group ends the block)."""

    __slots__ = ("fused", "position", "runner", "step", "step_index")

    def __init__(self, fused: tuple[Fused, ...], step_index: int, step: Step | None, position: int) -> None:
        self.fused = fused
        self.runner = _fuse(fused) if fused else None
        self.step_index = step_index
        self.step = step
        #: This segment's index in its block's ``segments``.
        self.position = position

    def failed_index(self, exc: BaseException) -> int:
        """The index of the step that raised ``exc`` while this segment ran."""
        if self.runner is not None:
            code = self.runner.__code__
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code is code:
                    return self.fused[tb.tb_lineno - 2][0]  # line 1 is the def
                tb = tb.tb_next
        return self.step_index


def _fuse(fused: tuple[Fused, ...]) -> Runner:
    """Generate ``values[k0] = f0(ctx); values[k1] = f1(ctx); ...`` as one function.

    As attrs generates ``__init__``: a fused ``compute`` then costs what the same
    line written by hand costs, with no loop or unpacking per step.  A crash is
    mapped back to its step through the line number (see ``failed_index``).
    """
    namespace: dict[str, Any] = {}
    lines = ["def run(values, ctx):"]
    for j, (_index, name, fn) in enumerate(fused):
        namespace[f"f{j}"] = fn
        namespace[f"k{j}"] = name
        lines.append(f"    values[k{j}] = f{j}(ctx)")
    exec(compile("\n".join(lines), f"<kumiko-typed: {len(fused)} fused compute steps>", "exec"), namespace)
    runner: Runner = namespace["run"]
    return runner


class Block:
    """An immutable step sequence, compiled once when it is built.

    Each run of consecutive ``compute`` steps (the hot path) is fused into one
    generated function, so such a step costs one call of its resolver, without a
    dispatch through ``execute``.
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
    values = run.values
    ctx = run.ctx
    trace = run.trace
    outer = None if trace is None or not label else trace.enter(label)
    segment: Segment | None = None
    segments = block.segments
    if resume is not None:  # a path that names no step here is the stored run's fault, not a step's
        segment = block.by_index.get(int(resume.head)) if resume.head.isdigit() else None
        if segment is None or segment.step is None:
            raise LookupError(f"no step to resume at {resume.path}")
    try:
        if resume is not None:
            assert segment is not None and segment.step is not None
            result = segment.step.resume(run, resume.enter())
            if result is not None:
                return result
            segments = segments[segment.position + 1 :]
        for segment in segments:
            runner = segment.runner
            if runner is not None:
                if trace is None:
                    runner(values, ctx)
                else:
                    trace.computes(segment, run, block.steps)
            step = segment.step
            if step is None:
                break
            result = step.execute(run) if trace is None else trace.step(step, segment.step_index, run)
            if result is not None:
                return result
    except (StepCrash, Suspend) as unwinding:
        assert segment is not None
        unwinding.path.insert(0, str(segment.step_index))
        raise
    except Exception as exc:
        assert segment is not None
        i = trace.failed if trace is not None and trace.failed is not None else segment.failed_index(exc)
        raise StepCrash([str(i)], block.steps[i], exc) from exc
    finally:
        if outer is not None:
            trace.prefix = outer  # type: ignore[union-attr]  # set whenever outer is
    return None
