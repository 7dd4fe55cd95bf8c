"""The runtime shared by the generated builders (``_builders.py``).

The generated classes differ only in which methods they offer and what those
return; every method funnels into :meth:`BuilderCore._then`, which makes a new
immutable builder with one more step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

from ._steps import EMPTY, Block, Step

if TYPE_CHECKING:
    from ._feature import Feature

__all__ = ["MAX_NESTING", "BuilderCore"]

#: Deepest nesting of sub-pipelines (arms, loop and retry bodies): far beyond any sensible
#: pipeline, far below Python's recursion limit, which building, checking and running a
#: pipeline each recurse into (building one takes three frames per level).
MAX_NESTING: Final = 64

B = TypeVar("B", bound="BuilderCore")
F = TypeVar("F")


class BuilderCore:
    __slots__ = ("_depth", "_feature", "_payload_type", "_steps")

    #: The builder's name in the rule table.
    _rule: ClassVar[str]

    def __init__(
        self, feature: Feature[Any], payload_type: type[Any], steps: tuple[Step, ...] = (), depth: int = 0
    ) -> None:
        self._feature = feature
        self._payload_type = payload_type
        self._steps = steps
        #: How many sub-pipelines this builder's steps sit in (0: the top level).
        self._depth = depth

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps added so far (immutable)."""
        return self._steps

    @property
    def feature(self) -> Feature[Any]:
        return self._feature

    @property
    def payload_type(self) -> type[Any]:
        return self._payload_type

    def _then(self, cls: type[B], step: Step) -> B:
        return cls(self._feature, self._payload_type, (*self._steps, step), self._depth)

    def _finish(self, cls: Callable[..., F], step: Step) -> F:
        return cls(self._feature, self._payload_type, (*self._steps, step), self._rule)

    def _sub(self, cls: type[B], build: Callable[[B], object] | None, what: str) -> Block:
        """Run a sub-pipeline callback on a fresh ``cls`` builder and compile its steps."""
        if build is None:
            return EMPTY
        if self._depth >= MAX_NESTING:
            raise ValueError(
                f"{what} nests sub-pipelines deeper than {MAX_NESTING} levels; join the conditions "
                "of nested branches into one when=, or move the inner steps into a handler of "
                "their own and run it with call_feature"
            )
        result = build(cls(self._feature, self._payload_type, (), self._depth + 1))
        if not isinstance(result, cls):
            raise TypeError(
                f"{what} must return the builder it was given with steps added "
                f"(e.g. lambda b: b.compute(...)), not {type(result).__name__}"
            )
        return Block(result._steps)

    def __repr__(self) -> str:
        kinds = ", ".join(s.describe() for s in self._steps)
        # A caller without mypy may have given a union (refused at boot): named, not raised on.
        named = getattr(self._payload_type, "__name__", repr(self._payload_type))
        return f"<{type(self).__name__} of {named}: {kinds}>"
