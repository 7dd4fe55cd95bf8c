"""mypy's error for a callback it refused as an argument of a step, said in the plugin's words.

mypy's ``arg-type`` error for a step's callback shows the whole callable type expected (the
context's ``Ctx[...]`` with its ``TypedDict`` of keys, a ``D`` the plugin detached) and, for
a lambda, says the same mistake again from inside it (a ``return-value`` error, or ``Cannot
infer type of lambda``).  One sentence that says what to give instead replaces the first,
and the repeats are taken back: one mistake, one error.  A lambda with ``yield`` where the
step fixes the result type is refused by mypy under ``misc``, for its return type: that is
replaced the same way (``reword_generator``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from mypy import errorcodes
from mypy.errors import ErrorInfo
from mypy.nodes import Expression, LambdaExpr
from mypy.plugin import MethodContext

from .. import _errors
from .reported import at, fail, recorded_in, retract


def reword(
    ctx: MethodContext,
    expr: Expression,
    why: str | None,
    repeats: Callable[[ErrorInfo], bool],
    *,
    replace: bool = True,
) -> bool:
    """mypy's ``arg-type`` error at argument ``expr`` said as ``why`` (instead of it, or after it
    when not ``replace``; taken back when ``why`` is ``None``, for an error of the plugin's
    that says it already), and the errors within ``expr`` that ``repeats`` recognises taken
    back; whether mypy had refused ``expr`` at all (nothing changes where it had not).  The
    notes mypy added to the error it replaces (a callable object's ``__call__`` type) explain
    its wording, not the plugin's, and are taken back too."""
    errors = recorded_in(ctx.api.msg.errors, ctx.context)
    at = [i for i in errors if i.code == errorcodes.ARG_TYPE and (i.line, i.column) == (expr.line, expr.column)]
    refused = [i for i in at if i.severity == "error"]
    if not refused:
        return False
    for info in refused:
        if why is None:
            retract(ctx.api.msg.errors, info)
        else:
            info.message = why if replace else f"{info.message}; {why}"
    last = expr.end_line if expr.end_line is not None else expr.line
    repeated: set[tuple[int, int]] = set()
    for info in errors:
        if replace and info.severity == "note" and info in at:
            retract(ctx.api.msg.errors, info)
        elif info.severity == "error" and expr.line <= info.line <= last and repeats(info):
            retract(ctx.api.msg.errors, info)
            repeated.add((info.line, info.column))
    for info in errors:  # a repeat's own notes (``Maybe you forgot to use "await"?``)
        if info.severity == "note" and (info.line, info.column) in repeated:
            retract(ctx.api.msg.errors, info)
    return True


_NOT_GENERATOR: Final = "The return type of a generator function"


def said_generator(ctx: MethodContext, expr: LambdaExpr) -> bool:
    """Whether mypy refused lambda ``expr``, which has ``yield``, as a generator function whose
    return type is no ``Generator`` (where the step fixes the result type: ``bool`` for
    ``when=``, ``Ok[D] | Failure`` for ``return_``)."""
    return any(
        info.message.startswith(_NOT_GENERATOR) and at(info, expr) for info in recorded_in(ctx.api.msg.errors, expr)
    )


def reword_generator(ctx: MethodContext, expr: LambdaExpr, why: str) -> None:
    """mypy's refusal of lambda ``expr`` as a generator function (``said_generator``), which
    says what the lambda's type should be, said as ``why`` under ``kumiko-unanalyzable``
    (as the plugin says it where the step takes any result), with mypy's ``arg-type`` error
    at it (a ``yield from`` of a list returns ``None``) taken back: it is the same mistake.
    Nothing changes where mypy said nothing."""
    if not said_generator(ctx, expr):
        return
    for info in recorded_in(ctx.api.msg.errors, expr):
        if at(info, expr) and (info.message.startswith(_NOT_GENERATOR) or info.code == errorcodes.ARG_TYPE):
            retract(ctx.api.msg.errors, info)
    fail(ctx, why, expr, code=_errors.UNANALYZABLE)
