"""Registering pipelines: a handler needs a finished pipeline of its own feature, a
workflow a workflow pipeline of its own feature whose payload is its trigger's.

mypy's own check already rejects an unfinished pipeline and a payload mismatch, but
as an argument type error plus a type variable it cannot solve; this reports one
sentence that says what to do, at the argument that is wrong.
"""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.nodes import CallExpr, Expression, MemberExpr, NameExpr
from mypy.plugin import FunctionContext, MethodContext, MethodSigContext
from mypy.subtypes import is_same_type
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    LiteralType,
    ProperType,
    Type,
    TypeOfAny,
    UnionType,
    get_proper_type,
)

from .. import _errors
from .._names import (
    BUILDER_CORE,
    FINISHED,
    HANDLER_BUILDER,
    PROGRAM,
    QUERY_BUILDER,
    QUERY_FINISHED,
    TRIGGER,
    WORKFLOW_BUILDER,
    WORKFLOW_FINISHED,
)
from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.chain import calls_back
from .._typeops.keys import lookup_info
from .._typeops.literals import literal_str
from .._typeops.reported import fail, recorded_in, retract

_STARTERS = frozenset({"pipeline", "workflow_pipeline", "query_pipeline"})


def accept_unfinished(ctx: MethodSigContext) -> CallableType:
    """Let ``write_handler`` and ``query_handler`` take any builder or ended pipeline, so
    that a missing ``return_`` (or the other kind of pipeline) is reported once, as
    ``kumiko-no-return``, not also as ``arg-type`` and ``var-annotated``."""
    sig = ctx.default_signature
    if "pipeline" not in sig.arg_names:
        return sig
    index = sig.arg_names.index("pipeline")
    arg_types = list(sig.arg_types)
    # The other kinds of ended pipeline too (a query's or a workflow's given to
    # write_handler, a write or workflow pipeline's to query_handler), so that it is
    # reported once, saying which to use.
    write = ctx.default_signature.name == "write_handler of Feature"
    others = [lookup_info(ctx.api, QUERY_FINISHED if write else FINISHED), lookup_info(ctx.api, WORKFLOW_FINISHED)]
    builder = lookup_info(ctx.api, BUILDER_CORE)
    if builder is None or None in others:
        return sig
    anything = AnyType(TypeOfAny.special_form)
    ended = [Instance(info, [anything, anything]) for info in others if info is not None]
    arg_types[index] = UnionType.make_union([arg_types[index], Instance(builder, []), *ended])
    return sig.copy_modified(arg_types=arg_types)


def accept_other_pipelines(ctx: MethodSigContext) -> CallableType:
    """Let ``workflow`` take a write handler's or a query's pipeline (ended or not), so
    that one is reported once, as ``kumiko-workflow-pipeline``, not as a ``call-overload``
    listing both variants.  Those classes only: a workflow pipeline must still match its
    own variant alone, or a payload mismatch would no longer leave ``P`` unsolved."""
    sig = ctx.default_signature
    if "pipeline" not in sig.arg_names:
        return sig
    index = sig.arg_names.index("pipeline")
    wanted = get_proper_type(sig.arg_types[index])
    if isinstance(wanted, Instance) and wanted.type.fullname == WORKFLOW_FINISHED:
        return sig  # the variant that infers the result type: widened, it would match a builder
    others = [lookup_info(ctx.api, name) for name in (HANDLER_BUILDER, FINISHED, QUERY_BUILDER, QUERY_FINISHED)]
    if None in others:
        return sig
    anything = AnyType(TypeOfAny.special_form)
    given = [Instance(info, [anything] * len(info.type_vars)) for info in others if info is not None]
    arg_types = list(sig.arg_types)
    arg_types[index] = UnionType.make_union([arg_types[index], *given])
    return sig.copy_modified(arg_types=arg_types)


def check_workflow_pipeline(ctx: MethodContext) -> Type:
    """A workflow takes a workflow pipeline (ended or not); then its payload is checked."""
    given, expr = _own_type(ctx, "pipeline"), arg_expr(ctx, "pipeline")
    workflows = (WORKFLOW_BUILDER, WORKFLOW_FINISHED)
    if isinstance(given, Instance) and expr is not None and not any(given.type.has_base(w) for w in workflows):
        fail(ctx, rules.msg_workflow_pipeline(given.type.name), expr, code=_errors.WORKFLOW_PIPELINE)
        return AnyType(TypeOfAny.from_error)
    return check_trigger_payload(ctx)


def _not_a_pipeline(given: ProperType | None) -> bool:
    """No pipeline given (``write_handler("h")``), or neither a builder nor an ended
    pipeline (``write_handler("h", 3)``): mypy's own error says so.  A ``kumiko-no-return``
    telling to end it with ``return_`` would repeat it, wrongly, and a handler type with
    nothing to infer ``D`` from would add ``var-annotated`` at the assignment."""
    if given is None:
        return True
    return isinstance(given, Instance) and not given.type.has_base(BUILDER_CORE) and not given.type.has_base(PROGRAM)


def check_handler_pipeline(ctx: MethodContext) -> Type:
    given = get_proper_type(arg_type(ctx, "pipeline"))
    expr = arg_expr(ctx, "pipeline")
    _check_own_feature(ctx)
    if _not_a_pipeline(given):
        return AnyType(TypeOfAny.from_error)
    if isinstance(given, Instance) and expr is not None and not given.type.has_base(FINISHED):
        fail(ctx, rules.msg_no_return(given.type.name), expr, code=_errors.NO_RETURN)
        return AnyType(TypeOfAny.from_error)
    return ctx.default_return_type


def check_query_pipeline(ctx: MethodContext) -> Type:
    """``query_handler`` takes a query pipeline ended with ``return_``: anything else (an
    unfinished builder, a write pipeline) is one ``kumiko-no-return`` saying what to do."""
    given = get_proper_type(arg_type(ctx, "pipeline"))
    expr = arg_expr(ctx, "pipeline")
    _check_own_feature(ctx)
    if _not_a_pipeline(given):
        return AnyType(TypeOfAny.from_error)
    if isinstance(given, Instance) and expr is not None and not given.type.has_base(QUERY_FINISHED):
        fail(ctx, rules.msg_query_registration(given.type.name), expr, code=_errors.NO_RETURN)
        return AnyType(TypeOfAny.from_error)
    return ctx.default_return_type


def _own_type(ctx: MethodContext, name: str) -> ProperType | None:
    """An argument's type on its own: when mypy could not solve the call's type
    variable, the argument types it hands the hook are erased to ``Any``."""
    expr = arg_expr(ctx, name)
    if expr is None:
        return None
    with ctx.api.msg.filter_errors():
        return get_proper_type(ctx.api.get_expression_type(expr))


def check_trigger_payload(ctx: MethodContext) -> Type:
    _check_own_feature(ctx)
    trigger = _own_type(ctx, "trigger")
    pipeline = _own_type(ctx, "pipeline")
    expr = arg_expr(ctx, "pipeline")
    if not (isinstance(trigger, Instance) and isinstance(pipeline, Instance) and expr is not None):
        return ctx.default_return_type
    if not (trigger.type.fullname == TRIGGER and trigger.args and pipeline.args):
        return ctx.default_return_type
    given, wanted = get_proper_type(trigger.args[0]), get_proper_type(pipeline.args[0])
    if not is_same_type(given, wanted):
        message = rules.msg_trigger_payload(_short(given), _short(wanted))
        fail(ctx, message, expr, code=_errors.TRIGGER_PAYLOAD)
        _retract_unsolved_payload(ctx)
    return ctx.default_return_type


def _retract_unsolved_payload(ctx: MethodContext) -> None:
    """mypy's own error for the same mistake, the payload type variable it could not solve
    from two payloads, is taken back: the sentence above says which to change."""
    for info in recorded_in(ctx.api.msg.errors, ctx.context):
        if info.message.startswith(_UNSOLVED_PAYLOAD):
            retract(ctx.api.msg.errors, info)


_UNSOLVED_PAYLOAD = 'Cannot infer value of type parameter "P" of "workflow"'


def _short(t: ProperType) -> str:
    return t.type.name if isinstance(t, Instance) else str(t)


def _starting_feature(expr: Expression) -> tuple[NameExpr | MemberExpr, str] | None:
    """``f`` in ``f.pipeline(P).compute(...)...`` (a feature a chain was started from), and
    the method it was started with."""
    for _, callee in calls_back(expr):
        if callee.name in _STARTERS:
            feature = callee.expr
            return (feature, callee.name) if isinstance(feature, (NameExpr, MemberExpr)) else None
    return None


def _starter(pipeline: ProperType | None) -> str:
    """The feature's method a pipeline of this type is started with."""
    if isinstance(pipeline, Instance):
        if any(pipeline.type.has_base(n) for n in (WORKFLOW_BUILDER, WORKFLOW_FINISHED)):
            return "workflow_pipeline"
        if any(pipeline.type.has_base(n) for n in (QUERY_BUILDER, QUERY_FINISHED)):
            return "query_pipeline"
    return "pipeline"


def _check_own_feature(ctx: MethodContext) -> None:
    """A pipeline must be registered on the feature it was started from.

    Which feature a pipeline was started from is carried by its type (:func:`carry_brand`),
    so a pipeline kept in a variable, or built in another module, is checked too; where the
    call chains it from a name (``plain.write_handler("h", mailer.pipeline(P)...)``), the
    message names the feature by that name, else by the feature's own name (as boot does).
    """
    call, expr = ctx.context, arg_expr(ctx, "pipeline")
    mine = _branded(ctx.type)
    if not (isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr) and expr is not None and mine):
        return
    given = get_proper_type(arg_type(ctx, "pipeline"))
    started = _starting_feature(expr)
    theirs = _branded(given)
    if theirs is None and started is not None and isinstance(ctx.api, TypeChecker):
        # (a call whose type variable mypy could not solve erases the argument's type)
        theirs = _branded(ctx.api.lookup_type_or_none(started[0]))
    if theirs is None or theirs == mine:
        return
    owner = call.callee.expr
    registered_on = owner.name if isinstance(owner, (NameExpr, MemberExpr)) else mine
    built_by, starter = (started[0].name, started[1]) if started is not None else (theirs, _starter(given))
    fail(ctx, rules.msg_foreign_pipeline(built_by, registered_on, starter), expr, code=_errors.FOREIGN_PIPELINE)


#: The attribute a ``Feature(...)`` call's type carries its name in (see :func:`brand`).
_BRAND = "__kumiko_feature__"


def brand(ctx: FunctionContext) -> Type:
    """``Feature("shop")`` is typed as a ``Feature`` that carries its name (in the type's
    ``extra_attrs``, which mypy's cache keeps), so every name it is assigned to, imported
    or aliased, says which feature it holds.  Two features are told apart by their names,
    which boot requires unique.  A name that is no literal brands nothing: not checked.

    (Reading the ``Feature(...)`` assignments from the module's syntax instead found none in
    another module: mypy frees a checked module's statements, and a cached one has none.)"""
    ret = get_proper_type(ctx.default_return_type)
    given = ctx.args[0] if ctx.args else []
    name = literal_str(ctx.arg_types[0][0], given[0]) if given and ctx.arg_types[0] else None
    if not isinstance(ret, Instance) or name is None:
        return ctx.default_return_type
    literal = LiteralType(name, ctx.api.named_generic_type("builtins.str", []))
    return ret.copy_with_extra_attr(_BRAND, literal)


def carry_brand(ctx: MethodContext) -> Type:
    """A pipeline started from a branded feature (``shop.pipeline(P)``), and each step's
    builder after it up to ``return_``'s ended pipeline, carries the feature's name on:
    registering it on another feature is then reported wherever it was built."""
    held = _brand(ctx.type)
    ret = get_proper_type(ctx.default_return_type)
    if held is None or not isinstance(ret, Instance) or _brand(ret) is not None:
        return ctx.default_return_type
    return ret.copy_with_extra_attr(_BRAND, held)


def _brand(t: Type | None) -> Type | None:
    p = get_proper_type(t) if t is not None else None
    return p.extra_attrs.attrs.get(_BRAND) if isinstance(p, Instance) and p.extra_attrs else None


def _branded(t: Type | None) -> str | None:
    """The feature name a ``Feature`` type (or a pipeline's) carries; ``None`` when it is not known."""
    held = _brand(t)
    literal = get_proper_type(held) if held is not None else None
    return literal.value if isinstance(literal, LiteralType) and isinstance(literal.value, str) else None
