"""What every step shares: the base classes, the two exceptions that unwind a run
carrying the path they passed through, the :class:`Path` value, and THE walk of the
step tree (boot checks, the graph, the fingerprint and path lookup all use it).

A path names a step inside a program: one part per level, separated by the label of
the sub-pipeline it enters.  A running program counts by index — ``3/on_true/1`` (second
step of the true arm of step 3), ``2/do/#4/0`` (first body step of the loop at step 2,
in its fifth iteration); a stored run names each step (:func:`address`) —
``vip/on_true/cool-off``, ``line/do/#4/@wait`` — so a changed definition finds it by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote

import attrs

from .._awaitables import PLAIN, checked
from .._errors import StepCrash, Suspend
from .._results import Failure, Ok
from .._rules import BUILDERS, RETRY_BODY_BUILDER, RULES_BY_KIND
from .._swallowed import SEEN, caught, escaped

if TYPE_CHECKING:
    from .._interpreter import Run
    from ._block import Block

__all__ = [
    "OWN_FIX",
    "Fn",
    "Located",
    "NamedStep",
    "Path",
    "Result",
    "Resume",
    "Step",
    "StepCrash",
    "Suspend",
    "address",
    "called",
    "locate",
    "name_part",
    "part_label",
    "resolve",
    "step_at",
    "sub_keys",
    "unnamed_fix",
    "unnamed_siblings",
    "walk",
]

Fn = Callable[[Any], Any]
#: What running a step gives: ``None`` to go on, or the result that ends the pipeline.
Result = Ok[object] | Failure | None


@attrs.frozen(slots=True)
class Path:
    """A position in a program's step tree; ``str(path)`` is its stored form."""

    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Path:
        if not text:
            raise ValueError("an empty step path")
        return cls(tuple(text.split("/")))

    def __str__(self) -> str:
        return "/".join(self.parts)


@attrs.frozen(slots=True)
class Resume:
    """Where a resumed run goes on: ``path`` with its first ``at`` parts already entered."""

    path: Path
    at: int = 0

    @property
    def head(self) -> str:
        return self.path.parts[self.at]

    @property
    def done(self) -> bool:
        """Whether the step that suspended the run is reached (nothing left to enter)."""
        return self.at >= len(self.path.parts)

    def entered(self) -> str:
        """The stored form of the path up to (not including) the head."""
        return "/".join(self.path.parts[: self.at])

    def enter(self, count: int = 1) -> Resume:
        return Resume(self.path, self.at + count)


def resolve(value: object, run: Run, argument: str) -> Any:
    """A plain value or a resolver (DESIGN §3.3: fixed-type arguments accept both)."""
    return called(value, run, argument) if callable(value) else value


def called(fn: Fn, run: object, argument: str) -> Any:
    """``fn(run)``, refused if it gives an awaitable or an async generator (see
    :mod:`~kumiko_typed._awaitables`), or if it caught a database error from its own
    statement and went on (:mod:`~kumiko_typed._swallowed`; a block's fused lines check
    the same).  ``argument`` names the step's argument ``fn`` was given as (``when=``)."""
    seen_at = SEEN.n
    try:
        value = fn(run)
    except BaseException as exc:
        if SEEN.n is not seen_at and (swallowed := escaped(run, seen_at, exc)) is not None:
            raise swallowed from swallowed.error  # the one leaving is its context
        raise
    if SEEN.n is not seen_at:
        caught(run, seen_at)
    if type(value) in PLAIN:  # one set lookup: this runs for every resolver
        return value
    return checked(value, argument)


@attrs.frozen(slots=True)
class Step:
    kind: ClassVar[str]

    @property
    def step_name(self) -> str | None:
        return None

    def describe(self) -> str:
        name = self.step_name
        return f'{self.kind} "{name}"' if name is not None else self.kind

    def children(self) -> Iterable[tuple[str, Block]]:
        """Sub-pipelines as (path label, block): the one definition of the tree's shape."""
        return ()

    def execute(self, run: Run) -> Result:
        raise NotImplementedError(f"{type(self).__name__} does not define execute()")

    def resume(self, run: Run, at: Resume) -> Result:
        """Go on inside this step where a suspended run stopped (``at.head`` is the
        first part below this step).  Only steps that can hold a suspension have it."""
        raise LookupError(f"a run cannot be suspended inside a {self.kind} step")


def _plain_name(name: object) -> object:
    """A ``StrEnum`` member (any ``str`` subclass) as the plain string of its value: the
    key is the value either way, and generated code and stored runs need a real ``str``.
    Anything else is left for boot validation to refuse."""
    return str.__str__(name) if isinstance(name, str) else name


@attrs.frozen(slots=True)
class NamedStep(Step):
    name: str = attrs.field(converter=_plain_name)

    @property
    def step_name(self) -> str | None:
        return self.name


#: How a stranded run's reason that says its own fix ends (``check --against`` then does
#: not add its general one: the fix said twice).
OWN_FIX = ", or cancel the run"


#: The path part of a loop iteration or retry attempt (``#4``) follows the label.
def _is_iteration(part: str) -> bool:
    return part.startswith("#")


def _bad_iteration(path: Path) -> str | None:
    """The first part of ``path`` that looks like an iteration but is no ``#`` and a
    number (a step name never starts with ``#``: :func:`name_part` escapes it).  A
    stored path of another origin must strand its run, not fail it where it resumes."""
    return next((p for p in path.parts if _is_iteration(p) and not (p[1:].isascii() and p[1:].isdigit())), None)


def walk(steps: Sequence[Step], builder: str, prefix: str = "") -> Iterator[tuple[str, Step, str]]:
    """Every step with its path and the builder it was written in, depth first."""
    for i, step in enumerate(steps):
        path = f"{prefix}{i}"
        yield path, step, builder
        inner = RETRY_BODY_BUILDER if step.kind == "workflow.retry" else BUILDERS[builder].nested
        for label, child in step.children():
            yield from walk(child.steps, inner, f"{path}/{label}/")


def address(steps: Sequence[Step], i: int) -> str:
    """The stored path part of ``steps[i]``: its name (escaped), or ``@`` and its builder
    method for a step without one; ``~2``, ``~3`` for a later sibling with the same part.
    Steps are found by it, not by index, so inserting or removing others keeps it."""
    step = steps[i]
    base = _part(step)
    same = sum(1 for other in steps[:i] if _part(other) == base)
    return base if same == 0 else f"{base}~{same + 1}"


def unnamed_siblings(at: Located) -> tuple[int | None, ...]:
    """Per level of a located path, how many steps of its block share the part of its
    step when that step has no name (``@wait`` and ``@wait~2``: 2), else ``None``.  A run
    stores it with its path: unnamed siblings are found by their order, so one added or
    removed beside them makes ``@wait`` name another step; the count tells the run so
    (:meth:`~kumiko_typed._compat.Compat.plan`)."""
    out: list[int | None] = []
    for block, i in at.levels:
        base = _part(block[i])
        out.append(sum(1 for other in block if _part(other) == base) if base.startswith("@") else None)
    return tuple(out)


def unnamed_fix(part: str) -> str:
    """What to do about a run an unnamed step's order no longer finds (``part``: ``@wait~2``)."""
    method = part_label(part).partition("~")[0]
    return (
        f"unnamed steps are found by their order ({method}, {method}~2), so one added or removed beside them"
        f" makes a stored path name another; deploy the workflow with its unnamed {method[1:]} steps as they were,"
        f' or give them name= and map the old places to the names (renamed={{"{part_label(part)}": ...}})' + OWN_FIX
    )


def _part(step: Step) -> str:
    name = step.step_name
    if name is None:
        rule = RULES_BY_KIND.get(step.kind)
        return "@" + (rule.method if rule is not None else step.kind)
    return name_part(name)


def name_part(name: str) -> str:
    """A step name as a path part: ``%``, ``/`` and ``~`` escaped, and a leading ``@`` or ``#``."""
    text = name.replace("%", "%25").replace("/", "%2F").replace("~", "%7E")
    return "%" + format(ord(text[0]), "02X") + text[1:] if text[:1] in ("@", "#") else text


def part_label(part: str) -> str:
    """A stored part as a person reads it: the step's name, or its method (``@wait``)."""
    return unquote(part)


@attrs.frozen
class Located:
    """Where a path leads: the step, the path by index and by name, and each level's
    (block, index of the path's step in it), outermost first."""

    step: Step
    by_index: Path
    by_name: Path
    levels: tuple[tuple[Sequence[Step], int], ...]
    #: Per level, how many parts of the path lead to its step.
    ends: tuple[int, ...]


def locate(steps: Sequence[Step], path: Path, *, named: bool) -> Located:
    """The step a stored path names.  ``named``: the path's step parts are
    :func:`address`es (else indexes, as runs stored before them).  ``LookupError``
    names the first part that leads nowhere, or one that starts like an iteration
    (``#``) but is no number; iteration parts pass as they are."""
    parts = path.parts
    bad = _bad_iteration(path)
    if bad is not None:
        raise LookupError(f"{bad} at {path} is no loop iteration (# and a number)")
    by_index: list[str] = []
    by_name: list[str] = []
    levels: list[tuple[Sequence[Step], int]] = []
    ends: list[int] = []
    step: Step | None = None
    block: Sequence[Step] = steps
    i = 0
    while i < len(parts):
        if step is not None:
            if i == len(parts) - 1 and _is_iteration(parts[i]) and step.kind == "workflow.retry":
                if int(parts[i][1:]) < 1:
                    raise LookupError(f"{parts[i]} at {path} is no retry attempt (# and a number from 1)")
                by_index.append(parts[i])  # a retry suspended between attempts: the attempt of this step
                by_name.append(parts[i])
                break
            blocks = dict(step.children())
            if i == len(parts) - 1 and _is_iteration(parts[i]):
                # Only a retry's path ends in an attempt: the run's retry was replaced
                # ("has no #2" told the user nothing of that).
                raise LookupError(
                    f"the step at {Path(parts[:i])} is now {step.describe()}, not a workflow.retry: attempt"
                    f" {parts[i]}, which the run is suspended to make, does not exist; deploy the workflow"
                    f" with the retry back{OWN_FIX}"
                )
            if parts[i] not in blocks:
                raise LookupError(f"{step.describe()} at {path} has no {parts[i]}")
            block = blocks[parts[i]].steps
            take = 2 if i + 1 < len(parts) and _is_iteration(parts[i + 1]) else 1
            by_index.extend(parts[i : i + take])
            by_name.extend(parts[i : i + take])
            i += take
            if i >= len(parts):
                raise LookupError(f"no step at {path}")
        n = _find(block, parts[i], named)
        if n is None:
            gone = f'step "{part_label(parts[i])}" at {path} no longer exists'
            raise LookupError(f"{gone}: {unnamed_fix(parts[i])}" if named and parts[i][:1] == "@" else gone)
        step = block[n]
        levels.append((block, n))
        by_index.append(str(n))
        by_name.append(address(block, n))
        i += 1
        ends.append(i)
    if step is None:
        raise LookupError(f"no step at {path}")
    return Located(step, Path(tuple(by_index)), Path(tuple(by_name)), tuple(levels), tuple(ends))


def _find(block: Sequence[Step], part: str, named: bool) -> int | None:
    if not named:
        return int(part) if part.isascii() and part.isdigit() and int(part) < len(block) else None
    return next((n for n in range(len(block)) if address(block, n) == part), None)


def step_at(steps: Sequence[Step], path: Path) -> Step:
    """The step a path by index names; ``LookupError`` when the program has none there."""
    return locate(steps, path, named=False).step


def sub_keys(steps: Sequence[Step], builder: str) -> Mapping[str, None]:
    """Keys that steps inside sub-pipelines declare: they start as ``None`` (DESIGN §3.4)."""
    return {
        step.name: None for path, step, _inside in walk(steps, builder) if "/" in path and isinstance(step, NamedStep)
    }
