"""Steps in the wrong builder: tier 3 outside workflows, ``return_`` in sub-pipelines,
writes in queries.

The builders declare these as ``@deprecated`` stubs returning ``Never``; here they
become errors under their own codes, and the call's type becomes ``Any`` so one
mistake does not cascade into unreachable-code noise.  With ``enable_error_code =
deprecated`` mypy reports the stub too, in the same words: that report is taken back, so
one mistake is one error, silenced by its own code.
"""

from __future__ import annotations

from mypy import errorcodes
from mypy.plugin import MethodContext
from mypy.types import AnyType, Type, TypeOfAny

from .. import _errors
from .._names import method as full_name
from .._rules import rules
from .._typeops.args import where
from .._typeops.reported import fail, recorded_in, retract


def refuse_return(builder: str, ctx: MethodContext) -> Type:
    fail(ctx, rules.msg_return_in_subpipeline(builder), where(ctx), code=_errors.RETURN_IN_SUBPIPELINE)
    return _refused(ctx, builder, "return_")


def refuse_workflow_only(builder: str, kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    fail(ctx, rules.msg_workflow_only(kind, method, builder), where(ctx), code=_errors.WORKFLOW_ONLY)
    return _refused(ctx, builder, method)


def refuse_read_only(builder: str, kind: str, ctx: MethodContext) -> Type:
    method = rules.RULES_BY_KIND[kind].method
    fail(ctx, rules.msg_read_only(kind, method, builder), where(ctx), code=_errors.READ_ONLY)
    return _refused(ctx, builder, method)


def _refused(ctx: MethodContext, builder: str, method: str) -> Type:
    """Takes back mypy's ``deprecated`` report of this stub (reported before the hook runs),
    and the note mypy adds to it on a line whose ``# type: ignore[kumiko-...]`` does not name
    ``deprecated``."""
    stub = f"function {full_name(builder, method)} is deprecated:"
    errors = ctx.api.msg.errors
    recorded = recorded_in(errors, ctx.context)
    lines: set[int] = set()
    for info in recorded:
        if info.code == errorcodes.DEPRECATED and info.message.startswith(stub):
            retract(errors, info)
            lines.add(info.line)
    for info in recorded:
        if info.line in lines and info.severity == "note" and info.message.startswith(_NOT_COVERED):
            retract(errors, info)
    return AnyType(TypeOfAny.from_error)


_NOT_COVERED = f'Error code "{errorcodes.DEPRECATED.code}" not covered by "type: ignore'
