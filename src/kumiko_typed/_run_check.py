"""The pre-deploy check: which running or suspended runs in a database the code of an
App could not resume, and why (``app.check_runs()``, ``kumiko-typed check --against``).

It only reads.  Whether the definition can resume a run depends on the run's (workflow,
path, kind, stored keys) and not on its values (:mod:`kumiko_typed._compat`), so each
such group is decided once, however many runs it holds.  Whether this App's classes can
rebuild what the run stored does depend on the values: the runs that may name a class are
decoded one by one, as a worker decodes them (:mod:`kumiko_typed._stored_classes`).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import attrs
from sqlalchemy import Select, case, literal_column, select, text
from sqlalchemy.orm import Session

from ._compat import SIBLINGS, Stored, Unreadable
from ._errors import ClassMismatch
from ._read_only import reading
from ._serialization import FORMAT, FORMAT_KEY, TAG
from ._stored_classes import (
    PARTS,
    UNREADABLE,
    WOKEN_BY,
    expanded,
    mismatch,
    parts_of,
    read_first,
    read_parts,
    rebuild,
    unreadable,
)
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
    with reading(engine.sessions) as session:
        groups = _grouped_in_postgresql(session) if engine.postgres else _grouped(session)
        for (workflow, path, stored), run_ids in groups.items():
            d = engine.defs.get(workflow)
            if d is None:
                reason: str | None = (
                    f"workflow {workflow} is not registered in this App: its runs wait, untouched, until a deploy"
                    " registers it again (or cancel them: app.cancel_run, kumiko-typed runs cancel)"
                )
            elif stored is None:
                reason = None  # it runs from its start: no step to find
            elif isinstance(stored, str):
                reason = stored  # unreadable
            else:
                plan = d.compat.plan(stored)
                reason = plan if isinstance(plan, str) else None
            if reason is not None:
                found[workflow, path, reason].extend(run_ids)
        judged = {run_id for run_ids in found.values() for run_id in run_ids}
        for workflow, path, reason, run_id in _unrebuildable(session, engine, judged):
            found[workflow, path, reason].append(run_id)
    ordered = sorted(found.items(), key=lambda item: (item[0][0], item[0][1] or "", item[0][2]))
    return [Incompatible(workflow, path, reason, tuple(sorted(ids))) for (workflow, path, reason), ids in ordered]


#: Runs by (workflow, path, what a decision reads): ``None`` for a run without a path,
#: a text for one whose state cannot be read (why).
Groups = dict[tuple[str, str | None, Stored | str | None], list[uuid.UUID]]


def _stored(session: Session, run_id: uuid.UUID, path: str | None, state: object) -> Stored | str | None:
    """What :meth:`Stored.of` reads of a run, by the same rule as a worker's: a run
    without a path (not suspended yet, or kept at its start after its first segment
    lost a race) goes on from its start, whatever its state (its parts put back)."""
    if path is None:
        return None
    try:
        return Stored.of(path, _with_parts(session, run_id, state))
    except Unreadable as exc:
        return str(exc)
    except UNREADABLE as exc:  # its parts named wrong or missing: the worker fails it so
        return str(unreadable(exc))


def _with_parts(session: Session, run_id: uuid.UUID, state: object) -> object:
    """A run's state with the parts put back a worker reads before it resumes the run
    (:func:`read_first`; its other parts :func:`_unrebuildable` reads)."""
    if not parts_of(state):
        return state
    names = read_first(state)
    parts = read_parts(session, [run_id], names=names)[run_id] if names else {}
    return expanded(state, parts, paged=False, values=False)


#: What the check reads of a run it judges row by row.
_ROW: Final = (
    workflow_runs.c.run_id,
    workflow_runs.c.workflow,
    workflow_runs.c.path,
    workflow_runs.c.state,
)


def _grouped(session: Session) -> Groups:
    """The runs to check by (workflow, what a decision reads), read row by row."""
    stmt = _unfinished(select(*_ROW)).execution_options(yield_per=_CHUNK)
    groups: Groups = defaultdict(list)
    for run_id, workflow, path, state in session.execute(stmt):
        groups[workflow, path, _stored(session, run_id, path, state)].append(run_id)
    return groups


def _present(json: str) -> str:
    """SQL: whether a member is there (``->`` gives SQL NULL only for a missing one)."""
    return f"{json} IS NOT NULL"


def _text_or_null(json: str) -> str:
    return f"COALESCE(jsonb_typeof({json}), 'null') IN ('string', 'null')"


def _encoded_dict(json: str) -> str:
    return (
        f"(NOT {_present(json)} OR (jsonb_typeof({json}) = 'object' AND {json}->>'{TAG}' = 'dict' "
        f"AND jsonb_typeof({json}->'v') = 'object'))"
    )


def _object_keys(json: str) -> str:
    return (
        f"ARRAY(SELECT jsonb_object_keys(CASE WHEN jsonb_typeof({json}) = 'object' THEN {json} "
        "ELSE '{}'::jsonb END) ORDER BY 1)"
    )


_LOOPS, _RETRIES, _SIBLINGS = "state->'loops'", "state->'retries'", f"state->'{SIBLINGS}'"
_VALUES, _SCOPE = "state->'values'->'v'", "state->'scope'->'v'"
#: SQL: a state of the shape :meth:`Stored.of` accepts — the same checks, in the server.
#: A state it does not pass is read whole and judged by ``Stored.of`` itself (its reason).
_WELL_FORMED = " AND ".join(
    [
        "jsonb_typeof(state) = 'object'",
        f"state->'{PARTS}' IS NULL",  # read whole, with its parts
        *(_text_or_null(f"state->'{key}'") for key in ("kind", "addressing", "event")),
        _encoded_dict("state->'values'"),
        _encoded_dict("state->'scope'"),
        f"(NOT {_present(_LOOPS)} OR (jsonb_typeof({_LOOPS}) = 'object' AND NOT EXISTS ("
        f"SELECT 1 FROM jsonb_each({_LOOPS}) AS loop(at, record) WHERE NOT (jsonb_typeof(record) = 'object' "
        "AND jsonb_typeof(record->'items') = 'array' AND record->'shadows' IS NOT NULL "
        "AND record->'shadowed' IS NOT NULL))))",
        f"(NOT {_present(_RETRIES)} OR jsonb_typeof({_RETRIES}) = 'object')",
        f"(NOT {_present(_SIBLINGS)} OR (jsonb_typeof({_SIBLINGS}) = 'array' AND NOT EXISTS ("
        f"SELECT 1 FROM jsonb_array_elements({_SIBLINGS}) AS count(n) WHERE NOT (jsonb_typeof(n) = 'null' "
        "OR (jsonb_typeof(n) = 'number' AND n::text ~ '^[0-9]+$')))))",
    ]
)


def _grouped_in_postgresql(session: Session) -> Groups:
    """The same groups, formed by the server in one pass: only the groups and their run
    ids travel.  The runs of a state of the wrong shape (or without a path) are few:
    they are read again, whole, and judged by ``Stored.of`` row by row."""
    keyed = (
        f"SELECT run_id, workflow, path, path IS NOT NULL AND COALESCE({_WELL_FORMED}, false) AS readable, "
        "state->>'kind' AS kind, state->>'addressing' AS addressing, state->>'event' AS event, "
        f"{_object_keys(_VALUES)} AS steps, {_object_keys(_SCOPE)} AS scope, {_object_keys(_LOOPS)} AS loops, "
        f"state->>'{SIBLINGS}' AS siblings FROM {workflow_runs.name} WHERE status IN ('running', 'suspended')"
    )
    columns = "workflow, path, readable, kind, addressing, event, steps, scope, loops, siblings"
    grouped = text(f"SELECT {columns}, array_agg(run_id) FROM ({keyed}) AS keyed GROUP BY {columns}")
    groups: Groups = defaultdict(list)
    others: list[uuid.UUID] = []
    for *row, siblings, run_ids in session.execute(grouped):
        workflow, path, readable, kind, addressing, event, steps, scope, loops = row
        if readable:
            counts = None if siblings is None else json.loads(siblings)  # its shape checked by the filter
            stored = Stored.of_keys(path, kind, addressing, event, steps, scope, loops, counts)
            groups[workflow, path, stored].extend(run_ids)
        else:
            others.extend(run_ids)
    for start in range(0, len(others), _CHUNK):
        rows = select(*_ROW).where(workflow_runs.c.run_id.in_(others[start : start + _CHUNK]))
        for run_id, workflow, path, state in session.execute(rows):
            groups[workflow, path, _stored(session, run_id, path, state)].append(run_id)
    return groups


#: SQL: whether the check reads a run's stored state: it may name a class — a member
#: ``c`` holding a string, wherever it is: more states than name one (user data may have
#: such a member), never fewer; :func:`rebuild` then judges exactly — or it notes the
#: event that woke the run (:data:`WOKEN_BY`, read as the worker reads it), or a newer
#: release wrote it (its ``format``, which a worker strands it for), or it is no object
#: (a damaged row a worker fails, for the reason :func:`rebuild` gives).  PostgreSQL's
#: jsonpath; SQLite's JSON1 tree walk.
_DECODED: Final = (
    f"(jsonb_typeof(state) <> 'object' OR state->'{WOKEN_BY}' IS NOT NULL OR state->'{PARTS}' IS NOT NULL "
    f"OR jsonb_path_exists(state, 'lax $.{FORMAT_KEY} ? (@.type() == \"number\" && @ > {FORMAT})') "
    "OR jsonb_path_exists(state, 'lax $.**.c ? (@.type() == \"string\")'))"
)
_DECODED_SQLITE: Final = (
    f"(json_type(state) <> 'object' OR json_type(state, '$.{WOKEN_BY}') IS NOT NULL "
    f"OR json_type(state, '$.{PARTS}') IS NOT NULL "
    f"OR (json_type(state, '$.{FORMAT_KEY}') = 'integer' AND json_extract(state, '$.{FORMAT_KEY}') > {FORMAT}) "
    "OR EXISTS (SELECT 1 FROM json_tree(state) AS found WHERE found.key = 'c' AND found.type = 'text'))"
)


def _unrebuildable(
    session: Session, engine: WorkflowEngine, judged: set[uuid.UUID]
) -> Iterator[tuple[str, str | None, str, uuid.UUID]]:
    """Runs not already found incompatible whose stored values this App's classes cannot
    rebuild — a class it does not register, or one it changed (a field without a default
    added, an enum member removed), or the event a run noted as the one that woke it
    (its segment lost a race) that they cannot load: the worker strands them
    (:mod:`kumiko_typed._stored_classes`), with this reason; or a damaged value (or a
    noted event gone, or of another type) the worker fails the run for, with this one.

    Every run's payload is decoded (it is a class); its state only if :data:`_DECODED`,
    else the server sends an empty object for it: a state of plain values can hold
    nothing a deploy changes, and its values, the bulk of a run, stay in the server."""
    decoded = text(_DECODED if engine.postgres else _DECODED_SQLITE)
    state = case((decoded, workflow_runs.c.state), else_=literal_column("'{}'"))
    columns = (workflow_runs.c.run_id, workflow_runs.c.workflow, workflow_runs.c.path, workflow_runs.c.payload)
    stmt = _unfinished(select(*columns, state)).where(workflow_runs.c.workflow.in_(list(engine.defs)))
    rows = session.execute(stmt.execution_options(yield_per=_CHUNK))
    for partition in rows.partitions():
        chunk = [row for row in partition if row.run_id not in judged]
        # The parts of a chunk's runs in one query (a run's parts, by the run's id).
        named = [row.run_id for row in chunk if _names_parts(row[4])]
        parts = read_parts(session, named)
        for run_id, workflow, path, payload, stored in chunk:
            try:
                rebuild(engine.codec, engine.defs[workflow].workflow, payload, stored, parts.get(run_id, {}))
                engine.noted_event(session, engine.defs[workflow], path, stored)
            except ClassMismatch as exc:
                yield workflow, path, mismatch(path, exc), run_id
            except UNREADABLE as exc:
                yield workflow, path, str(unreadable(exc)), run_id


def _names_parts(state: object) -> bool:
    """Whether a run's state names parts (a damaged name list: rebuild says why)."""
    try:
        return bool(parts_of(state))
    except ValueError:
        return False


def _unfinished(stmt: Select[Any]) -> Select[Any]:
    return stmt.where(workflow_runs.c.status.in_(("running", "suspended")))
