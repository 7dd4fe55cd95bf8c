"""``AddStep[S, R]`` → ``S`` plus ``{name: R}``, with literal and unique names; and a
step that adds no key refuses a receiver whose keys were never worked out."""

from __future__ import annotations

from collections.abc import Iterator

from mypy.checker import TypeChecker
from mypy.nodes import AssignmentStmt, Block, IfStmt, MatchStmt, Statement, TryStmt, WithStmt
from mypy.plugin import MethodContext
from mypy.types import (
    AnyType,
    ErasedType,
    Instance,
    Type,
    TypeOfAny,
    get_proper_type,
)

from .. import _errors
from .._names import ADD_STEP, STEP_MARKERS, STEPS_ARG
from .._rules import rules
from .._typeops.args import arg_expr, arg_type, receiver_steps, where, with_arg
from .._typeops.callbacks import returned
from .._typeops.empty_results import solved
from .._typeops.keys import OpenKeys, Unknown, keys_of, make, unknown_steps
from .._typeops.literals import literal_str, name_refused_by_mypy, opaque_member
from .._typeops.reported import fail


def add_step(method: str, ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance):
        return ctx.default_return_type
    marker = get_proper_type(ret.args[STEPS_ARG])
    if not (isinstance(marker, Instance) and marker.type.fullname == ADD_STEP):
        return ctx.default_return_type
    previous, value = marker.args
    if method == "compute":  # its result type was detached from the call (see bodies.py)
        value = returned(ctx, "fn") or value
    if isinstance(get_proper_type(value), ErasedType):
        # No fn= at all (mypy reports the missing argument): the detached variable is
        # left erased, a type mypy cannot write to its cache.
        value = AnyType(TypeOfAny.from_error)
    keys = keys_of(previous)
    if isinstance(keys, Unknown):
        return with_arg(ret, STEPS_ARG, unknown_steps(ctx, keys, method))
    name = literal_str(arg_type(ctx, "name"), arg_expr(ctx, "name"))
    if name is None and opaque_member(arg_type(ctx, "name"), arg_expr(ctx, "name")):
        # An error, not a silent Any (DESIGN 4.7); later reads of that key are then Any, so
        # the one mistake is reported once.
        fail(ctx, rules.msg_unknown_member_value(method), where(ctx, "name"), code=_errors.STEP_NAME)
        return with_arg(ret, STEPS_ARG, make(ctx.api, OpenKeys(keys)))
    if name is None:
        if not name_refused_by_mypy(ctx.api, arg_type(ctx, "name")):
            fail(ctx, rules.msg_step_name(method), where(ctx, "name"), code=_errors.STEP_NAME)
        # The step adds a key nobody can name here: reads of it are Any, as after an
        # unknowable enum member, rather than a second error at each read.
        return with_arg(ret, STEPS_ARG, make(ctx.api, OpenKeys(keys)))
    if not name:
        fail(ctx, rules.msg_empty_step_name(method), where(ctx, "name"), code=_errors.STEP_NAME)
        return with_arg(ret, STEPS_ARG, make(ctx.api, keys))
    if name in keys:
        # The first definition's type stays: later steps were written against it.
        if not _rechecked(ctx):
            fail(ctx, rules.msg_duplicate_step(name), where(ctx, "name"), code=_errors.DUPLICATE_STEP)
    else:
        keys[name] = solved(ctx, value, f'step "{name}"')
    return with_arg(ret, STEPS_ARG, make(ctx.api, keys))


def check_receiver(method: str, ctx: MethodContext) -> Type:
    """A step called on a builder whose steps type is still a step's marker: that step was
    called in a way no hook sees (through a variable holding the bound method,
    ``m = p.compute; m("x", ...)``), so its keys are unknown.  A step that adds keys reports
    this itself; one that adds none (``return_``, ``guard``, ``send_mail``...) would
    otherwise read every key as ``Any``."""
    steps = get_proper_type(receiver_steps(ctx))
    if isinstance(steps, Instance) and steps.type.fullname in STEP_MARKERS:
        keys = keys_of(steps)
        if isinstance(keys, Unknown):
            unknown_steps(ctx, keys, method)
    return ctx.default_return_type


def _rechecked(ctx: MethodContext) -> bool:
    """Whether this is mypy's second check of a class attribute's assignment.

    After ``base = base.compute("a", ...)`` in a class body, mypy checks the right-hand side
    once more for its override check (``check_compatibility_all_supers``), with ``base``
    already narrowed to what this step made: its own key reads as a duplicate.  The first
    check stored the right-hand side's type, so a stored one means this is the second, which
    reports nothing: a real duplicate in the expression was reported by the first."""
    checker, call = ctx.api, ctx.context
    info = checker.scope.active_class() if isinstance(checker, TypeChecker) else None
    if info is None or not isinstance(checker, TypeChecker):
        return False
    for stmt in _statements(info.defn.defs.body):
        if isinstance(stmt, AssignmentStmt) and stmt.line <= call.line <= (stmt.rvalue.end_line or stmt.line):
            return checker.lookup_type_or_none(stmt.rvalue) is not None
    return False


def _statements(body: list[Statement]) -> Iterator[Statement]:
    """The statements of a class body, those in its ``if``/``match``/``with``/``try`` blocks too
    (``if X: base = base.compute(...)`` is a class attribute's assignment as well).  Not a
    loop's: reassigning there adds the step once per turn, a real duplicate at run time."""
    for stmt in body:
        yield stmt
        blocks: list[Block | None] = []
        if isinstance(stmt, IfStmt):
            blocks += [*stmt.body, stmt.else_body]
        elif isinstance(stmt, WithStmt):
            blocks.append(stmt.body)
        elif isinstance(stmt, MatchStmt):
            blocks += stmt.bodies
        elif isinstance(stmt, TryStmt):
            blocks += [stmt.body, *stmt.handlers, stmt.else_body, stmt.finally_body]
        for block in blocks:
            if block is not None:
                yield from _statements(block.body)
