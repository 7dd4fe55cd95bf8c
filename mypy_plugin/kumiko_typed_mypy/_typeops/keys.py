"""Reading and building the anonymous ``TypedDict``s that stand for steps and scope."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mypy.checker import TypeChecker
from mypy.nodes import TypeInfo
from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.subtypes import is_same_type
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    Instance,
    NoneType,
    ProperType,
    Type,
    TypedDictType,
    TypeOfAny,
    TypeVarType,
    UninhabitedType,
    get_proper_type,
)

from .. import _errors
from .._names import NO_SCOPE, NO_STEPS, SOME_STEPS, STEP_MARKERS
from .args import where
from .reassigned import after_reported_name
from .reported import fail

EMPTY_MARKERS: Final = frozenset({NO_STEPS, NO_SCOPE})


class Unknown:
    """The keys cannot be known; ``explicit`` when the user wrote ``Any`` themselves."""

    def __init__(self, explicit: bool, shown: ProperType) -> None:
        self.explicit = explicit
        self.shown = shown


class OpenKeys(dict[str, Type]):
    """Keys known exactly, plus others that only an ``Any`` the user wrote could name
    (an arm or body typed ``Any``).  Stands for ``SomeSteps[TypedDict(...)]``."""


def keys_of(t: Type) -> dict[str, Type] | Unknown:
    p = get_proper_type(t)
    if isinstance(p, TypedDictType):
        return dict(p.items)
    if isinstance(p, Instance) and p.type.fullname == SOME_STEPS:
        known = keys_of(p.args[0])
        return OpenKeys(known) if isinstance(known, dict) else known
    if isinstance(p, Instance) and p.type.fullname in EMPTY_MARKERS:
        return {}
    return Unknown(isinstance(p, AnyType), p)


def open_if_any(keys: dict[str, Type] | Unknown) -> dict[str, Type] | Unknown:
    """A sub-pipeline the user typed ``Any`` adds keys nobody can know: no keys known, open."""
    return OpenKeys() if isinstance(keys, Unknown) and keys.explicit else keys


def either(base: dict[str, Type], arms: Sequence[dict[str, Type]]) -> dict[str, Type]:
    """The keys after a branch ran one of ``arms`` (each holds the keys of ``base`` and its
    own): a key every arm sets keeps its type (the union of theirs where they differ), a key
    only some arms set is ``T | None`` (the run sets it to ``None`` when the other arm ran).
    Open when any of them is (an arm typed ``Any``)."""
    merged = _opened(base, arms)
    for name in dict.fromkeys(name for arm in arms for name in arm if name not in base):
        values = [arm[name] for arm in arms if name in arm]
        if len(values) < len(arms):
            values.append(NoneType())
        merged[name] = _one(values)
    return merged


def common(alternatives: Sequence[dict[str, Type]]) -> dict[str, Type]:
    """The keys of whichever of ``alternatives`` a pipeline was built with: those every one
    has, each with its type (the union where they differ).  A key only some have is no key:
    the pipeline built with another has no such step, and reading it raises ``KeyError``."""
    merged = _opened({}, alternatives)
    for name in alternatives[0]:
        if all(name in keys for keys in alternatives[1:]):
            merged[name] = _one([keys[name] for keys in alternatives])
    return merged


def _opened(base: dict[str, Type], arms: Sequence[dict[str, Type]]) -> dict[str, Type]:
    return OpenKeys(base) if any(isinstance(k, OpenKeys) for k in (base, *arms)) else dict(base)


def _one(values: list[Type]) -> Type:
    return values[0] if all(is_same_type(values[0], v) for v in values[1:]) else make_simplified_union(values)


def unknown_steps(ctx: MethodContext, unknown: Unknown, method: str) -> Type:
    """Keys could not be read: Any the user wrote stays Any; anything else is reported,
    unless it is the consequence of a step name reported already (reassigned): then every
    key reads as ``Any`` until that name is fixed, as after the step itself."""
    if isinstance(unknown.shown, UninhabitedType) and after_reported_name(ctx):
        return make(ctx.api, OpenKeys())
    if not unknown.explicit:
        fail(ctx, _why_unknown(ctx, unknown, method), where(ctx), code=_errors.UNANALYZABLE)
    return AnyType(TypeOfAny.from_error if not unknown.explicit else TypeOfAny.special_form)


def _why_unknown(ctx: MethodContext, unknown: Unknown, method: str) -> str:
    """The message, with the fix that fits: a helper generic over the steps cannot name
    in its return type the keys it adds (there is no "S plus a key"), so it is typed with
    ``Any`` steps; anything else is a builder not made by chaining."""
    if isinstance(unknown.shown, TypeVarType):
        receiver = get_proper_type(ctx.type)
        builder = receiver.type.name if isinstance(receiver, Instance) else "SubPipeline"
        return (
            f'Cannot tell which step keys exist before "{method}": the steps are the type variable '
            f"{unknown.shown.name} of a generic helper, whose return type cannot name the keys it adds; "
            f"give its builder Any steps ({builder}[P, Any, Sc, C]): where it is used, the keys before it "
            "stay exact and its own read as Any"
        )
    if isinstance(unknown.shown, UninhabitedType):
        return (
            f'Cannot tell which step keys exist before "{method}": mypy reads them as Never here, as it does '
            "for a builder assigned back to its own name (p = p.branch(...)) after a step whose keys are partly "
            "unknown (an arm or body typed Any, a step named at run time); assign such a builder to a new name "
            "(p2 = p.branch(...))"
        )
    if isinstance(unknown.shown, Instance) and unknown.shown.type.fullname in STEP_MARKERS:
        return (
            f'Cannot tell which step keys exist before "{method}": the step before it was not called as a '
            "method of its builder (e.g. through a variable, m = b.compute; m(...)), so the plugin never "
            "saw it; call each step on the builder, b.compute(...)"
        )
    return (
        f'Cannot tell which step keys exist before "{method}" (the steps type is {unknown.shown}); '
        "build pipelines by chaining a feature's pipeline(...) builder"
    )


def make(api: CheckerPluginInterface, items: dict[str, Type]) -> Type:
    """A ``TypedDict`` whose keys all exist and are read-only (resolvers only read);
    wrapped in ``SomeSteps`` when other keys may exist too."""
    fallback = api.named_generic_type("typing._TypedDict", [])
    exact = TypedDictType(dict(items), set(items), set(items), fallback)
    if not isinstance(items, OpenKeys):
        return exact
    info = lookup_info(api, SOME_STEPS)
    return Instance(info, [exact]) if info is not None else AnyType(TypeOfAny.special_form)


def lookup_info(api: object, fullname: str) -> TypeInfo | None:
    """A class of the library by full name (``named_generic_type`` resolves only names
    that the package's ``__init__`` re-exports)."""
    module, _, name = fullname.rpartition(".")
    tree = api.modules.get(module) if isinstance(api, TypeChecker) else None
    symbol = tree.names.get(name) if tree is not None else None
    return symbol.node if symbol is not None and isinstance(symbol.node, TypeInfo) else None
