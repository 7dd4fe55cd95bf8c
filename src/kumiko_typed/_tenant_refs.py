"""Foreign keys stay inside the tenant: a row a run writes refers only to rows of its
own tenant — its ``tenant_id``, or for a table without one (a read model) the run's, the
tenant whose rows the run's reads see.

A foreign key checks only that the id exists, in any tenant's rows.  So every statement
a run sends that sets a foreign key to an aggregate's table (an ``Entity``'s, which
holds ``tenant_id``) is checked too, by :func:`check_references` (an
``after_cursor_execute`` listener of every App engine): one read of the referred table
for a row with one of the values and another tenant.  One listener covers every way a
run writes — ``create``, ``update``, a projector, a projection upsert, ``c.db``
statements, many rows at once, the ORM's flush.  A refused statement fails the run,
which rolls back: nothing of it is committed, even if a step caught the refusal.

The refusal, :class:`~kumiko_typed._integrity.OtherTenantRow`, is answered as the
database's own refusal of a reference to a row that does not exist, word for word
(``_integrity``): to the caller, another tenant's row does not exist, and a different
answer would tell that it does.  A *deferred* key is checked where its database checks
it, at the end of the outermost run before its COMMIT (:func:`settle`), for the same
reason: the database refuses a missing row only there, and names no column.

The run comes from :func:`open_scope`, which the transaction runner calls for each run;
a statement outside a run (``rebuild_projection``'s replay of checked events, an
application's own use of the engine) is not checked, and a run may cross on purpose
with ``.execution_options(kumiko_all_tenants=True)``, as a read does.
"""

from __future__ import annotations

import re
from contextvars import ContextVar, Token
from typing import Any, Final
from uuid import UUID

import attrs
from sqlalchemy import ForeignKeyConstraint, Select, Table, and_, bindparam, literal, select, tuple_
from sqlalchemy.orm import Session

from ._access import ShapeMemo
from ._connection import connection_of
from ._entity import Entity
from ._integrity import OtherTenantRow, Written

__all__ = ["Scope", "check_references", "checks_references", "close_scope", "open_scope", "settle"]


@attrs.frozen
class _Key:
    """A foreign key of a written table to an aggregate's table, and its check: a row
    the key's values name that belongs to another tenant."""

    columns: tuple[str, ...]
    check: Select[Any]
    #: The same for one value, without an expanding IN (a third less per check).
    check_one: Select[Any]
    deferred: bool


@attrs.define
class Scope:
    """A run's tenant and session, and the deferred keys its statements set: (key,
    values, tenant) each, checked at the end of the outermost run in that session."""

    tenant: UUID
    session: Session
    outer: Scope | None
    pending: list[tuple[_Key, list[object], UUID]] = attrs.field(factory=list)
    #: What a refused statement wrote: the run fails even if a step caught the refusal.
    refused: Written | None = None


_SCOPE: ContextVar[Scope | None] = ContextVar("kumiko_tenant_scope", default=None)

#: Per written table: its :class:`_Plan` (no keys for most tables).
_PLANS: Final = ShapeMemo()


def open_scope(tenant: UUID, session: Session) -> tuple[Scope, Token[Scope | None]]:
    """The statements sent until :func:`close_scope` are checked against ``tenant``
    (not a context manager: entered on every dispatch, where each call counts)."""
    scope = Scope(tenant, session, _SCOPE.get())
    return scope, _SCOPE.set(scope)


def close_scope(token: Token[Scope | None]) -> None:
    _SCOPE.reset(token)


def settle(scope: Scope) -> None:
    """At the end of a run that commits (or releases its savepoint): its deferred keys
    go to the run around it in the same session (a ``call_feature``), whose transaction
    commits them; the outermost run checks them, on the session's connection, where the
    database's COMMIT will.  Raises :class:`OtherTenantRow` without a statement (the
    database's refusal at COMMIT names none) for a row of another tenant, and again for
    a refused statement whose refusal a step caught (its row is written)."""
    if not scope.pending and scope.refused is None:
        return
    if scope.refused is not None:
        raise OtherTenantRow(scope.refused)
    pending, scope.pending = scope.pending, []
    outer = scope.outer
    if outer is not None and outer.session is scope.session:
        outer.pending += pending
        return
    conn = connection_of(scope.session)
    for key, values, tenant in pending:
        if _other(conn, key, values, tenant):
            raise OtherTenantRow(None)


def checks_references(table: Table) -> bool:
    """Whether :func:`check_references` reads anything for a write of ``table``: it sets a
    key to an aggregate's table.  A write of another table is left alone by it."""
    return bool(_plan(table).keys)


def _plan(table: Table) -> _Plan:
    entries = _PLANS.entries()
    found: _Plan | None = entries.get(table)
    if found is None:
        aggregates = {m.local_table for m in Entity.registry.mappers}
        keys = tuple(_key(fk) for fk in table.foreign_key_constraints if _referred(fk) in aggregates)
        tenant = table.c.tenant_id.key if "tenant_id" in table.c else None
        found = entries[table] = _Plan(keys, tenant)
    return found


@attrs.frozen
class _Plan:
    """A written table's keys to aggregate tables, and its own tenant column's key."""

    keys: tuple[_Key, ...]
    tenant: str | None


def _referred(fk: ForeignKeyConstraint) -> Table | None:
    try:
        return fk.referred_table
    except Exception:  # a key to a table not (yet) defined: the database refuses it
        return None


def _key(fk: ForeignKeyConstraint) -> _Key:
    referred = fk.referred_table
    targets = [element.column for element in fk.elements]
    match: Any = targets[0] if len(targets) == 1 else tuple_(*targets)
    other = referred.c.tenant_id != bindparam("kumiko_tenant")
    many = match.in_(bindparam("kumiko_refs", expanding=True))
    one = and_(*(column == bindparam(f"kumiko_ref_{i}") for i, column in enumerate(targets)))
    deferred = str(fk.initially or "").upper() == "DEFERRED"
    columns = tuple(c.key for c in fk.columns)
    return _Key(columns, _exists(referred, many, other), _exists(referred, one, other), deferred)


def _exists(table: Table, *where: Any) -> Select[Any]:
    return select(literal(1)).select_from(table).where(*where).limit(1)


def check_references(conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, executemany: bool) -> None:
    """``after_cursor_execute``: refuse an INSERT or UPDATE of a run that set a key to a
    row of another tenant (:class:`OtherTenantRow`); note a deferred key's values.

    After the statement, not before: its foreign key check has found (and locked) the
    rows it refers to, so one that another transaction committed meanwhile is seen
    here (PostgreSQL reads each statement in a snapshot of its own); a check before it
    could miss a row committed between the two.  The transaction rolls back."""
    if context is None or not (context.isinsert or context.isupdate):
        return
    scope = _SCOPE.get()
    if scope is None:
        return
    table = getattr(getattr(context.compiled, "statement", None), "table", None)
    if not isinstance(table, Table):
        return
    plan = _plan(table)
    if not plan.keys or context.execution_options.get("kumiko_all_tenants", False):
        return
    if getattr(context, _CHECKED, False):
        return  # a later batch of the same statement's rows (insertmanyvalues)
    setattr(context, _CHECKED, True)
    rows = tuple(context.compiled_parameters or ())
    by_row = _multi_rows(context.compiled.statement, rows)
    for key in plan.keys:
        for tenant, values in _values(key, by_row, plan.tenant, scope.tenant).items():
            if key.deferred:
                scope.pending.append((key, values, tenant))
            elif _other(conn, key, values, tenant):
                scope.refused = Written(table, "insert" if context.isinsert else "update", rows)
                raise OtherTenantRow(scope.refused)


_CHECKED: Final = "_kumiko_references_checked"


def _multi_rows(statement: Any, rows: tuple[Any, ...]) -> tuple[Any, ...]:
    """The rows by column key: an ``insert().values([...])`` binds row ``i``'s value of
    ``c`` as ``c_m<i>``, in one parameter set."""
    if not getattr(statement, "_multi_values", None) or len(rows) != 1:
        return rows
    split: dict[int, dict[str, object]] = {}
    for name, value in rows[0].items():
        found = _MULTI.fullmatch(name)
        if found is not None:
            split.setdefault(int(found[2]), {})[found[1]] = value
    return tuple(split.values())


_MULTI: Final = re.compile(r"(.+)_m(\d+)")


def _values(key: _Key, rows: tuple[Any, ...], tenant_key: str | None, run: UUID) -> dict[Any, list[object]]:
    """The key's values the rows set, once each, by the tenant they must be of: the
    row's own ``tenant_id`` if the table has one and the row sets it (a row of one
    tenant refers to rows of that tenant), else the run's.  A row that leaves a column
    of the key NULL refers to nothing."""
    found: dict[Any, dict[object, None]] = {}
    columns = key.columns
    for row in rows:
        values = tuple(row.get(c) for c in columns)
        if None in values:
            continue
        tenant = row.get(tenant_key) if tenant_key is not None else None
        found.setdefault(run if tenant is None else tenant, {})[values[0] if len(values) == 1 else values] = None
    return {tenant: list(values) for tenant, values in found.items()}


def _other(conn: Any, key: _Key, values: list[object], tenant: UUID) -> bool:
    """Whether a row the values name belongs to another tenant than ``tenant``."""
    if len(values) == 1:
        value = values[0]
        parts = value if isinstance(value, tuple) and len(key.columns) > 1 else (value,)
        params: dict[str, object] = {f"kumiko_ref_{i}": v for i, v in enumerate(parts)}
        params["kumiko_tenant"] = tenant
        return conn.execute(key.check_one, params).first() is not None
    # In batches: each value is a parameter, and a statement takes at most 65535 of them
    # on PostgreSQL (32766 on a default build of SQLite), fewer than one write may set.
    return any(
        conn.execute(key.check, {"kumiko_refs": values[i : i + _BATCH], "kumiko_tenant": tenant}).first() is not None
        for i in range(0, len(values), _BATCH)
    )


#: Values per check of many rows' references: a tuple key binds one parameter per column.
_BATCH: Final = 5_000
