"""Keep the errors inside a pipeline's lambdas across ``dmypy`` updates.

mypy files every error under a fine-grained *target*: the module, or the top-level
function it sits in.  A lambda that is not inside a ``def`` becomes the target itself,
and a lambda has no name, so its errors are filed under ``""`` (mypy 2.4: ``Scope``
returns the lambda's empty ``fullname``).  On each update dmypy drops every error and
re-checks the targets that had some; ``""`` is not among them, so after an edit in any
other module the errors of module-level lambdas vanish until their own file changes.
Every key error of a pipeline sits in such a lambda.

The workaround: each builder call's hook runs after mypy has checked that call's
lambdas, in the scope that encloses them; it files the file's unnamed-target errors
under that scope's target, which is what mypy does for a lambda inside a ``def``.  The
daemon then re-checks that module top level (or function) and the errors come back.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.plugin import CheckerPluginInterface, MethodContext
from mypy.types import Type

from ._typeops.reported import recorded


def refile(api: CheckerPluginInterface) -> None:
    """File this module's errors that have the empty target under the current target."""
    errors = api.msg.errors
    target = errors.current_target()
    if not target:
        return  # still inside a lambda: the hook of the call around it does it
    for info in recorded(errors):
        if info.target == "":
            info.target = target


def keeping_lambda_errors(hook: Callable[[MethodContext], Type]) -> Callable[[MethodContext], Type]:
    """``hook``, then :func:`refile`."""

    def run(ctx: MethodContext) -> Type:
        result = hook(ctx)
        refile(ctx.api)
        return result

    return run
