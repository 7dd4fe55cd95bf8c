"""An empty ``name=`` of a ``wait``, a ``branch`` or a ``retry``.

A stored run finds its step by that name (``RunInfo.path``), so the App refuses an empty one
at boot; mypy accepted it.  Said at the step, in the boot's words, under ``kumiko-step-name``
(the code of an empty key or loop item name)."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import Type

from .. import _errors
from .._rules import rules
from .._typeops.args import arg_expr
from .._typeops.literals import literal_str_expr
from .._typeops.reported import fail

#: The steps named by a ``name=`` of their own (the others by their key or loop item).
METHODS = frozenset({"wait", "branch", "retry"})


def refuse_empty(method: str, ctx: MethodContext) -> Type:
    expr = arg_expr(ctx, "name")
    if expr is not None and literal_str_expr(expr) == "":
        fail(ctx, rules.msg_empty_given_name(method), expr, code=_errors.STEP_NAME)
    return ctx.default_return_type
