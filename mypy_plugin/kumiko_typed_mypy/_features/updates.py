"""``update``: ``changes=`` typed by the entity's columns, and a version rule.

- Before the call (signature hook), ``changes=`` is expected to return a
  ``total=False`` ``TypedDict`` of the entity's writable ``Mapped[...]`` columns, so a
  misspelt column or a value of the wrong type is an error at its line.  Without the
  plugin it stays ``Mapping[str, object]``.
- After the call, an update with neither ``version=`` nor ``skip_optimistic_lock=True``
  is ``kumiko-optimistic-lock`` (the App refuses it at boot too), and mypy's
  ``Unexpected TypedDict key "stok"`` for ``changes=`` gains what to write instead: the
  closest writable column, or that the framework sets the column itself.
"""

from __future__ import annotations

import re
from typing import Final

from mypy.nodes import NameExpr, RefExpr, TypeInfo, Var
from mypy.plugin import MethodContext, MethodSigContext
from mypy.types import CallableType, Instance, Type, TypedDictType, get_proper_type

from .. import _errors
from .._names import MAPPED
from .._rules import rules
from .._typeops.args import arg_expr, arg_type, where
from .._typeops.closest import did_you_mean
from .._typeops.literals import literal_str
from .._typeops.reported import fail, recorded_in

_UNEXPECTED: Final = re.compile(r'^Unexpected TypedDict keys? (?P<keys>"[^"]*"|\("[^"]*"(?:, "[^"]*")*\))$')


def _entity_info(ctx: MethodSigContext | MethodContext) -> TypeInfo | None:
    expr = arg_expr(ctx, "entity")
    return expr.node if isinstance(expr, RefExpr) and isinstance(expr.node, TypeInfo) else None


def writable_columns(info: TypeInfo) -> dict[str, Type]:
    """Each ``Mapped[T]`` attribute of the class and its bases but the framework's, as ``T``."""
    columns: dict[str, Type] = {}
    for base in reversed(info.mro):
        for name, symbol in base.names.items():
            var = symbol.node
            if name in rules.FRAMEWORK_COLUMNS or not (isinstance(var, Var) and var.type is not None):
                continue
            declared = get_proper_type(var.type)
            if isinstance(declared, Instance) and declared.type.fullname == MAPPED and declared.args:
                columns[name] = declared.args[0]
    return columns


def changes_signature(ctx: MethodSigContext) -> CallableType:
    sig = ctx.default_signature
    info = _entity_info(ctx)
    if info is None or "changes" not in sig.arg_names:
        return sig
    index = sig.arg_names.index("changes")
    changes = get_proper_type(sig.arg_types[index])
    if not isinstance(changes, CallableType):
        return sig
    fallback = ctx.api.named_generic_type("typing._TypedDict", [])
    columns = TypedDictType(writable_columns(info), set(), set(), fallback)
    arg_types = list(sig.arg_types)
    arg_types[index] = changes.copy_modified(ret_type=columns)
    return sig.copy_modified(arg_types=arg_types)


def check_lock(ctx: MethodContext) -> Type:
    version = arg_expr(ctx, "version")
    skip = arg_expr(ctx, "skip_optimistic_lock")
    has_version = version is not None and not (isinstance(version, NameExpr) and version.fullname == "builtins.None")
    skips = skip is not None and not (isinstance(skip, NameExpr) and skip.fullname == "builtins.False")
    if not (has_version or skips):
        name = literal_str(arg_type(ctx, "name"), arg_expr(ctx, "name")) or "update"
        fail(ctx, rules.msg_optimistic_lock(name), where(ctx, "name"), code=_errors.OPTIMISTIC_LOCK)
    return ctx.default_return_type


def name_columns(ctx: MethodContext) -> Type:
    """Complete mypy's error for a ``changes=`` key the entity cannot take with the fix."""
    info = _entity_info(ctx)
    if info is None:
        return ctx.default_return_type
    columns = list(writable_columns(info))
    for error in recorded_in(ctx.api.msg.errors, ctx.context):
        match = _UNEXPECTED.match(error.message)
        if match is None:
            continue
        hints = [_hint(key, columns) for key in re.findall(r'"([^"]*)"', match["keys"])]
        listed = ", ".join(f'"{c}"' for c in columns) or "none"
        error.message += f"; {'; '.join(hints)} (the writable columns of {info.name}: {listed})"
    return ctx.default_return_type


def _hint(key: str, columns: list[str]) -> str:
    if key in rules.FRAMEWORK_COLUMNS:
        return f'"{key}" is set by the framework, not by changes='
    return did_you_mean(key, columns) or f'"{key}" is no column changes= can write'
