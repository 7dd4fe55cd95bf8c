"""``AddStep[S, R]`` → ``S`` plus ``{name: R}``, with literal and unique names; and a
step that adds no key refuses a receiver whose keys were never worked out."""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.maptype import map_instance_to_supertype
from mypy.nodes import AssignmentStmt
from mypy.plugin import MethodContext
from mypy.typeops import make_simplified_union
from mypy.types import (
    AnyType,
    ErasedType,
    FunctionLike,
    Instance,
    NoneType,
    Type,
    TypeOfAny,
    TypeType,
    UninhabitedType,
    get_proper_type,
)

from .. import _errors
from .._names import ADD_STEP, STEP_MARKERS, STEPS_ARG, WRITE_HANDLER
from .._rules import rules
from .._typeops.args import arg_expr, arg_type, receiver_steps, where, with_arg
from .._typeops.callbacks import returned
from .._typeops.empty_results import solved
from .._typeops.keys import OpenKeys, Unknown, keys_of, make, unknown_steps
from .._typeops.literals import (
    literal_str,
    name_refused_by_mypy,
    opaque_member,
    plain_enum_member,
    plain_enum_message,
    unnamed_message,
)
from .._typeops.refused import reword
from .._typeops.reported import fail
from .._typeops.statements import statements


def add_step(method: str, ctx: MethodContext) -> Type:
    ret = get_proper_type(ctx.default_return_type)
    if not isinstance(ret, Instance):
        return ctx.default_return_type
    marker = get_proper_type(ret.args[STEPS_ARG])
    if not (isinstance(marker, Instance) and marker.type.fullname == ADD_STEP):
        return ctx.default_return_type
    previous, value = marker.args
    value = _detached(method, ctx, value) or value
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
    plain = plain_enum_member(arg_type(ctx, "name")) if name is None else None
    if plain is not None:
        # mypy said only that the enum is no str (arg-type): the same mistake, said with the fix.
        named = arg_expr(ctx, "name")
        if named is not None:
            reword(ctx, named, None, lambda _: False)
        fail(ctx, plain_enum_message(method, plain), where(ctx, "name"), code=_errors.STEP_NAME)
        return with_arg(ret, STEPS_ARG, make(ctx.api, OpenKeys(keys)))
    if name is None:
        if not name_refused_by_mypy(ctx.api, arg_type(ctx, "name")):
            fail(ctx, unnamed_message(method, arg_type(ctx, "name")), where(ctx, "name"), code=_errors.STEP_NAME)
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


def _detached(method: str, ctx: MethodContext, value: Type) -> Type | None:
    """The key's type of a step whose mypy signature leaves its type variable out of the
    return type (``AddStep[S, Any]``, ``AddStep[S, Saved[Any]]``: scripts/generate_builders.py):
    mypy solves such a variable from the type expected of the call first, so
    ``p = p.create("b", Shelf, ...)`` after a ``Product`` step refused ``Shelf``.  It is read
    from the arguments instead."""
    if method == "compute":
        return returned(ctx, "fn")
    if method in ("create", "update"):
        entity, saved = _class_of(arg_type(ctx, "entity")), get_proper_type(value)
        return None if entity is None or not isinstance(saved, Instance) else saved.copy_modified(args=[entity])
    if method == "call_feature":
        handler = get_proper_type(arg_type(ctx, "handler"))
        if not isinstance(handler, Instance):
            return None
        base = next((info for info in handler.type.mro if info.fullname == WRITE_HANDLER), None)
        return None if base is None else map_instance_to_supertype(handler, base).args[1]
    if method == "wait_for_event":
        event = _class_of(arg_type(ctx, "event"))
        return None if event is None else make_simplified_union([event, NoneType()])
    return None


def _class_of(given: Type | None) -> Type | None:
    """``E`` of an argument given for ``type[E]``: a class, or a value typed ``type[E]``."""
    proper = get_proper_type(given)
    if isinstance(proper, TypeType):
        return proper.item
    if isinstance(proper, FunctionLike) and proper.is_type_obj():  # overloaded __init__s too
        return proper.items[0].ret_type
    return None


def check_receiver(method: str, ctx: MethodContext) -> Type:
    """A step called on a builder whose steps type is still a step's marker: that step was
    called in a way no hook sees (through a variable holding the bound method,
    ``m = p.compute; m("x", ...)``), so its keys are unknown.  A step that adds keys reports
    this itself; one that adds none (``return_``, ``guard``, ``send_mail``...) would
    otherwise read every key as ``Any``.  So is a receiver whose keys mypy made ``Never``
    (keys._why_unknown), where every key would read as ``Never`` and nothing be checked."""
    steps = get_proper_type(receiver_steps(ctx))
    if (isinstance(steps, Instance) and steps.type.fullname in STEP_MARKERS) or isinstance(steps, UninhabitedType):
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
    # Not a loop's statements: reassigning there adds the step once per turn, a real
    # duplicate at run time.
    for stmt in statements(info.defn.defs.body, loops=False):
        if isinstance(stmt, AssignmentStmt) and stmt.line <= call.line <= (stmt.rvalue.end_line or stmt.line):
            return checker.lookup_type_or_none(stmt.rvalue) is not None
    return False
