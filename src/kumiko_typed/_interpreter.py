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

from ._ctx import AnyCtx, Command, Ctx, User
from ._results import Failure, Ok, fail
from ._steps import StepCrash, run_steps

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ._finished import Finished

logger = logging.getLogger("kumiko_typed")


class Run:
    """The mutable state of one pipeline run; resolvers see it only through ``ctx``."""

    __slots__ = ("ctx", "scope", "session", "values")

    def __init__(self, values: dict[str, object], scope: dict[str, object], ctx: AnyCtx, session: Session) -> None:
        self.values = values
        self.scope = scope
        self.ctx = ctx
        self.session = session


def start_run(
    finished: Finished[Any, Any],
    *,
    handler: str,
    payload: object,
    user: User,
    session: Session,
    now: datetime,
    correlation_id: UUID,
) -> Run:
    values: dict[str, object] = dict(finished.initial_values)
    scope: dict[str, object] = {}
    command = Command(handler, payload, user, user.tenant_id, correlation_id, now)
    ctx: AnyCtx = Ctx(payload, command, user, MappingProxyType(values), MappingProxyType(scope), session, now)
    return Run(values, scope, ctx, session)


def interpret(finished: Finished[Any, Any], run: Run, *, handler: str) -> Ok[object] | Failure:
    """Run the steps; an escaping exception becomes ``internal_error`` naming the step."""
    try:
        result = run_steps(finished.steps, run)
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
