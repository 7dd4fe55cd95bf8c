"""The pre-deploy check: which running or suspended runs in a database the code of an
App could not resume, and why (``app.check_runs()``, ``kumiko-typed check --against``).

It only reads.  A decision depends on a run's (workflow, path, kind, stored keys) and
not on its values (:mod:`kumiko_typed._compat`), so each such group is decided once,
however many runs it holds.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import Select, select, text
from sqlalchemy.orm import Session

from ._compat import Stored, Unreadable
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
    workflow, path and reason (sorted by them).  A run whose state has not the shape a
    worker writes is one: the worker fails it, with the same reason."""
    found: dict[tuple[str, str | None, str], list[uuid.UUID]] = defaultdict(list)
    with engine.sessions() as session:
        groups = _grouped_in_postgresql(session) if engine.postgres else _grouped(session)
        for (workflow, path, stored), run_ids in groups.items():
            d = engine.defs.get(workflow)
            if d is None:
                reason: str | None = f"workflow {workflow} is not registered in this App"
            elif stored is None:
                reason = None  # not suspended yet: it runs from its start
            elif isinstance(stored, str):
                reason = stored  # unreadable
            else:
                plan = d.compat.plan(stored)
                reason = plan if isinstance(plan, str) else None
            if reason is not None:
                found[workflow, path, reason].extend(run_ids)
    ordered = sorted(found.items(), key=lambda item: (item[0][0], item[0][1] or "", item[0][2]))
    return [Incompatible(workflow, path, reason, tuple(sorted(ids))) for (workflow, path, reason), ids in ordered]


#: Runs by (workflow, path, what a decision reads): ``None`` for a run not suspended
#: yet, a text for one whose state cannot be read (why).
Groups = dict[tuple[str, str | None, Stored | str | None], list[uuid.UUID]]


def _stored(status: str, path: str | None, state: object) -> Stored | str | None:
    """What :meth:`Stored.of` reads of a run, by the same rule as a worker's."""
    if status == "running" and path is None:
        return None
    try:
        return Stored.of(path, state)
    except Unreadable as exc:
        return str(exc)


def _grouped(session: Session) -> Groups:
    """The runs to check by (workflow, what a decision reads), read row by row."""
    stmt = select(
        workflow_runs.c.run_id,
        workflow_runs.c.workflow,
        workflow_runs.c.status,
        workflow_runs.c.path,
        workflow_runs.c.state,
    )
    groups: Groups = defaultdict(list)
    for run_id, workflow, status, path, state in session.execute(_unfinished(stmt).execution_options(yield_per=_CHUNK)):
        groups[workflow, path, _stored(status, path, state)].append(run_id)
    return groups


def _blank(json: str) -> str:
    """SQL: a JSON value of the same type, without its content (what the rule reads of it)."""
    return (
        f"CASE jsonb_typeof({json}) WHEN 'object' THEN '{{}}'::jsonb WHEN 'array' THEN '[]'::jsonb "
        f"WHEN 'string' THEN '\"\"'::jsonb WHEN 'number' THEN '0'::jsonb ELSE {json} END"
    )


def _each(json: str, alias: str, value: str) -> str:
    """SQL: the object ``json`` with each member's value replaced by ``value`` (over
    ``{alias}k``, ``{alias}v``); any other JSON value blanked."""
    return (
        f"CASE WHEN jsonb_typeof({json}) = 'object' THEN COALESCE((SELECT jsonb_object_agg({alias}k, {value}) "
        f"FROM jsonb_each({json}) AS {alias}({alias}k, {alias}v)), '{{}}'::jsonb) ELSE {_blank(json)} END"
    )


def _text_or_blank(json: str) -> str:
    return f"CASE WHEN jsonb_typeof({json}) IN ('string', 'null') THEN {json} ELSE {_blank(json)} END"


#: SQL: the skeleton of a run's state — every member the rule reads (:meth:`Stored.of`)
#: with its JSON type, the texts it compares, and the keys of the stored values, loops and
#: their records; no value.  Runs of one skeleton are decided alike, by the same code.
_NULL = "'null'::jsonb"
_ENCODED_DICT = _each(
    "sv",
    "d",
    f"CASE WHEN dk = 'v' THEN {_each('dv', 'e', _NULL)} "
    f"WHEN dk = '{TAG}' THEN {_text_or_blank('dv')} ELSE {_blank('dv')} END",
)
_LOOPS = _each("sv", "l", _each("lv", "r", _blank("rv")))
_SKELETON = _each(
    "state",
    "s",
    f"CASE WHEN sk IN ('kind', 'addressing', 'event') THEN {_text_or_blank('sv')} "
    f"WHEN sk IN ('values', 'scope') THEN {_ENCODED_DICT} WHEN sk = 'loops' THEN {_LOOPS} ELSE {_blank('sv')} END",
)


def _grouped_in_postgresql(session: Session) -> Groups:
    """The same groups, formed by the server: only the groups (a skeleton of the state
    each) and their run ids travel."""
    grouped = text(
        f"SELECT workflow, status, path, skeleton, array_agg(run_id) FROM ("
        f"SELECT run_id, workflow, path, CASE WHEN status = 'running' AND path IS NULL THEN 'running' "
        f"ELSE 'suspended' END AS status, {_SKELETON} AS skeleton "
        f"FROM {workflow_runs.name} WHERE status IN ('running', 'suspended')) AS runs "
        "GROUP BY workflow, status, path, skeleton"
    )
    groups: Groups = defaultdict(list)
    for workflow, status, path, skeleton, run_ids in session.execute(grouped):
        groups[workflow, path, _stored(status, path, skeleton)].extend(run_ids)
    return groups


def _unfinished(stmt: Select[Any]) -> Select[Any]:
    return stmt.where(workflow_runs.c.status.in_(("running", "suspended")))
