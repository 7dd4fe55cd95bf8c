"""Reading and building the anonymous ``TypedDict``s that stand for steps and scope."""

from __future__ import annotations

from typing import Final

from mypy.plugin import CheckerPluginInterface
from mypy.types import AnyType, Instance, ProperType, Type, TypedDictType, get_proper_type

from ._names import ADD_SCOPE, ADD_STEP, BRANCH, LOOP, NO_SCOPE, NO_STEPS, RETRY

EMPTY_MARKERS: Final = frozenset({NO_STEPS, NO_SCOPE})
OPEN_MARKERS: Final = frozenset({ADD_STEP, BRANCH, LOOP, RETRY, ADD_SCOPE})


class Unknown:
    """The keys cannot be known; ``explicit`` when the user wrote ``Any`` themselves."""

    def __init__(self, explicit: bool, shown: ProperType) -> None:
        self.explicit = explicit
        self.shown = shown


def keys_of(t: Type) -> dict[str, Type] | Unknown:
    p = get_proper_type(t)
    if isinstance(p, TypedDictType):
        return dict(p.items)
    if isinstance(p, Instance) and p.type.fullname in EMPTY_MARKERS:
        return {}
    return Unknown(isinstance(p, AnyType), p)


def make(api: CheckerPluginInterface, items: dict[str, Type]) -> TypedDictType:
    """A ``TypedDict`` whose keys all exist and are read-only (resolvers only read)."""
    fallback = api.named_generic_type("typing._TypedDict", [])
    return TypedDictType(items, set(items), set(items), fallback)
