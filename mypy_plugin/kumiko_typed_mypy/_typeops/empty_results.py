"""A resolver that returns an empty collection, ``lambda c: []``: mypy infers
``list[Never]`` and reports ``Need type annotation`` for the variable the whole pipeline is
assigned to (or the handler registering it), lines away, where no annotation helps.  It is
reported at the step instead, with mypy's code and the fix; the part mypy could not infer
reads as ``Any`` (a second error at each use would repeat it)."""

from __future__ import annotations

from mypy import errorcodes
from mypy.checkexpr import has_ambiguous_uninhabited_component
from mypy.messages import format_type_bare
from mypy.plugin import MethodContext
from mypy.type_visitor import TypeTranslator
from mypy.types import AnyType, Instance, Type, TypeAliasType, TypeOfAny, UninhabitedType, get_proper_type

from .args import where
from .reported import fail_kept

#: How to give an empty collection its item type, by the collection's class.
_TYPED_EMPTY = {"builtins.list": "list[str]()", "builtins.dict": "dict[str, int]()", "builtins.set": "set[str]()"}


def solved(ctx: MethodContext, value: Type, subject: str, wrap: str = "{}") -> Type:
    """``value``, what the resolver of ``subject`` returned (``step "cells"``), reported if
    mypy could not infer part of it; ``wrap`` places the typed empty collection in the
    fix (``ok({})`` for ``return_``)."""
    if not has_ambiguous_uninhabited_component(value):
        return value
    proper = get_proper_type(value)
    empty = _TYPED_EMPTY.get(proper.type.fullname) if isinstance(proper, Instance) else None
    fix = f"lambda c: {wrap.format(empty)}" if empty else "a def resolver that declares its return type"
    shown = format_type_bare(value, ctx.api.options)
    # Kept from a first pass too: the call around this one solves its result type from the
    # Any returned here, and checked in that context ok([]) is a list[Any].
    fail_kept(
        ctx,
        f"Need type annotation for {subject}: mypy cannot infer the item type of the {shown} its "
        f"resolver returns; give it one, e.g. {fix}",
        where(ctx),
        code=errorcodes.VAR_ANNOTATED,
    )
    return value.accept(_Unsolved())


class _Unsolved(TypeTranslator):
    """A type with the parts mypy could not infer (an empty display's ``Never``) as ``Any``."""

    def visit_uninhabited_type(self, t: UninhabitedType) -> Type:
        return AnyType(TypeOfAny.from_error) if t.ambiguous else t

    def visit_type_alias_type(self, t: TypeAliasType) -> Type:
        return t.copy_modified(args=[a.accept(self) for a in t.args])
