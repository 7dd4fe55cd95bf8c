"""Which of a feed transaction's groups of waits hold an armed wait, asked of all its
events at once (``_workflow_feed``): before, each event of a waited type read its key's
waits in a statement of its own, though most events wake no run (a shop's payments, few
of which a workflow waits for): 200 statements a batch of them.

A group here is an event type, workflow and path, tenant, and a form of the key (or no
key: a group read whole).  Each is asked by a search of the match index's prefix, which
stops at the group's first armed wait: a group of 10,000 waits of one key costs a row,
where one ``SELECT DISTINCT`` of the batch's keys (an ``IN`` list) read all 10,000, once
per transaction of their fan-out.

On SQLite a statement asks up to 256 groups, a scalar subquery and four or five bound
values each.  On PostgreSQL that statement was tens of kilobytes with up to 1,280 bound
values, past what psycopg keeps the parse of (4,096 characters, 50 parameters): psycopg
split its text again at every execution, a quarter of the feed's time in Python
(bench/event_feed.py).  There the groups travel as arrays instead, one a column, and the
statement (``unnest`` of them, each row's first armed wait by a ``LATERAL`` subquery) is
one short text whatever their number, which psycopg keeps and prepares."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeAlias

from sqlalchemy import Select, Text, bindparam, column, func, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from ._tables import workflow_waits

__all__ = ["Group", "WaitsProbe"]

#: (event type, workflow, path, tenant id, key form); key ``None``: any key.
Group: TypeAlias = tuple[str, str, str, Any, str | None]

#: Groups asked in one statement at most on SQLite (a column each).
_CHUNK: Final = 256


def _size(n: int) -> int:
    """The statement's width for ``n`` groups: a power of two, so that a few statements
    (built once, compiled once) serve every batch."""
    return 1 << max(n - 1, 0).bit_length()


def _statement(width: int, keyed: bool) -> Select[Any]:
    """``SELECT (...) AS h0, ...``: each of ``width`` groups' first armed wait (SQLite)."""
    w = workflow_waits.c
    columns: list[Any] = []
    for i in range(width):
        where = [
            w.event_type == bindparam(f"t{i}"),
            w.workflow == bindparam(f"w{i}"),
            w.path == bindparam(f"p{i}"),
            w.tenant_id == bindparam(f"n{i}"),
        ]
        order = [w.run_id]
        if keyed:
            where.append(w.key == bindparam(f"k{i}"))
        else:
            order.insert(0, w.key)
        first = select(w.run_id).where(*where, w.armed.is_(True)).order_by(*order).limit(1)
        columns.append(first.scalar_subquery().label(f"h{i}"))
    return select(*columns)


def _arrays_statement(keyed: bool) -> Select[Any]:
    """PostgreSQL: the ordinals (from 1) of the groups holding an armed wait, the groups
    given as one array per column.  Text arrays, not the columns' ``VARCHAR(n)``: a cast
    to that cuts a longer value, which would then match a wait of its first ``n``
    characters."""
    w = workflow_waits.c
    matched: dict[str, Any] = {"t": w.event_type, "w": w.workflow, "p": w.path, "n": w.tenant_id}
    if keyed:
        matched["k"] = w.key
    types = {name: w.tenant_id.type if name == "n" else Text() for name in matched}
    asked = (
        func.unnest(*(bindparam(name, type_=ARRAY(types[name])) for name in matched))
        .table_valued(*(column(name, types[name]) for name in matched), with_ordinality="i")
        .render_derived(name="asked")
    )
    order = [w.run_id] if keyed else [w.key, w.run_id]
    where = [waits_column == asked.c[name] for name, waits_column in matched.items()]
    first = select(w.run_id).where(*where, w.armed.is_(True)).order_by(*order).limit(1).lateral("first")
    return select(asked.c.i).select_from(asked.join(first, true()))


#: Built once: the same two texts for every probe (PostgreSQL).
_ARRAYS: Final = {keyed: _arrays_statement(keyed) for keyed in (True, False)}


class WaitsProbe:
    def __init__(self, *, postgres: bool) -> None:
        self._postgres = postgres
        self._statements: dict[tuple[int, bool], Select[Any]] = {}

    def found(self, session: Session, groups: Iterable[Group]) -> set[Group]:
        """The ``groups`` holding an armed wait: on SQLite a statement per ``_CHUNK`` keyed
        groups, and per ``_CHUNK`` groups read whole (none but for removed or changed
        definitions); on PostgreSQL one statement for each kind, whatever the number."""
        by_kind: dict[bool, list[Group]] = {True: [], False: []}
        for group in dict.fromkeys(groups):
            by_kind[group[4] is not None].append(group)
        found: set[Group] = set()
        for keyed, asked in by_kind.items():
            if not asked:
                continue
            if self._postgres:
                found.update(self._ask_arrays(session, asked, keyed))
                continue
            for start in range(0, len(asked), _CHUNK):
                found.update(self._ask(session, asked[start : start + _CHUNK], keyed))
        return found

    def _ask(self, session: Session, groups: Sequence[Group], keyed: bool) -> Iterable[Group]:
        width = _size(len(groups))
        stmt = self._statements.get((width, keyed))
        if stmt is None:
            stmt = self._statements[width, keyed] = _statement(width, keyed)
        padded = [*groups, *[groups[-1]] * (width - len(groups))]
        params: dict[str, Any] = {}
        for i, (event_type, workflow, path, tenant, key) in enumerate(padded):
            params.update({f"t{i}": event_type, f"w{i}": workflow, f"p{i}": path, f"n{i}": tenant})
            if keyed:
                params[f"k{i}"] = key
        hits = session.execute(stmt, params).one()
        return [group for group, first in zip(groups, hits, strict=False) if first is not None]

    def _ask_arrays(self, session: Session, groups: Sequence[Group], keyed: bool) -> Iterable[Group]:
        event_types, workflows, paths, tenants, keys = (list(values) for values in zip(*groups, strict=True))
        params = {"t": event_types, "w": workflows, "p": paths, "n": tenants}
        if keyed:
            params["k"] = keys
        return [groups[i - 1] for i in session.scalars(_ARRAYS[keyed], params)]
