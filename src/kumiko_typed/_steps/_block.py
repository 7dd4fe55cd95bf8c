"""THE control flow of a step sequence: a compiled :class:`Block`, whose generated
``run`` function handlers and workflow segments alike call — from the start, or (a
resumed workflow run) from inside the step a stored path names.
"""

from __future__ import annotations

from types import NoneType
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._awaitables import PLAIN, checked
from .._errors import CaughtDatabaseError
from .._lazy_parts import LateUnreadable
from .._results import Ok
from .._swallowed import BLOCK_FILES, SEEN, caught, escaped
from ._base import Result, Resume, Step, StepCrash, Suspend
from .compute import Compute, Return, returned

if TYPE_CHECKING:
    from types import CodeType

    from .._interpreter import Run

__all__ = ["EMPTY", "NOT_A_STEPS_FAILURE", "Block", "BlockRunner"]

#: What leaves a step as it came, never as the step's failure: the process being stopped
#: (Ctrl-C, ``sys.exit``) and a run's stored value found unreadable (``LateUnreadable``:
#: the worker strands or fails the run).  Anything else a step's code raises fails the
#: step, also a ``BaseException`` such as ``asyncio.CancelledError``: let through, it
#: ended the worker's pass at that run, and at every pass after it.  (A ``GeneratorExit``
#: is thrown into a generator being closed, never into a block: one here is a step's.)
NOT_A_STEPS_FAILURE: Final = (KeyboardInterrupt, SystemExit, LateUnreadable)


class BlockRunner(Protocol):
    """A block's ``run``: ``block.run(run, resume, label)``."""

    def __call__(self, run: Run, resume: Resume | None = None, label: str = "", /) -> Result: ...


class Block:
    """An immutable step sequence, compiled once when it is built into one generated
    function, ``run(run, resume=None, label="")``, that runs it in order and stops at
    the first step that ends the pipeline.

    A fresh, untraced run (every handler's, the hot path) takes the generated lines: a
    ``compute`` is its resolver called and stored in line, a ``return_``'s resolver is
    called in line, any other step is its ``execute``; no loop, dispatch or Python call
    per step, nor a call of a walker around them.  A resumed workflow run, which starts
    inside the step its stored path names, and a traced run, which runs each step in
    its span, are walked step by step (:func:`_walk`).  A crash or a suspension leaving
    a step prepends that step's index to its path; ``label`` is the block's part of the
    path (``on_true``, ``do/#2``), for the spans of a traced run (``_observe``).
    """

    __slots__ = ("code", "lines", "run", "steps")

    def __init__(self, steps: tuple[Step, ...]) -> None:
        self.steps = steps
        self.run: BlockRunner
        #: The generated function's code, and the step index of each line of its body.
        self.code: CodeType
        self.lines: dict[int, int]
        self.run, self.code, self.lines = _generate(self)

    def failed_index(self, exc: BaseException) -> int:
        """The index of the step that raised ``exc`` while ``run`` ran it in line."""
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is self.code:
                return self.lines[tb.tb_lineno]
            tb = tb.tb_next
        raise AssertionError("a crash of a block's generated function has the function in its traceback")

    def __repr__(self) -> str:
        return f"Block({list(self.steps)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Block) and other.steps == self.steps

    def __hash__(self) -> int:
        return hash(self.steps)


#: The lines of a generated ``run`` before the first of its steps (see :func:`_generate`).
_HEAD: Final = (
    'def run(run, resume=None, label="", /):',
    "    if resume is not None or run.trace is not None:",
    "        return walk(block, run, resume, label)",
    "    values = run.values",
    "    try:",
)
_TAIL: Final = (
    "    except BaseException as exc:",
    "        if (crash := crashed(exc, block, run, seen_at)) is None:",
    "            raise",
    "        raise crash from exc",
    "    return None",
)
#: Before the first of consecutive fused lines (a ``compute``'s or ``return_``'s resolver
#: written in line): the number of the last failed statement (``_swallowed``), which the
#: check after the last of them compares.
_SEEN_AT: Final = "        seen_at = seen.n"
_CHECK: Final = ("        if seen.n is not seen_at:", "            caught(run, seen_at)")


def _generate(block: Block) -> tuple[BlockRunner, CodeType, dict[int, int]]:
    """Generate ``block``'s ``run``: per step one line (a ``return_`` two), as attrs
    generates ``__init__``.  A fused ``compute`` then costs what the same line written
    by hand costs.  A crash is mapped back to its step through the line number (see
    ``Block.failed_index``)."""
    namespace: dict[str, Any] = {
        "Ok": Ok,
        "returned": returned,
        "walk": _walk,
        "crashed": _crashed,
        "block": block,
        "seen": SEEN,
        "caught": caught,
    }

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
    lines = list(_HEAD)
    at_line: dict[int, int] = {}

    def add(index: int, line: str) -> None:
        lines.append(line)
        at_line[len(lines)] = index  # line numbers count from 1

    last = len(block.steps) - 1
    # A resolver that catches its statement's database error and goes on fails its step
    # (``_swallowed``): ``seen_at`` is read before each run of consecutive fused lines, and
    # compared once after the run's last, so a run of computes pays one read and one test,
    # whatever its length.  Only resolvers run between the two: a statement of the run's
    # that failed meanwhile was one of theirs (the note says whose line).  A block of steps
    # only reads nothing: its except line passes ``None``.
    fused = [type(step) in (Compute, Return) for step in block.steps]
    if any(fused):  # before the try: its except line reads it
        lines.insert(len(_HEAD) - 1, "    seen_at = seen.n" if fused[0] else "    seen_at = None")
    for j, step in enumerate(block.steps):
        if fused[j] and j > 0 and not fused[j - 1]:
            add(j, _SEEN_AT)
        if type(step) is Compute:  # exactly Compute: a subclass may override execute
            namespace[f"f{j}"] = step.fn
            namespace[f"t{j}"] = NoneType  # no awaitable: the first other type is learned
            # An awaitable is refused as Compute.execute refuses it.  A value of the type
            # the line last let through passes by an identity test with no call: what a
            # compute paid before awaitables other than coroutines were refused.  A name
            # that is no str (a plain Enum member, which boot refuses) has no repr to
            # write in source: it is looked up, so building the pipeline does not raise first.
            key = repr(step.name) if type(step.name) is str else f"n{j}"
            namespace[f"n{j}"] = step.name
            add(j, f"        values[{key}] = v if type(v := f{j}(run)) is t{j} else learned(v, {j})")
            if j == last or not fused[j + 1]:
                for line in _CHECK:
                    add(j, line)
        elif type(step) is Return:  # exactly Return, as Compute above
            namespace[f"f{j}"] = step.fn
            add(j, f"        result = f{j}(run)")
            for line in _CHECK:
                add(j, line)
            add(j, "        return result if type(result) is Ok else returned(run, result)")
        else:
            namespace[f"s{j}"] = step.execute
            if j == last:
                add(j, f"        return s{j}(run)")
            else:
                add(j, f"        if (result := s{j}(run)) is not None:")
                add(j, "            return result")
    if not block.steps:
        lines.append("        pass")
    lines += _TAIL if any(fused) else [line.replace("seen_at", "None") for line in _TAIL]
    source = "\n".join(lines)
    exec(compile(source, f"{BLOCK_FILES}{len(block.steps)} steps>", "exec"), namespace)
    runner = namespace["run"]
    return runner, runner.__code__, at_line


def _walk(block: Block, run: Run, resume: Resume | None, label: str) -> Result:
    """``block`` step by step: a resumed run from inside the step ``resume`` names (the
    steps before it ran in an earlier segment), a traced run each step in its span."""
    trace = run.trace
    steps = block.steps
    outer = None if trace is None or not label else trace.enter(label)
    i = 0
    try:
        if resume is not None:
            i = _resumed(block, resume)
            # A traced run re-enters its step in the step's span, as a fresh run enters
            # it: the span, and the paths below it, are the ones a run that never
            # suspended has.
            at = resume.enter()
            step = steps[i]
            result = step.resume(run, at) if trace is None else trace.step(step, i, run, at)
            if result is not None:
                return result
            i += 1
        while i < len(steps):
            step = steps[i]
            result = step.execute(run) if trace is None else trace.step(step, i, run)
            if result is not None:
                return result
            i += 1
    except BaseException as exc:
        if isinstance(exc, NOT_A_STEPS_FAILURE):
            raise
        crash = _crash(exc, steps, i)
        if crash is None:
            raise
        raise crash from exc
    finally:
        if outer is not None:
            trace.prefix = outer  # type: ignore[union-attr]  # set whenever outer is
    return None


def _resumed(block: Block, resume: Resume) -> int:
    """The index of the step a resumed run re-enters.  A path that names no step here
    that can hold a suspension is the stored run's fault, not a step's:
    ``LookupError``, not a crash."""
    head = resume.head
    i = int(head) if head.isdigit() else len(block.steps)
    if i >= len(block.steps) or type(block.steps[i]) is Compute:
        raise LookupError(f"no step to resume at {resume.path}")
    return i


def _crashed(exc: BaseException, block: Block, run: Run, seen_at: int | None) -> StepCrash | None:
    """What the generated ``run`` raises for ``exc`` (``None``: ``exc`` itself).
    ``seen_at``: :data:`SEEN` before the fused lines that ran last (``None``: the block
    has none), for an exception that left a resolver of theirs after one of them caught
    a database error and went on: that resolver's step fails, with that error."""
    if isinstance(exc, NOT_A_STEPS_FAILURE):
        return None
    i = block.failed_index(exc)
    if seen_at is not None and SEEN.n is not seen_at and type(block.steps[i]) in (Compute, Return):
        exc = escaped(run, seen_at, exc) or exc
    if isinstance(exc, CaughtDatabaseError) and exc.at is not None and exc.at[0] is block.code:
        i = block.lines.get(exc.at[1], i)  # the line that caught it, not the check after its run
    return _crash(exc, block.steps, i)


def _crash(exc: BaseException, steps: tuple[Step, ...], i: int) -> StepCrash | None:
    """``exc`` left step ``i`` of ``steps``: a crash or a suspension from inside the
    step goes on with the step's index prepended to its path (``None``: re-raise it);
    any other exception becomes a crash naming the step."""
    if isinstance(exc, (StepCrash, Suspend)):
        exc.path.insert(0, str(i))
        return None
    return StepCrash([str(i)], steps[i], exc)


EMPTY: Final = Block(())
