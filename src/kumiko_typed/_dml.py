"""The framework's own row writes (an event's INSERT, an aggregate row's INSERT and
UPDATE) sent on SQLite's driver cursor when nothing would see the difference.

``Connection.execute`` builds an execution context, a cursor result and its metadata
around every statement, and fires its events; for a write whose result is only its row
count, that was a third of a ``get_one -> update`` dispatch's SQLAlchemy work
(bench/handler.py).  :func:`execute_dml` does what it does for such a statement and no
more: the compiled form from the engine's own compiled cache, the parameters built and
bound by the compiled form's own processors, ``cursor.execute`` as the dialect's
``do_execute`` calls it.  It leaves the statement to ``Connection.execute`` wherever that
would do anything else: another database, anything watching statements (a
``before_execute`` or ``after_execute`` listener besides those of
:func:`~kumiko_typed._engine.unwatched`), execution options, no active transaction, a
compiled form with defaults to compute, RETURNING or expanding parameters, and a table
whose foreign keys :func:`~kumiko_typed._tenant_refs.check_references` checks.  A
failure goes through SQLAlchemy's own handling (wrapped, ``handle_error`` with an
execution context), as from ``Connection.execute``.

It calls what ``Connection._execute_clauseelement`` calls, which is SQLAlchemy's private
code and may change in any release: it is taken only on the releases the test suite has
verified it on (:data:`VERIFIED`); on any other every statement goes through
``Connection.execute``, slower and alike in what it does.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy
from sqlalchemy import Connection, Table
from sqlalchemy.exc import PendingRollbackError, ResourceClosedError
from sqlalchemy.sql.compiler import WARN_LINTING

from ._engine import unwatched
from ._tenant_refs import checks_references

__all__ = ["VERIFIED", "VERIFIED_RELEASES", "execute_dml"]

#: The SQLAlchemy releases whose private execution path this module was checked against
#: (tests/storage/test_write_path.py runs the driver's path on each; add a release once
#: the suite passes on it).
VERIFIED_RELEASES: Final = frozenset({"2.1.9"})
#: Whether the installed SQLAlchemy is one of them.
VERIFIED: Final = sqlalchemy.__version__ in VERIFIED_RELEASES

#: A compiled form's attribute: its SQL and (bind name, processor or ``None``) in order,
#: or ``False`` when it must go through ``Connection.execute``.
_PLAIN: Final = "_kumiko_plain_dml"


def execute_dml(connection: Connection, stmt: Any, params: dict[str, Any]) -> int:
    """``connection.execute(stmt, params).rowcount`` for an INSERT or UPDATE of one row."""
    dialect = connection.dialect
    transaction: Any = connection._transaction
    nested: Any = connection._nested_transaction
    if (
        not VERIFIED
        or dialect.name != "sqlite"
        or transaction is None
        or not transaction.is_active
        or (nested is not None and not nested.is_active)
        or connection._trans_context_manager is not None
        or connection._execution_options
        or stmt._execution_options
        or connection.dispatch.before_execute
        or connection.dispatch.after_execute
        or not unwatched(connection)
    ):
        return connection.execute(stmt, params).rowcount
    compiled, extracted, param_dict, cache_hit = stmt._compile_w_cache(
        dialect=dialect,
        compiled_cache=connection.engine._compiled_cache,
        column_keys=sorted(params),
        for_executemany=False,
        schema_translate_map=None,
        linting=dialect.compiler_linting | WARN_LINTING,
    )
    plain = compiled.__dict__.get(_PLAIN)
    if plain is None:
        plain = compiled.__dict__[_PLAIN] = _plain(compiled)
    if plain is False or checks_references(compiled.statement.table):
        return connection.execute(stmt, params).rowcount
    sql, binds = plain
    fairy: Any = connection._dbapi_connection or connection._revalidate_connection()
    try:
        values = compiled.construct_params(
            params, escape_names=False, _group_number=0, extracted_parameters=extracted, _collected_params=param_dict
        )
        sent = dialect.execute_sequence_format([values[k] if p is None else p(values[k]) for k, p in binds])
    except (PendingRollbackError, ResourceClosedError):
        raise
    except BaseException as exc:  # as Connection._execute_context wraps a refused bind
        connection._handle_dbapi_exception(exc, sql, [params], None, None)
    cursor = fairy.dbapi_connection.cursor()
    try:
        cursor.execute(sql, sent)
        count: int = cursor.rowcount
    except BaseException as exc:
        context = _context(connection, fairy, stmt, compiled, params, extracted, param_dict, cache_hit, cursor)
        connection._handle_dbapi_exception(exc, sql, sent, cursor, context)
    cursor.close()
    return count


def _plain(compiled: Any) -> tuple[str, tuple[tuple[str, Any], ...]] | bool:
    """What :func:`execute_dml` sends for ``compiled``, or ``False`` if it leaves it to
    ``Connection.execute`` (which then does more than bind and send)."""
    if (
        not (compiled.isinsert or compiled.isupdate)
        or not compiled.positional
        or compiled.effective_returning
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.literal_execute_params
        or compiled.post_compile_params
        or compiled.schema_translate_map
        or not isinstance(getattr(compiled.statement, "table", None), Table)
    ):
        return False
    processors = compiled._bind_processors
    return compiled.string, tuple((key, processors.get(key)) for key in compiled.positiontup)


def _context(
    connection: Connection,
    fairy: Any,
    stmt: Any,
    compiled: Any,
    params: dict[str, Any],
    extracted: Any,
    param_dict: Any,
    cache_hit: Any,
    cursor: Any,
) -> Any:
    """The execution context ``Connection.execute`` would have made, for the failure's
    ``handle_error`` listeners (``_integrity.note_written`` reads the statement and its
    rows there); made only when the statement failed."""
    dialect = connection.dialect
    contexts: Any = dialect.execution_ctx_cls
    try:
        context: Any = contexts._init_compiled(
            dialect,
            connection,
            fairy,
            connection._execution_options,
            compiled,
            [params],
            stmt,
            extracted,
            cache_hit=cache_hit,
            param_dict=param_dict,
        )
    except Exception:  # it bound these values already: not expected, and then none
        return None
    context.cursor.close()  # its own, unused: the failure is the one of ``cursor``
    context.cursor = cursor
    return context
