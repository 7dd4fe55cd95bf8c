"""Resolvers must be plain functions: the interpreter calls them synchronously inside
the transaction, so an ``async def`` (or a lambda returning a coroutine) would hand
the step an un-awaited coroutine instead of its value.  A function typed to return a
union with an awaitable in it (``Awaitable[int] | int``) may do so, and is refused too, as is
one returning an object whose class has ``__await__`` without naming ``Awaitable`` (what
``await``, and the runtime's refusal, look up).  The error says which it returns, since the
fix differs: an ``async def``'s coroutine (make it plain), a coroutine a plain function
returns (it calls an async one), or another awaitable, named by its type (a future: return
the value it stands for).
An async generator (a function returning an async iterator) is refused as boot refuses it:
nothing in a step can iterate it. A lambda with ``*args`` is refused too: mypy does not check it
against the step; and so is a lambda with ``yield`` that mypy types ``Any``.  A lambda or
function of no or several parameters, where the step calls it with one, is told so once
(``explain_parameters``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mypy import errorcodes
from mypy.errors import ErrorInfo
from mypy.messages import format_type_bare
from mypy.nodes import ARG_NAMED, ARG_OPT, ARG_POS, ARG_STAR, ARG_STAR2, Expression, FuncDef, LambdaExpr
from mypy.plugin import MethodContext
from mypy.types import CallableType, Instance, Type, UnionType, get_proper_type

from .. import _errors
from .._rules import rules
from .._typeops.callbacks import as_called, each_called, expected_result, passed, wrong_count
from .._typeops.refused import reword, reword_generator, said_generator
from .._typeops.reported import at, fail, recorded_in, retract

_AWAITABLE = "typing.Awaitable"
_ASYNC_ITERATOR = "typing.AsyncIterator"


def refuse_async(kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    for name, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args, strict=True):
        for given, expr in zip(types, exprs, strict=True):
            if isinstance(expr, LambdaExpr) and (ARG_STAR in expr.arg_kinds or ARG_STAR2 in expr.arg_kinds):
                fail(ctx, _unchecked_lambda(method, name or "?"), expr, code=_errors.UNANALYZABLE)
                continue
            if isinstance(expr, LambdaExpr) and _uninferred_extra(ctx, expr):
                fail(ctx, _unchecked_lambda(method, name or "?", extra=True), expr, code=_errors.UNANALYZABLE)
                continue
            # A partial, __call__, an overload as called; each of a choice (``fetch if F else plain``).
            called = each_called(get_proper_type(given), passed(ctx, name) if name else None)
            functions = [fn for fn in called if isinstance(fn, CallableType)]
            if not functions:
                continue
            if isinstance(expr, LambdaExpr) and expr.is_generator:
                _refuse_generator(ctx, kind, name or "?", expr)
                continue
            for fn in functions:
                if _refuse_awaitable(ctx, kind, name or "?", fn, expr):
                    break
    return ctx.default_return_type


def _refuse_awaitable(ctx: MethodContext, kind: str, argument: str, fn: CallableType, expr: Expression) -> bool:
    """Report resolver ``fn`` given as ``argument`` if it returns (or may return) an awaitable or
    an async iterator; whether it did."""
    method = rules.RULES_BY_KIND[kind].method
    returned = get_proper_type(fn.ret_type)
    items = returned.items if isinstance(returned, UnionType) else [returned]  # may return one
    instances = [i for i in map(get_proper_type, items) if isinstance(i, Instance)]
    bases = {base.fullname for i in instances for base in i.type.mro}
    awaitables = [i for i in instances if i.type.has_base(_AWAITABLE) or _awaitable(i)]
    if awaitables:
        maybe = len(awaitables) < len(items)  # a union with other types in it
        fail(ctx, _async_message(ctx, method, argument, fn, awaitables, maybe), expr, code=_errors.ASYNC_RESOLVER)
        if not rules.fixes_result(method, argument):
            # Where the step fixes the result (a str, a UUID...), mypy refused the
            # coroutine too, with the whole callable type expected: the same mistake.
            reword(ctx, expr, None, _returns_awaitable)
        return True
    if _ASYNC_ITERATOR in bases:
        fail(ctx, rules.msg_async_iterator_resolver(method, argument), expr, code=_errors.ASYNC_RESOLVER)
        return True
    return False


def _async_message(
    ctx: MethodContext, method: str, argument: str, fn: CallableType, awaitables: list[Instance], maybe: bool
) -> str:
    """What the resolver returns, said as what it is: a coroutine of an ``async def`` (make it
    plain), one a plain function returns (it calls an async function), or another awaitable,
    named by its type (a future some other code was to await: return the value instead)."""
    if all(i.type.has_base(_COROUTINE) for i in awaitables):
        async_def = isinstance(fn.definition, FuncDef) and fn.definition.is_coroutine
        return rules.msg_async_resolver(method, argument, async_def=async_def, maybe=maybe)
    shown = format_type_bare(fn.ret_type, ctx.api.options)
    return rules.msg_async_resolver(method, argument, shown, maybe=maybe)


_COROUTINE: Final = "typing.Coroutine"


def _returns_awaitable(info: ErrorInfo) -> bool:
    """mypy's repeat, in a lambda returning a coroutine, of its refusal of the lambda."""
    return info.code == errorcodes.RETURN_VALUE and "Coroutine[" in info.message


def _awaitable(instance: Instance) -> bool:
    """Whether a class of ``instance``'s declares ``__await__`` (what ``await`` looks up).
    Not a structural check against the ``Awaitable`` protocol: a class with a
    ``__getattr__`` (SQLAlchemy's column expressions) or an ``Any`` base matches every
    protocol there."""
    return instance.type.get("__await__") is not None


def _unchecked_lambda(method: str, argument: str, *, extra: bool = False) -> str:
    """mypy infers no lambda with ``*args`` or ``**kwargs`` from the callable it is passed
    as (2.4: ``infer_lambda_type_using_context`` gives up), nor one with a parameter the
    callable has not (``lambda c, d=1: ...``, of which it says only ``Cannot infer type of
    lambda``): its body is checked as untyped code and its result is ``Any``, so a key, a
    loop's items or an arm's keys would be ``Any`` with no error."""
    one, _ = rules.resolver_parameter(argument)
    shape = "a parameter with a default or a keyword-only one" if extra else "*args or **kwargs"
    return (
        f'{argument}= of step "{method}" is a lambda with {shape}, which mypy does not check '
        f"against the step: its body is checked as untyped code and its result is Any; give it one "
        f"parameter, lambda {one}: ..."
    )


def _uninferred_extra(ctx: MethodContext, expr: LambdaExpr) -> bool:
    """Whether lambda ``expr`` has a parameter with a default or a keyword-only one (which the
    step never passes), and mypy said it ``Cannot infer type of lambda`` (taken back: the
    plugin's error says why, and what to write).  One of no or two required parameters is
    ``explain_parameters``'s."""
    kinds = expr.arg_kinds
    if not kinds or kinds[0] not in (ARG_POS, ARG_OPT) or ARG_POS in kinds[1:] or ARG_NAMED in kinds:
        return False  # a required keyword-only one: mypy refused it (``explain_parameters``)
    said = [info for info in recorded_in(ctx.api.msg.errors, expr) if _uninferred(expr)(info)]
    for info in said:
        retract(ctx.api.msg.errors, info)
    return bool(said)


def explain_parameters(kind: str, ctx: MethodContext) -> Type:
    """A callback of no or several parameters (``.return_(lambda: ok(1))``), where the step calls
    it with one: mypy said ``Cannot infer type of lambda`` and an ``arg-type`` error showing the
    callable type expected (for ``return_`` with an ``Ok[object]`` the user never wrote).  One
    error says how many it takes and which one to give it instead; one with a required
    keyword-only parameter (``lambda c, *, d: ...``), that the step never passes it."""
    method = rules.RULES_BY_KIND[kind].method
    for name, types, exprs in zip(ctx.callee_arg_names, ctx.arg_types, ctx.args, strict=True):
        for given, expr in zip(types, exprs, strict=True):
            fn = as_called(get_proper_type(given))
            # Only where the step expects a function of one parameter (not an entity's class).
            if not name or not isinstance(fn, CallableType) or passed(ctx, name) is None:
                continue
            count, keyword_only = wrong_count(fn), ARG_NAMED in fn.arg_kinds
            if count is not None:
                message = rules.msg_resolver_parameters(method, name, count, keyword_only=keyword_only)
            elif keyword_only:  # ``lambda c, *, d: ...``: d, required, is never passed
                keywords = [n or "?" for n, k in zip(fn.arg_names, fn.arg_kinds, strict=True) if k == ARG_NAMED]
                message = rules.msg_resolver_keywords(method, name, keywords)
            else:
                continue
            reword(ctx, expr, message, _uninferred(expr))
    return ctx.default_return_type


def _uninferred(expr: Expression) -> Callable[[ErrorInfo], bool]:
    """mypy's ``Cannot infer type of lambda`` for lambda ``expr``: its repeat of the mistake."""

    def repeats(info: ErrorInfo) -> bool:
        return info.message == _UNINFERRED and at(info, expr)

    return repeats


_UNINFERRED: Final = "Cannot infer type of lambda"


def _refuse_generator(ctx: MethodContext, kind: str, argument: str, expr: LambdaExpr) -> None:
    """``lambda c: (yield ...)`` is a generator function, and mypy (2.4) infers no such
    lambda from the callable it is passed as: it types it by its body's expression (``Any``
    for a ``yield``, ``None`` for a ``yield from`` a list), so a key (or an arm's keys)
    would be wrong with no error.  Given as ``over=``, the generator is what the loop
    iterates, which runs; there mypy's own error is an ``arg-type`` saying the lambda
    returns ``None``, taken back for the sentence that says what to write instead.  Where
    the step fixes the result (a mail's ``str``, a read's select, an arm's sub-pipeline),
    mypy refused it only as a generator function not typed ``Generator``: that is said as
    what to return instead (``resolver_results`` says it for the results the rule table fixes)."""
    method = rules.RULES_BY_KIND[kind].method
    if said_generator(ctx, expr):
        if not rules.fixes_result(method, argument):
            result = expected_result(ctx, argument)
            shown = format_type_bare(result, ctx.api.options) if result is not None else "?"
            reword_generator(ctx, expr, rules.msg_generator_result(method, argument, shown))
        return
    if argument == "over":
        for info in recorded_in(ctx.api.msg.errors, expr):
            if info.code == errorcodes.ARG_TYPE and at(info, expr):
                retract(ctx.api.msg.errors, info)
        message = (
            f'over= of step "{method}" is a lambda with yield, which mypy does not type as a generator; '
            "return the items instead, over=lambda c: [...] or a generator expression, "
            "over=lambda c: (x for x in ...)"
        )
    else:
        message = (
            f'{argument}= of step "{method}" is a lambda with yield, so the step would get a generator '
            "object, not a value, and mypy does not type the lambda as one; return the value itself "
            "(a list rather than its items: lambda c: [...])"
        )
    fail(ctx, message, expr, code=_errors.UNANALYZABLE)
