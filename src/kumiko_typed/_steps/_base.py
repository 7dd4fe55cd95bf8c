"""What every step shares: the base classes, the two exceptions that unwind a run
carrying the path they passed through, the :class:`Path` value, and THE walk of the
step tree (boot checks, the graph, the fingerprint and path lookup all use it).

A path names a step inside a program: indexes separated by the label of the
sub-pipeline they enter — ``3/on_true/1`` (second step of the true arm of step 3),
``2/do/#4/0`` (first body step of the loop at step 2, in its fifth iteration).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from .._errors import StepCrash, Suspend
from .._results import Failure, Ok
from .._rules import BUILDERS, RETRY_BODY_BUILDER

if TYPE_CHECKING:
    from .._interpreter import Run
    from ._block import Block

__all__ = [
    "LATER",
    "Fn",
    "NamedStep",
    "Path",
    "Result",
    "Resume",
    "Step",
    "StepCrash",
    "Suspend",
    "resolve",
    "step_at",
    "sub_keys",
    "walk",
]

Fn = Callable[[Any], Any]
#: Field metadata of a step argument added after its step: left at its default, it stays
#: out of the workflow fingerprint, so runs suspended before a library upgrade resume.
LATER = "kumiko_fingerprint_later"
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


def resolve(value: object, run: Run) -> Any:
    """A plain value or a resolver (DESIGN §3.3: fixed-type arguments accept both)."""
    return value(run.ctx) if callable(value) else value


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


@attrs.frozen(slots=True)
class NamedStep(Step):
    name: str

    @property
    def step_name(self) -> str | None:
        return self.name


#: The path part of a loop iteration or retry attempt (``#4``) follows the label.
def _is_iteration(part: str) -> bool:
    return part.startswith("#")


def walk(steps: Sequence[Step], builder: str, prefix: str = "") -> Iterator[tuple[str, Step, str]]:
    """Every step with its path and the builder it was written in, depth first."""
    for i, step in enumerate(steps):
        path = f"{prefix}{i}"
        yield path, step, builder
        inner = RETRY_BODY_BUILDER if step.kind == "workflow.retry" else BUILDERS[builder].nested
        for label, child in step.children():
            yield from walk(child.steps, inner, f"{path}/{label}/")


def step_at(steps: Sequence[Step], path: Path) -> Step:
    """The step a stored path names (iteration parts are skipped); ``LookupError``
    when the program has none there."""
    parts = path.parts
    try:
        step = steps[int(parts[0])]
        i = 1
        while i < len(parts):
            if i == len(parts) - 1 and _is_iteration(parts[i]) and step.kind == "workflow.retry":
                break  # a retry suspended between attempts: the attempt of this step
            blocks = dict(step.children())
            block = blocks[parts[i]]
            i += 2 if i + 1 < len(parts) and _is_iteration(parts[i + 1]) else 1
            step = block.steps[int(parts[i])]
            i += 1
    except (IndexError, KeyError, ValueError):
        raise LookupError(f"no step at {path}") from None
    return step


def sub_keys(steps: Sequence[Step], builder: str) -> Mapping[str, None]:
    """Keys that steps inside sub-pipelines declare: they start as ``None`` (DESIGN §3.4)."""
    return {
        step.name: None for path, step, _inside in walk(steps, builder) if "/" in path and isinstance(step, NamedStep)
    }
