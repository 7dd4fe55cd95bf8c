"""The pre-deploy check: which running or suspended runs in a database the code of an
App could not resume, and why (``app.check_runs()``, ``kumiko-typed check --against``).

It only reads.  A decision depends on a run's (workflow, path, kind, stored keys) and
not on its values (:mod:`kumiko_typed._compat`), so each such group is decided once,
however many runs it holds.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import Select, select, text
from sqlalchemy.orm import Session

from ._compat import Stored
from ._serialization import TAG
from ._tables import workflow_runs

if TYPE_CHECKING:
    from ._workflow_engine import WorkflowEngine

__all__ = ["Incompatible", "check_runs"]

#: Rows fetched per round trip: the check streams the table, it does not load it.
_CHUNK: Final = 5000


@attrs.frozen
class Incompatible:
    """Runs of ``workflow`` stopped at ``path`` that the checked code cannot resume:
    ``reason`` says exactly why (the message a stranded run would carry)."""

    workflow: str
    path: str | None
    reason: str
    run_ids: tuple[uuid.UUID, ...]


def check_runs(engine: WorkflowEngine) -> list[Incompatible]:
    """Every running or suspended run the engine's definitions cannot resume, grouped by
    workflow, path and reason (sorted by them)."""
    found: dict[tuple[str, str | None, str], list[uuid.UUID]] = defaultdict(list)
    with engine.sessions() as session:
        groups = _grouped_in_postgresql(session) if engine.postgres else _grouped(session)
        for (workflow, stored), run_ids in groups.items():
            d = engine.defs.get(workflow)
            if d is None:
                reason: str | None = f"workflow {workflow} is not registered in this App"
            elif stored is None:
                reason = None  # not suspended yet: it runs from its start
            else:
                plan = d.compat.plan(stored)
                reason = plan if isinstance(plan, str) else None
            if reason is not None:
                found[workflow, None if stored is None else stored.path, reason].extend(run_ids)
    ordered = sorted(found.items(), key=lambda item: (item[0][0], item[0][1] or "", item[0][2]))
    return [Incompatible(workflow, path, reason, tuple(sorted(ids))) for (workflow, path, reason), ids in ordered]


Groups = dict[tuple[str, Stored | None], list[uuid.UUID]]


def _grouped(session: Session) -> Groups:
    """The runs to check by (workflow, what a decision reads), read row by row."""
    stmt = select(workflow_runs.c.run_id, workflow_runs.c.workflow, workflow_runs.c.path, workflow_runs.c.state)
    groups: Groups = defaultdict(list)
    for run_id, workflow, path, state in session.execute(_unfinished(stmt).execution_options(yield_per=_CHUNK)):
        stored = None if path is None else Stored.of(path, state if isinstance(state, Mapping) else {})
        groups[workflow, stored].append(run_id)
    return groups


_VALUES, _SCOPE, _LOOPS = "state->'values'", "state->'scope'", "state->'loops'"


def _object_keys(json: str) -> str:
    return (
        f"ARRAY(SELECT jsonb_object_keys(CASE WHEN jsonb_typeof({json}) = 'object' THEN {json} "
        "ELSE '{}'::jsonb END) ORDER BY 1)"
    )


def _dict_keys(json: str) -> str:
    """The keys of a codec-encoded dict, as :meth:`Stored.of` reads them."""
    return _object_keys(f"(CASE WHEN {json}->>'{TAG}' = 'dict' THEN {json}->'v' END)")


def _grouped_in_postgresql(session: Session) -> Groups:
    """The same groups, formed by the server: only the groups and their run ids travel."""
    keyed = (
        "SELECT run_id, workflow, path, state->>'kind' AS kind, state->>'addressing' AS addressing, "
        f"{_dict_keys(_VALUES)} AS steps, {_dict_keys(_SCOPE)} AS scope, {_object_keys(_LOOPS)} AS loops "
        f"FROM {workflow_runs.name} WHERE status IN ('running', 'suspended')"
    )
    grouped = text(
        f"SELECT workflow, path, kind, addressing, steps, scope, loops, array_agg(run_id) "
        f"FROM ({keyed}) AS keyed GROUP BY workflow, path, kind, addressing, steps, scope, loops"
    )
    groups: Groups = {}
    for workflow, path, kind, addressing, steps, scope, loops, run_ids in session.execute(grouped):
        stored = None
        if path is not None:
            named = addressing == "name"
            stored = Stored(path, kind, frozenset(steps), frozenset(scope), frozenset(loops), named)
        groups.setdefault((workflow, stored), []).extend(run_ids)
    return groups


def _unfinished(stmt: Select[Any]) -> Select[Any]:
    return stmt.where(workflow_runs.c.status.in_(("running", "suspended")))
