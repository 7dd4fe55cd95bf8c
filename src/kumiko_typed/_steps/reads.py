"""Reads: ``find_one``, ``get_one``, ``find_many`` — a ``select(...)`` built by a
resolver (once, where ``_templates`` shows that is enough), run in the handler's session
and scoped to its tenant (``_entity_reads``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._results import fail
from ._base import Fn, NamedStep, Result
from ._templates import read_entities

if TYPE_CHECKING:
    from .._interpreter import Run

__all__ = ["FindMany", "FindOne", "GetOne"]


@attrs.frozen(slots=True)
class FindOne(NamedStep):
    kind = "read.find_one"
    query: Fn

    def execute(self, run: Run) -> Result:
        found = read_entities(run, self.query, first=True)
        run.values[self.name] = found[0] if found else None
        return None


@attrs.frozen(slots=True)
class GetOne(NamedStep):
    kind = "read.get_one"
    query: Fn

    def execute(self, run: Run) -> Result:
        found = read_entities(run, self.query, first=True)
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
        run.values[self.name] = read_entities(run, self.query, first=False, limit=self.limit)
        return None
