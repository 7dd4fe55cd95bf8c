"""A ``retry``'s ``times=`` written as a literal the App refuses at boot: ``0``, a negative
count, or ``True`` (a ``bool`` is an ``int`` to mypy, so ``times: int`` accepted all three).
The plugin reads the literal (or a ``Final`` constant holding one) from the argument's type
and says what the boot would, in the rule table's words, at the argument (``kumiko-duration``,
the code of a workflow step's other literal the boot refuses).  A count computed at run time
is the boot's to check."""

from __future__ import annotations

from mypy.plugin import MethodContext
from mypy.types import Instance, LiteralType, Type, get_proper_type

from .. import _errors
from .._rules import rules
from .._typeops.args import arg_expr, arg_type
from .._typeops.reported import fail


def check(ctx: MethodContext) -> Type:
    expr, given = arg_expr(ctx, "times"), arg_type(ctx, "times")
    times = _literal_int(given) if given is not None else None
    problem = rules.retry_times_problem(times) if times is not None else None
    if expr is not None and problem is not None:
        fail(ctx, problem, expr, code=_errors.DURATION)
    return ctx.default_return_type


def _literal_int(given: Type) -> int | None:
    """The ``int`` (or ``bool``) value a type holds as a literal (``Literal[0]?``, ``-1``, a
    ``Final`` constant), or ``None``."""
    proper = get_proper_type(given)
    if isinstance(proper, Instance) and proper.last_known_value is not None:
        proper = proper.last_known_value
    if isinstance(proper, LiteralType) and isinstance(proper.value, int):
        return proper.value
    return None
