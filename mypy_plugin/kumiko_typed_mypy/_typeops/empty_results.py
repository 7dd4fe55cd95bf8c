"""A resolver that returns an empty collection, ``lambda c: []``: mypy infers
``list[Never]`` and reports ``Need type annotation`` for the variable the whole pipeline is
assigned to (or the handler registering it), lines away, where no annotation helps.  It is
reported at the step instead, with mypy's code and the fix; the part mypy could not infer
reads as ``Any`` (a second error at each use would repeat it)."""

from __future__ import annotations

from mypy.checkexpr import has_ambiguous_uninhabited_component
from mypy.errorcodes import VAR_ANNOTATED
from mypy.messages import format_type_bare
from mypy.nodes import Context
from mypy.plugin import MethodContext, MethodSigContext
from mypy.type_visitor import TypeTranslator
from mypy.types import AnyType, Instance, Type, TypeAliasType, TypeOfAny, UninhabitedType, get_proper_type

from .args import where
from .reported import fail, fail_kept

#: How to give an empty collection its item type, by the collection's class.
_TYPED_EMPTY = {"builtins.list": "list[str]()", "builtins.dict": "dict[str, int]()", "builtins.set": "set[str]()"}


def solved(ctx: MethodContext, value: Type, subject: str, wrap: str = "{}") -> Type:
    """``value``, what the resolver of ``subject`` returned (``step "cells"``), reported if
    mypy could not infer part of it; ``wrap`` places the typed empty collection in the
    fix (``ok({})`` for ``return_``)."""
    if not has_ambiguous_uninhabited_component(value):
        return value
    # Kept from a first pass too: the call around this one solves its result type from the
    # Any returned here, and checked in that context ok([]) is a list[Any].
    fail_kept(ctx, _message(ctx, value, subject, "its resolver", "lambda c: " + wrap), where(ctx), code=VAR_ANNOTATED)
    return value.accept(_Unsolved())


def unsolved_items(ctx: MethodSigContext, over: Type, loop: str, context: Context) -> bool:
    """Whether ``over``, what a loop's ``over=`` returns, is an empty collection mypy gives
    no item type (``lambda c: set()``): then it is reported at ``over=`` and the item reads
    as ``Any``, instead of a ``Never`` item that the first step returning it reports."""
    if not has_ambiguous_uninhabited_component(over):
        return False
    fail(ctx, _message(ctx, over, f'loop "{loop}"', "its over=", "over=lambda c: {}"), context, code=VAR_ANNOTATED)
    return True


def _message(ctx: MethodContext | MethodSigContext, value: Type, subject: str, source: str, fix: str) -> str:
    proper = get_proper_type(value)
    empty = _TYPED_EMPTY.get(proper.type.fullname) if isinstance(proper, Instance) else None
    shown = format_type_bare(value, ctx.api.options)
    how = fix.format(empty) if empty else "a def resolver that declares its return type"
    return (
        f"Need type annotation for {subject}: mypy cannot infer the item type of the {shown} {source} "
        f"returns; give it one, e.g. {how}"
    )


class _Unsolved(TypeTranslator):
    """A type with the parts mypy could not infer (an empty display's ``Never``) as ``Any``."""

    def visit_uninhabited_type(self, t: UninhabitedType) -> Type:
        return AnyType(TypeOfAny.from_error) if t.ambiguous else t

    def visit_type_alias_type(self, t: TypeAliasType) -> Type:
        return t.copy_modified(args=[a.accept(self) for a in t.args])
