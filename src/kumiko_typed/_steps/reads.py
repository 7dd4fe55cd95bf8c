"""Reads: ``find_one``, ``get_one``, ``find_many`` — a ``select(...)`` built by a
resolver, run in the handler's session and scoped to its tenant (``_entity_reads``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from sqlalchemy import Select

from .._errors import StepRefused
from .._results import fail
from ._base import Fn, NamedStep, Result
from ._entity_reads import select_entities

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["FindMany", "FindOne", "GetOne"]


def _select(query: Callable[[Any], object], run: Run) -> Select[Any]:
    stmt = query(run)
    if not isinstance(stmt, Select):
        raise StepRefused(f"the query must return a select(...), not {type(stmt).__name__}")
    return stmt


@attrs.frozen(slots=True)
class FindOne(NamedStep):
    kind = "read.find_one"
    query: Fn

    def execute(self, run: Run) -> Result:
        found = select_entities(run.session, _select(self.query, run), first=True)
        run.values[self.name] = found[0] if found else None
        return None


@attrs.frozen(slots=True)
class GetOne(NamedStep):
    kind = "read.get_one"
    query: Fn

    def execute(self, run: Run) -> Result:
        found = select_entities(run.session, _select(self.query, run), first=True)
        row = found[0] if found else None
        if row is None:
            return fail("not_found", f'step "{self.name}": no row matched', {"step": self.name})
        run.values[self.name] = row
        return None


@attrs.frozen(slots=True)
class FindMany(NamedStep):
    kind = "read.find_many"
    query: Fn
    limit: int | None

    def execute(self, run: Run) -> Result:
        stmt = _select(self.query, run)
        if self.limit is not None:
            stmt = stmt.limit(self.limit)
        run.values[self.name] = select_entities(run.session, stmt, first=False)
        return None
