"""Resolvers whose result the step fixes: ``return_``'s (``ok(...)`` or a ``Failure``),
``guard``'s ``otherwise=`` (a ``Failure``), the ``when=`` of ``guard`` and ``branch``
(a ``bool``), and an arm or a body (the sub-pipeline it is given, with its steps added: one
returning ``None``, the outer pipeline or a list was told so by two errors showing the whole
callable type expected).  The rule table says which (``rules.fixes_result``), ``_FIXED`` how
mypy spells them.

Given one that returns something else (``.return_(lambda c: 1)``, ``otherwise=lambda c:
ok(1)``, ``when=lambda c: len(...)``), mypy's ``arg-type`` error shows the callable type
expected, with the whole context type and, for ``return_``, an ``Ok[object]`` (the detached
``D``) the user never wrote, and the lambda's ``return-value`` error says the same again.
The first says what was returned and what to return instead (the rule table's message for
the resolver); the repeat is taken back (one mistake, one error).  A value given for the
function, ``.return_(ok(1))``, is told to be a function, and a lambda with ``yield``
(``.return_(lambda c: (yield ok(1)))``), which mypy refuses for not being typed as a
generator, that the step would get a generator object and what to return.  A function of
another number of parameters is ``resolvers.explain_parameters``'s to explain, an async one
``resolvers.refuse_async``'s."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from mypy import errorcodes
from mypy.errors import ErrorInfo
from mypy.messages import format_type_bare
from mypy.nodes import LambdaExpr
from mypy.plugin import MethodContext
from mypy.subtypes import is_subtype
from mypy.typeops import get_all_type_vars
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    ProperType,
    Type,
    UninhabitedType,
    UnionType,
    get_proper_type,
)

from .. import _errors
from .._names import BUILDERS_MODULE, FAILURE, OK
from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.callbacks import as_called, each_called, expected_result, passed, returned, wrong_count
from .._typeops.refused import reword, reword_generator
from .._typeops.reported import recorded_in


@dataclass(frozen=True)
class _Fixed:
    """A resolver argument of a step, and the result type the step fixes for it."""

    argument: str
    #: The classes (or their subclasses) what it returns may be.
    classes: frozenset[str]
    #: How mypy spells that type in the lambda's repeat of its error.
    expected: str


_BOOL: Final = "builtins.bool"
#: The builders an arm or a body is given, and so returns (``nested`` in the rule table).
_SUB_BUILDERS: Final = frozenset(f"{BUILDERS_MODULE}.{b.nested}" for b in rules.BUILDER_RULES)
_SUB_BUILDER: Final = r"\w*SubPipeline\[.*\]"
_FIXED: Final[dict[str, tuple[_Fixed, ...]]] = {
    "return": (_Fixed("fn", frozenset({OK, FAILURE}), r"Ok\[.*\] \| Failure"),),
    "guard": (_Fixed("when", frozenset({_BOOL}), "bool"), _Fixed("otherwise", frozenset({FAILURE}), "Failure")),
    "branch": (
        _Fixed("when", frozenset({_BOOL}), "bool"),
        _Fixed("on_true", _SUB_BUILDERS, _SUB_BUILDER),
        _Fixed("on_false", _SUB_BUILDERS, _SUB_BUILDER),
    ),
    "for_each": (_Fixed("do", _SUB_BUILDERS, _SUB_BUILDER),),
    "workflow.retry": (_Fixed("do", _SUB_BUILDERS, _SUB_BUILDER),),
}
#: The kinds of step with such a resolver.
KINDS: Final = frozenset(_FIXED)


def explain(kind: str, ctx: MethodContext) -> Type:
    """Each resolver of step ``kind`` whose result the step fixes, explained when mypy refused it."""
    method = rules.RULES_BY_KIND[kind].method
    for fixed in _FIXED[kind]:
        _explain(ctx, method, fixed)
    return ctx.default_return_type


def explain_typed(kind: str, ctx: MethodContext) -> Type:
    """Any other resolver whose result type the step fixes (a mail's ``str``, ``html=``'s
    ``str | None``, an event's ``UUID``), explained when mypy refused what it returned: mypy
    showed the whole callable type expected and said it again in the lambda (``return-value``).
    Not where the type is still to be solved (a read's ``Select[T]``), nor ``changes=``, whose
    columns ``updates`` names."""
    method = rules.RULES_BY_KIND[kind].method
    for name, exprs in zip(ctx.callee_arg_names, ctx.args, strict=True):
        if name is None or rules.fixes_result(method, name) or name == "changes" or len(exprs) != 1:
            continue
        expected, fn = expected_result(ctx, name), as_called(_given(ctx, name), passed(ctx, name))
        if expected is None or get_all_type_vars(expected) or not isinstance(fn, CallableType) or wrong_count(fn):
            continue
        result = returned(ctx, name)
        if result is None or is_subtype(result, expected):
            continue
        shown = format_type_bare(result, ctx.api.options), format_type_bare(expected, ctx.api.options)
        reword(ctx, exprs[0], rules.msg_resolver_type(method, name, *shown), _repeats_return)
    return ctx.default_return_type


def _given(ctx: MethodContext, name: str) -> ProperType | None:
    given = arg_type(ctx, name)
    return get_proper_type(given) if given is not None else None


def _repeats_return(info: ErrorInfo) -> bool:
    return info.code == errorcodes.RETURN_VALUE and info.message.startswith("Incompatible return value type")


def _explain(ctx: MethodContext, method: str, fixed: _Fixed) -> None:
    expr, given = arg_expr(ctx, fixed.argument), arg_type(ctx, fixed.argument)
    if expr is None or given is None:
        return
    if isinstance(expr, LambdaExpr) and expr.is_generator:
        # mypy's message says the lambda's return type must be a Generator: say what to return.
        reword_generator(ctx, expr, rules.msg_generator_result(method, fixed.argument))
        return
    # Each function of a choice (``ended if F else failed``, typed as their union) as called.
    choices = each_called(get_proper_type(given), passed(ctx, fixed.argument))
    functions = [fn for fn in choices if isinstance(fn, CallableType)]
    function = len(functions) == len(choices)
    if any(wrong_count(fn) is not None for fn in functions):
        return
    result = returned(ctx, fixed.argument) if function else given  # not a function: .return_(ok(1))
    if result is None or (function and _only(result, fixed.classes)):
        return
    repeat = re.compile(rf'^Incompatible return value type \(got ".*", expected "{fixed.expected}"\)$')

    def repeats(info: ErrorInfo) -> bool:
        return info.code == errorcodes.RETURN_VALUE and repeat.match(info.message) is not None

    if function and _said_async(ctx, expr.line, expr.column):
        reword(ctx, expr, None, repeats)  # its kumiko-async-resolver error says what to do
        return
    returned_as = format_type_bare(result, ctx.api.options)
    reword(ctx, expr, rules.msg_resolver_result(method, fixed.argument, returned_as, function=function), repeats)


def _only(given: Type, classes: frozenset[str]) -> bool:
    """Whether every type ``given`` may be is one of ``classes`` (or derives from one), or
    ``Any``, ``Never``."""
    proper = get_proper_type(given)
    items = proper.items if isinstance(proper, UnionType) else [proper]
    for item in map(get_proper_type, items):
        if isinstance(item, (AnyType, UninhabitedType)):
            continue
        if not (isinstance(item, Instance) and any(i.fullname in classes for i in item.type.mro)):
            return False
    return True


def _said_async(ctx: MethodContext, line: int, column: int) -> bool:
    """Whether the resolver at ``line``, ``column`` was refused as async (resolvers.refuse_async)."""
    return any(
        info.code == _errors.ASYNC_RESOLVER and (info.line, info.column) == (line, column)
        for info in recorded_in(ctx.api.msg.errors, ctx.context)
    )
