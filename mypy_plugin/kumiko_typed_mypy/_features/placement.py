"""Steps in the wrong builder: tier 3 outside workflows, ``return_`` in sub-pipelines,
writes in queries.

The builders declare these as ``@deprecated`` stubs returning ``Never``; here they
become errors under their own codes, and the call's type becomes ``Any`` so one
mistake does not cascade into unreachable-code noise.
"""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import AnyType, Type, TypeOfAny

from .. import _errors
from .._rules import rules
from .._typeops.args import where
from .._typeops.reported import fail


def refuse_return(builder: str, ctx: MethodContext) -> Type:
    fail(ctx, rules.msg_return_in_subpipeline(builder), where(ctx), code=_errors.RETURN_IN_SUBPIPELINE)
    return AnyType(TypeOfAny.from_error)


def refuse_workflow_only(builder: str, kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    fail(ctx, rules.msg_workflow_only(kind, method, builder), where(ctx), code=_errors.WORKFLOW_ONLY)
    return AnyType(TypeOfAny.from_error)


def refuse_read_only(builder: str, kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    fail(ctx, rules.msg_read_only(kind, method, builder), where(ctx), code=_errors.READ_ONLY)
    return AnyType(TypeOfAny.from_error)
