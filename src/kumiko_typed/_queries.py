"""Running a query handler: the same checks and the same transaction runner as a
dispatch, but in a read-only transaction that is never committed."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._interpreter import exception_failure, once_more_if_lost, run_in_scope, start_run, unavailable
from ._results import Failure, Ok

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ._ctx import User
    from ._feature import QueryHandler
    from ._registry import Registry

__all__ = ["run_query"]


def run_query(
    sessions: sessionmaker[Session],
    registry: Registry,
    clock: Callable[[], datetime],
    query: QueryHandler[Any, Any],
    payload: object,
    user: User,
    correlation_id: uuid.UUID | None,
) -> Ok[object] | Failure:
    """Run ``query`` (already looked up, roles and payload checked) as ``user``; once
    more if its connection was found dead (``once_more_if_lost``)."""

    def attempt() -> Ok[object] | Failure:
        with sessions() as session:
            try:
                call = (query.name, payload, user, clock(), correlation_id or uuid.uuid4())
                run = start_run(query.pipeline, session, registry, call)
                outcome = run_in_scope(
                    query.pipeline,
                    run,
                    who=f"query {query.name}",
                    nested=False,
                    read_only=True,
                    span_name="kumiko.query",
                )
            except Exception as exc:
                session.rollback()
                where = f"query {query.name}"
                return exception_failure(exc, f"{where}, outside its steps,", where, {"query": query.name})
        assert isinstance(outcome, (Ok, Failure))  # a query's steps never suspend: boot refuses them
        return outcome

    return once_more_if_lost(unavailable, attempt)
