"""The runtime shared by the generated builders (``_builders.py``).

The generated classes differ only in which methods they offer and what those
return; every method funnels into :meth:`BuilderCore._then`, which makes a new
immutable builder with one more step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ._steps import EMPTY, Block, Step

if TYPE_CHECKING:
    from ._feature import Feature

__all__ = ["BuilderCore"]

B = TypeVar("B", bound="BuilderCore")
F = TypeVar("F")


class BuilderCore:
    __slots__ = ("_feature", "_payload_type", "_steps")

    #: The builder's name in the rule table.
    _rule: ClassVar[str]

    def __init__(self, feature: Feature[Any], payload_type: type[Any], steps: tuple[Step, ...] = ()) -> None:
        self._feature = feature
        self._payload_type = payload_type
        self._steps = steps

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
        return cls(self._feature, self._payload_type, (*self._steps, step))

    def _finish(self, cls: Callable[..., F], step: Step) -> F:
        return cls(self._feature, self._payload_type, (*self._steps, step), self._rule)

    def _sub(self, cls: type[B], build: Callable[[B], object] | None, what: str) -> Block:
        """Run a sub-pipeline callback on a fresh ``cls`` builder and compile its steps."""
        if build is None:
            return EMPTY
        result = build(cls(self._feature, self._payload_type))
        if not isinstance(result, cls):
            raise TypeError(
                f"{what} must return the builder it was given with steps added "
                f"(e.g. lambda b: b.compute(...)), not {type(result).__name__}"
            )
        return Block(result._steps)

    def __repr__(self) -> str:
        kinds = ", ".join(s.describe() for s in self._steps)
        return f"<{type(self).__name__} of {self._payload_type.__name__}: {kinds}>"
