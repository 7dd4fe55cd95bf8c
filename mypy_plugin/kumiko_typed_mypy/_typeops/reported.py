"""Reporting the plugin's errors, and the errors mypy has reported in the current file so
far, for hooks that amend them."""

from __future__ import annotations

from collections.abc import Iterator

from mypy.errorcodes import ErrorCode
from mypy.errors import ErrorInfo, Errors
from mypy.nodes import CallExpr, Context, MemberExpr
from mypy.plugin import FunctionContext, MethodContext, MethodSigContext


def recorded(errors: Errors) -> Iterator[ErrorInfo]:
    """The current file's errors so far: those recorded, and those still held by an error
    watcher.  A call's arguments are inferred under watchers that keep their errors and
    replay the same ``ErrorInfo`` objects once inference is done, after the hooks ran.
    (``_filtered`` is private to mypy, whose version is pinned; typecheck_tests/test_mypy_modes.py
    fails if this stops working.)"""
    yield from errors.error_info_map.get(errors.file, ())
    for watcher in errors.get_watchers():
        yield from watcher._filtered or ()


def fail_kept(ctx: MethodContext, msg: str, context: Context, *, code: ErrorCode) -> None:
    """:func:`fail`, kept even in mypy's first pass over a generic call's arguments, which
    infers the call's type variables and drops the errors it finds: for a mistake the
    pass that counts no longer sees, checking the arguments in the type context the first
    pass solved.  The error goes to the watcher outside the dropping ones (or is recorded);
    mypy prints a message repeated on one line once."""
    watchers = ctx.api.msg.errors._watchers
    dropping = [i for i, w in enumerate(watchers) if w._filter is True and w._filtered is None]
    if not dropping:
        fail(ctx, msg, context, code=code)
        return
    held = watchers[dropping[0] :]
    del watchers[dropping[0] :]
    try:
        fail(ctx, msg, context, code=code)
    finally:
        watchers.extend(held)


def recorded_in(errors: Errors, call: Context) -> list[ErrorInfo]:
    """:func:`recorded`, those on the lines of ``call`` (a hook's call expression): what
    mypy reported for its arguments.  A list, so that a caller may :func:`retract` them."""
    last = call.end_line if call.end_line is not None else call.line
    return [info for info in recorded(errors) if call.line <= info.line <= last]


def at(info: ErrorInfo, expr: Context) -> bool:
    """Whether mypy reported ``info`` at ``expr`` itself (its line and column), not at
    another argument or a node inside it on the same lines."""
    return (info.line, info.column) == (expr.line, expr.column)


def retract(errors: Errors, info: ErrorInfo) -> None:
    """Take back an error mypy recorded for the current file (or a watcher holds), where
    the plugin reports the same mistake in one sentence that says what to do."""
    for held in (errors.error_info_map.get(errors.file), *(w._filtered for w in errors.get_watchers())):
        if held is not None and info in held:
            held.remove(info)


def fail(
    ctx: MethodContext | MethodSigContext | FunctionContext, msg: str, context: Context, *, code: ErrorCode
) -> None:
    """Report ``msg`` at ``context``, an argument of the hook's call (in a chain of steps, the
    first line of the chain is no step's own).  A ``# type: ignore[code]`` on the line of the
    step's method name silences it too: a step whose arguments are on lines of their own
    (``.send_mail(  # type: ignore[kumiko-tier]``, then ``to=...``) is ignored where it is
    named, as it would be on one line."""
    call = ctx.context
    step_line = None
    if isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr) and call.callee.end_line is not None:
        step_line = Context(line=call.callee.end_line)
    ctx.api.msg.fail(msg, context, code=code, origin_context=step_line)
