"""Runs a finished pipeline's steps against one session: the per-call hot path.

Everything that can be decided once (the step tuple, the keys declared inside
sub-pipelines) was decided at import; a call allocates one ``Ctx``, one values
dict and one scope dict, then walks the steps.
"""

from __future__ import annotations

import logging
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ._ctx import AnyCtx, Ctx, User
from ._results import Failure, Ok, fail
from ._steps import StepCrash, run_block

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ._finished import Program
    from ._runs import RunInfo
    from ._runtime import Runtime

logger = logging.getLogger("kumiko_typed")


class Run:
    """The mutable state of one pipeline run; resolvers see it only through ``ctx``."""

    __slots__ = ("ctx", "runtime", "scope", "session", "values")

    def __init__(
        self, values: dict[str, object], scope: dict[str, object], ctx: AnyCtx, session: Session, runtime: Runtime
    ) -> None:
        self.values = values
        self.scope = scope
        self.ctx = ctx
        self.session = session
        self.runtime = runtime


def start_run(
    finished: Program[Any, Any],
    *,
    runtime: Runtime,
    handler: str,
    payload: object,
    user: User,
    session: Session,
    now: datetime,
    correlation_id: UUID,
    workflow: RunInfo | None = None,
) -> Run:
    values: dict[str, object] = dict(finished.initial_values)
    scope: dict[str, object] = {}
    steps, scope_view = MappingProxyType(values), MappingProxyType(scope)
    ctx: AnyCtx = Ctx(payload, user, steps, scope_view, session, now, workflow, handler, correlation_id)
    return Run(values, scope, ctx, session, runtime)


def interpret(finished: Program[Any, Any], run: Run, *, handler: str) -> Ok[object] | Failure:
    """Run the steps; an escaping exception becomes ``internal_error`` naming the step."""
    try:
        result = run_block(finished.block, run)
    except StepCrash as crash:
        where = crash.where()
        logger.error("handler %s: step %s raised", handler, where, exc_info=crash.cause)
        return fail(
            "internal_error",
            f"step {where} raised {type(crash.cause).__name__}: {crash.cause}",
            {"path": "/".join(crash.path), "step": crash.step.describe()},
        )
    if result is None:
        return fail("internal_error", f"handler {handler} ran off the end of its pipeline without return_")
    return result
