"""Engine set-up per database, so that transactions and savepoints mean what they say."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from datetime import UTC, datetime, time
from decimal import ROUND_HALF_UP, Context, Decimal
from itertools import repeat
from operator import is_
from typing import Any, Final, cast

from sqlalchemy import (
    TIMESTAMP,
    BigInteger,
    DateTime,
    Engine,
    Enum,
    Float,
    Numeric,
    String,
    Time,
    Uuid,
    create_engine,
    event,
)
from sqlalchemy.dialects.postgresql.base import PGDDLCompiler, PGDialect, PGTypeCompiler
from sqlalchemy.dialects.sqlite import DATETIME, TIME
from sqlalchemy.dialects.sqlite.base import SQLiteDialect
from sqlalchemy.engine import Dialect, ExceptionContext
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._database_urls import refuse_unsupported, secrets_out_of_sight, url_refusal
from ._errors import OutOfRange
from ._integrity import note_written
from ._read_only import READ_ONLY_OPTION
from ._sqlite_functions import FUNCTIONS
from ._sqlite_sql import JSON_TEXT, SQLiteStatements, SQLiteTypes
from ._swallowed import noted, undone
from ._tenant_refs import check_references
from ._transient import note_lost, sqlite_exhausted
from ._utc import utc_time_of_day

__all__ = ["dress_dialect", "make_engine", "read_only_engines", "unwatched"]

#: Whether :func:`make_engine` builds engines the database keeps from writing.
_READ_ONLY: ContextVar[bool] = ContextVar("kumiko_read_only_engines", default=False)
#: Marks a connection (its pool record's ``info``) of such an engine.
_WRITES_REFUSED: Final = "kumiko_writes_refused"


@contextmanager
def read_only_engines() -> Iterator[None]:
    """Within it, :func:`make_engine` builds engines whose every connection refuses writes
    (SQLite's ``query_only``, PostgreSQL's ``default_transaction_read_only``).  The command
    line's ``check --against`` builds the user's App on a database it promises only to read,
    through a factory that may call ``create_all()``: the database, not the factory's
    manners, keeps that promise."""
    token = _READ_ONLY.set(True)
    try:
        yield
    finally:
        _READ_ONLY.reset(token)


def make_engine(url: str) -> Engine:
    """The App's engine on ``url``.  A URL it cannot run on — unreadable, another database
    or driver, a driver not installed — is a :class:`BootError` naming the fix, not an
    ImportError from inside SQLAlchemy; no problem quotes the URL, which may hold a
    password.  Building the engine does not connect."""
    try:
        refuse_unsupported(url)
        engine = _made(url)
    except (ValueError, ArgumentError, ImportError) as exc:
        raise url_refusal(exc, url) from exc
    # Only a failed statement (commit, connect) calls them: what a refused write wrote, for
    # its Failure; a lost connection, for the runner to tell whether it may run again.
    event.listen(engine, "handle_error", note_written)
    event.listen(engine, "handle_error", _lost_while_set_up)  # before note_lost counts it
    event.listen(engine, "handle_error", note_lost)
    # A failed statement, until a savepoint around it is rolled back: a resolver that
    # caught it and went on fails its step, alike on both databases (_swallowed).
    event.listen(engine, "handle_error", noted)
    event.listen(engine, "rollback_savepoint", undone)
    # A run's write that refers to another tenant's row: refused, the run rolled back.
    event.listen(engine, "after_cursor_execute", check_references)
    if _READ_ONLY.get():  # after the dialect's own connect listener
        sqlite = engine.dialect.name == "sqlite"
        event.listen(engine, "connect", _sqlite_refuse_writes if sqlite else _postgres_refuse_writes)
    return engine


def _made(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url)
        # pysqlite's own transaction handling defers BEGIN and breaks SAVEPOINT;
        # take it over as SQLAlchemy's documentation recommends.
        event.listen(engine, "connect", _sqlite_connect)
        _follow_the_file(engine)
        event.listen(engine, "begin", _sqlite_begin)
        event.listen(engine, "handle_error", _sqlite_given_up)  # before note_lost counts it
        dress_dialect(engine.dialect)
        return engine
    shown, hidden = secrets_out_of_sight(url)
    engine = create_engine(shown, connect_args=hidden)
    if engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _postgres_connect)
        dress_dialect(engine.dialect)
    return engine


def dress_dialect(dialect: Dialect) -> None:
    """Give ``dialect`` (this instance only) the App's types and compilers: what its
    columns bind and read, and the SQL and DDL it compiles.  An App's engine has them, and
    so does the dialect Alembic compiles a migration's offline SQL with
    (``kumiko_typed.contrib.alembic.compile_as_app``): one list of them for both."""
    if isinstance(dialect.type_compiler_instance, (SQLiteTypes, _PostgresTypes)):
        return  # dressed already: wrapping its types again would change nothing
    if dialect.name == "sqlite":
        # Uuid, DateTime and Numeric columns bind and read as PostgreSQL's do.
        dialect.colspecs = {
            **dialect.colspecs,
            Uuid: _TextUuid,
            DateTime: _UtcDateTime,
            TIMESTAMP: _UtcDateTime,  # pysqlite maps it to a type of its own
            Numeric: _FloatNumeric,
            Time: _UtcTime,
        }
        sqlite = cast("SQLiteDialect", dialect)
        sqlite.type_compiler_instance = sqlite.type_compiler = SQLiteTypes(sqlite)
        sqlite.statement_compiler = SQLiteStatements
        names = sqlite.ischema_names
        sqlite.ischema_names = {**names, JSON_TEXT: names["JSON"]}  # reflected as the JSON it is
    elif dialect.name == "postgresql":
        floats = dialect.colspecs.get(Float, Float)
        signless = type("_SignlessFloat", (_SignlessZero, floats), {"cache_ok": True})
        bigs = dialect.colspecs.get(BigInteger, BigInteger)
        whole = type("_WholeBigInteger", (_WholeSum, bigs), {"cache_ok": True})
        numerics = dialect.colspecs.get(Numeric, Numeric)
        plain = type("_PlainNumeric", (_PlainUnscaled, numerics), {"cache_ok": True})
        times = dialect.colspecs.get(Time, Time)
        utc_times = type("_UtcTimetz", (_UtcTimeOfDay, times), {"cache_ok": True})
        dialect.colspecs = {**dialect.colspecs, Float: signless, BigInteger: whole, Numeric: plain, Time: utc_times}
        dialect.ddl_compiler = _PostgresDDL
        statements = dialect.statement_compiler
        dialect.statement_compiler = type("_PostgresStatements", (_CollatedJsonText, statements), {})
        postgres = cast("PGDialect", dialect)
        postgres.type_compiler_instance = postgres.type_compiler = _PostgresTypes(postgres)


class _PostgresDDL(PGDDLCompiler):
    """This engine's DDL: PostgreSQL's, but a text column that names no collation of its
    own is created ``COLLATE "C"``, which orders, compares and folds case (``ilike``,
    ``lower``: ASCII only) by code point, as SQLite's BINARY does.  The database's default
    collation (often ``en_US.UTF-8`` or an ICU locale) put "a" before "B" and "é" before
    "Z", and ``ilike("é%")`` found "É" there only; the two databases then sorted the same
    query's rows differently.  A column declaring ``collation=`` keeps it (and that answer)."""

    def get_column_specification(self, column: Any, **kw: Any) -> str:
        spec: str = cast(Any, super()).get_column_specification(column, **kw)  # untyped in SQLAlchemy
        type_ = column.type
        if isinstance(type_, TypeDecorator):
            type_ = type_.impl_instance
        if isinstance(type_, Enum) and type_.native_enum:  # a type of its own: no collation
            return spec
        if not (isinstance(type_, String) and type_.collation is None):
            return spec
        named = self.dialect.type_compiler_instance.process(
            column.type, type_expression=column, identifier_preparer=self.preparer
        )
        typed = f"{self.preparer.format_column(column)} {named}"
        if not spec.startswith(typed):
            return spec
        return f'{typed} COLLATE "C"{spec[len(typed) :]}'


class _CollatedJsonText(SQLCompiler):
    """PostgreSQL's statements (mixed into the dialect's compiler), reading a JSON
    element as text (``Doc.body["k"].as_string()``) ``COLLATE "C"``, as a text column is
    created (:class:`_PostgresDDL`): ``->>`` gives text of the database's default
    collation, so in an ICU or ``en_US`` database such an element was ordered, compared
    (``<``, ``max``) and cast under the locale's rules ("_x", "1", "a", "B", "é", "Z")
    where SQLite's BINARY orders by code point ("1", "B", "Z", "_x", "a", "é")."""

    def visit_json_getitem_op_binary(self, binary: Any, operator: Any, _cast_applied: bool = False, **kw: Any) -> str:
        text: str = cast(Any, super()).visit_json_getitem_op_binary(binary, operator, _cast_applied, **kw)
        return _collated(binary, text, _cast_applied)

    def visit_json_path_getitem_op_binary(
        self, binary: Any, operator: Any, _cast_applied: bool = False, **kw: Any
    ) -> str:
        text: str = cast(Any, super()).visit_json_path_getitem_op_binary(binary, operator, _cast_applied, **kw)
        return _collated(binary, text, _cast_applied)


def _collated(binary: Any, text: str, cast_applied: bool) -> str:
    """``text``, a JSON element compiled, collated by code point if it is read as text (the
    outer call: the cast of the element; the inner renders the ``->>`` inside it)."""
    if cast_applied or not isinstance(binary.type, String) or isinstance(binary.type, Enum):
        return text
    return f'({text} COLLATE "C")'


class _PostgresTypes(PGTypeCompiler):
    """This engine's types: PostgreSQL's, but a 4-byte float (``REAL``,
    ``Float(precision=24)`` or less) is ``DOUBLE PRECISION``, the 8 bytes SQLite's REAL
    always has: as ``real`` it kept 1/3 as 0.33333334 and 16777217.0 as 16777216.0, so the
    row no longer equalled its event (a rebuild's verify found it changed), ``r == 1/3``
    found it on SQLite only, and 1e39 was refused on PostgreSQL only.  In the type
    compiler, not only the DDL: Alembic compares a column's type as this compiles it, and
    proposed turning every such ``double precision`` column back into ``real``."""

    def visit_REAL(self, type_: Any, **kw: Any) -> str:
        return "DOUBLE PRECISION"

    def visit_FLOAT(self, type_: Any, **kw: Any) -> str:
        named: str = cast(Any, super()).visit_FLOAT(type_, **kw)  # untyped in SQLAlchemy
        return "DOUBLE PRECISION" if _FOUR_BYTES.fullmatch(named) else named


#: ``FLOAT(p)`` that PostgreSQL makes a ``real``: a precision of 1 to 24 bits.
_FOUR_BYTES: Final = re.compile(r"FLOAT\((?:[1-9]|1[0-9]|2[0-4])\)")


class _SignlessZero(TypeEngine[Any]):
    """PostgreSQL's ``Float`` (mixed into the dialect's own), writing and reading ``-0.0``
    as ``0.0``, as SQLite does: SQLite keeps a whole REAL as an integer, which has no
    negative zero, so ``-0.0`` read back ``0.0`` there and ``-0.0`` here.  Reads too: a
    row written before, or a computed ``-x`` of a zero."""

    def bind_processor(self, dialect: Dialect) -> Any:
        inner = super().bind_processor(dialect)

        def process(value: Any) -> Any:
            if value.__class__ is float and value == 0.0:
                value = 0.0
            return inner(value) if inner is not None else value

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        inner = super().result_processor(dialect, coltype)

        def process(value: Any) -> Any:
            value = inner(value) if inner is not None else value
            return 0.0 if value.__class__ is float and value == 0.0 else value

        return process


#: psycopg's type code of a ``numeric`` result column.
_NUMERIC_OID: Final = 1700
_BIGINT: Final = range(-(2**63), 2**63)


class _WholeSum(TypeEngine[Any]):
    """PostgreSQL's ``BigInteger`` (mixed into the dialect's own), reading a ``numeric``
    result as the ``int`` SQLite gives: ``sum`` of a ``bigint`` is a ``numeric`` there, so
    ``func.sum(Item.big)`` (typed ``BigInteger``) was a ``Decimal`` on PostgreSQL and an
    ``int`` on SQLite.  Past 64 bits it is refused, as SQLite's ``sum`` refuses it
    ("integer overflow"), and as the type the query reads it as.  Only a ``numeric``
    column gets the conversion: a ``bigint`` one reads as before, with no call per value."""

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        inner = super().result_processor(dialect, coltype)
        if coltype != _NUMERIC_OID:
            return inner

        def process(value: Any) -> Any:
            if value.__class__ is not Decimal or value != value.to_integral_value():
                return value
            whole = int(value)
            if whole not in _BIGINT:
                raise OutOfRange("bigint out of range")
            return whole

        return process


class _UtcTimeOfDay(TypeEngine[Any]):
    """PostgreSQL's ``Time`` (mixed into the dialect's own), reading a ``timetz`` of
    another offset in UTC (:func:`~kumiko_typed._utc.utc_time_of_day`), as every time the
    write takes reads back, and as SQLite reads the column: a row an earlier release
    stored as ``12:00-05:00`` read back so here, where no new write can store one.  A
    column without a zone reads as before, with no call per value."""

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        inner = super().result_processor(dialect, coltype)
        if not getattr(self, "timezone", False):
            return inner

        def process(value: Any) -> Any:
            value = inner(value) if inner is not None else value
            return utc_time_of_day(value) if value.__class__ is time else value

        return process


def plain_decimal(value: Decimal) -> Decimal:
    """A ``Numeric`` of no scale's value in one form on both databases: no trailing zeros
    after the point, no exponent before it (``1.50`` is ``1.5``, ``1E+20`` is
    ``100000000000000000000``, ``-0`` is ``0``).  PostgreSQL's ``numeric`` kept each
    value's own scale (``1.50`` read back ``1.50``), SQLite's float kept none (``1.5``),
    and printed a large whole number with an exponent (``1E+15`` where PostgreSQL read
    ``1000000000000000``): equal values, other texts, in a JSON answer, an event, a
    ``str()``."""
    if not value.is_finite():
        return value
    if not value:
        return _ZERO
    value = value.normalize(_WIDE)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    return value.quantize(_ONE, context=_WIDE) if exponent > 0 else value


_ZERO: Final = Decimal(0)
_ONE: Final = Decimal(1)


class _PlainUnscaled(TypeEngine[Any]):
    """PostgreSQL's ``Numeric`` (mixed into the dialect's own), reading a column of no
    scale as :func:`plain_decimal` writes it, as SQLite's :class:`_FloatNumeric` does.  A
    column with a scale reads as before, with no call per value."""

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        inner = super().result_processor(dialect, coltype)
        if getattr(self, "scale", 0) is not None or not getattr(self, "asdecimal", False):
            return inner

        def process(value: Any) -> Any:
            value = inner(value) if inner is not None else value
            return plain_decimal(value) if value.__class__ is Decimal else value

        return process


class _TextUuid(Uuid[Any]):
    """SQLite's ``Uuid`` that also binds a UUID written as text, as PostgreSQL's ``uuid``
    casts it: ``Product.id == c.payload.ref`` with a ``str`` field found the row on
    PostgreSQL and raised ``AttributeError`` (no ``.hex``) on SQLite.  Text that is no
    UUID raises ``ValueError``, the input's fault on both databases."""

    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        if not self.as_uuid:
            return super().bind_processor(dialect)

        def process(value: Any) -> Any:
            if value is None:
                return None
            return (uuid.UUID(value) if isinstance(value, str) else value).hex

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        parse = cast(Any, super()).result_processor(dialect, coltype)  # untyped in SQLAlchemy
        if not self.as_uuid or parse is None:
            return parse

        def process(value: Any) -> Any:
            # The 32 hex digits the bind stores, made into a UUID as unpickling makes one:
            # UUID()'s own parse (of the dashes, braces and urn: it also takes) was two
            # thirds of the time, twice for every entity read.  Anything else (an int()
            # refusal included) takes UUID() and its answer.
            if value.__class__ is str and len(value) == 32 and value.isalnum():
                try:
                    number = int(value, 16)
                except ValueError:
                    return parse(value)
                made = _NEW_UUID(uuid.UUID)
                _SET(made, "int", number)
                _SET(made, "is_safe", _UNKNOWN_SAFETY)
                return made
            return parse(value)

        return process


_NEW_UUID: Final = object.__new__
_SET: Final = object.__setattr__
_UNKNOWN_SAFETY: Final = uuid.SafeUUID.unknown


class _UtcDateTime(DATETIME):
    """SQLite's ``DATETIME`` storing an aware time as its UTC time, as PostgreSQL's
    ``timestamptz`` does (and its ``timestamp`` in a UTC session), and reading a
    ``DateTime(timezone=True)`` column back aware.  SQLite's own kept the wall-clock
    digits and dropped the offset: ``05:00+05:00`` was stored as 05:00, another instant
    than PostgreSQL's 00:00 UTC, and compared wrongly with times of other offsets."""

    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        digits = super().bind_processor(dialect)
        # SQLite's own text, ``YYYY-MM-DD HH:MM:SS.ffffff``, written by ``isoformat`` in C:
        # SQLAlchemy's builds a dict of seven fields and %-formats it, 2 us a time.
        iso = self._storage_format == DATETIME._storage_format

        def process(value: Any) -> Any:
            if isinstance(value, datetime) and value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            if iso and value.__class__ is datetime:
                return value.isoformat(" ", "microseconds")
            return digits(value) if digits is not None else value

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        parse = super().result_processor(dialect, coltype)
        if not self.timezone:
            return parse

        def process(value: Any) -> Any:
            value = parse(value) if parse is not None else value
            if isinstance(value, datetime) and value.tzinfo is None:
                return value.replace(tzinfo=UTC)
            return value

        return process


class _UtcTime(TIME):
    """SQLite's ``TIME``, reading a ``Time(timezone=True)`` column back in UTC, as
    PostgreSQL's ``timetz`` in the App's UTC session gives a time written without a zone:
    SQLite's own read it back naive, so the same write read back differently.  A time of
    another offset is refused before it is written (``_limits._zoned_time_of_day``)."""

    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        own: Any = super().result_processor  # SQLAlchemy's SQLite TIME declares no types
        parse = own(dialect, coltype)
        if not self.timezone:
            return parse

        def process(value: Any) -> Any:
            value = parse(value) if parse is not None else value
            return value.replace(tzinfo=UTC) if isinstance(value, time) and value.tzinfo is None else value

        return process


#: Wide enough for any scale a column declares: the default context's 28 digits would
#: refuse to pad a 15-digit value to a ``Numeric(40, 20)``'s scale.  Rounding half away
#: from zero, as PostgreSQL's ``numeric`` does: a computed value with more places than the
#: scale (``cast(avg(x), Numeric(30, 2))`` of 0.01 and 0) was 0.00 here, half to even,
#: and 0.01 there.
_WIDE: Final = Context(prec=1000, rounding=ROUND_HALF_UP)


class _FloatNumeric(Numeric[Any]):
    """SQLite's ``Numeric``, read back as the decimal that was written.  SQLite keeps a
    NUMERIC value as a float, and SQLAlchemy turned the float into a ``Decimal`` by
    printing it with the column's scale (ten digits without one), so the float's binary
    error showed: ``12345678.90`` read back as ``12345678.9000000004``, where PostgreSQL
    gives ``12345678.90``.  The write path admits at most 15 significant digits (what a
    float keeps exactly), so the float's first 15 digits are the value; padded to the
    column's scale, as PostgreSQL pads it.

    With a scale, the float's shortest repr (up to 17 digits, the same 15 for a stored
    value) rounded to the scale: a ``func.sum`` of 15-digit values may have 16 digits,
    which the float holds (``12345678901234.5 + 0.25``), and its float error (``0.1 +
    0.2``) lies far below the scale.  Without one, the first 15 digits: ``0.3``, not
    ``0.30000000000000004``, in :func:`plain_decimal`'s form (as PostgreSQL's is read)."""

    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        if not self.asdecimal:
            return None  # a float column as floats: what pysqlite gives
        exponent = None if self.scale is None else Decimal(1).scaleb(-self.scale)

        def process(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, float):
                number = Decimal(value)
            elif exponent is None:
                text = format(value, ".15g")  # no trailing zeros: only an exponent or -0 to make plain
                return Decimal(text) if "e+" not in text and text != "-0" else plain_decimal(Decimal(text))
            else:
                number = Decimal(repr(value))
            return plain_decimal(number) if exponent is None else number.quantize(exponent, context=_WIDE)

        return process


def _sqlite_connect(dbapi_connection: Any, _record: object) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    # LIKE as PostgreSQL's: case-sensitive.  SQLite's own folds ASCII case, so the same
    # `Product.sku.like("ab%")` found "AB1" on SQLite only (`ilike` folds case on both).
    cursor.execute("PRAGMA case_sensitive_like=ON")
    # Write-ahead log: readers (a worker, `kumiko-typed runs`) do not block the writer, and a
    # commit syncs the log once instead of journal and database file.  synchronous stays
    # FULL: a commit that returned survives a power cut.  (An in-memory database keeps
    # its "memory" journal; the pragma is then a no-op.)
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()
    for name, arguments, function in FUNCTIONS:
        dbapi_connection.create_function(name, arguments, function, deterministic=True)


def _follow_the_file(engine: Engine) -> None:
    """Drop a pooled connection whose database file was deleted or replaced since it was
    opened (by inode, checked as it leaves the pool): an open connection goes on with the
    file it opened, so after an operator's ``rm`` or a backup moved in its place, every
    commit went to a file no later process opens, each one reported done.  A new
    connection opens what is at the path now: the replacement, or (deleted) an empty
    database whose missing tables every dispatch and worker pass then report.  A
    ``stat`` per checkout."""
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return  # in memory (no file), or a URI filename: SQLite resolves it, not a path
    path = os.path.abspath(database)  # where the connections open it: relative to the cwd

    def opened(_dbapi_connection: Any, record: Any) -> None:
        record.info[_OPENED] = _inode(path)

    def checked_out(_dbapi_connection: Any, record: Any, _proxy: object) -> None:
        if _inode(path) != record.info.get(_OPENED):
            raise DisconnectionError(f"the SQLite database file {path} was deleted or replaced")

    def unopened(context: ExceptionContext) -> DBAPIError | None:
        """SQLite's words for a file it cannot open or use name no file: name it, and the fix."""
        error = context.original_exception
        if context.connection is not None or not isinstance(context.sqlalchemy_exception, DBAPIError):
            return None
        said = str(error)
        if said == "unable to open database file":
            folder = os.path.dirname(path)
            exists = os.path.isdir(folder)
            fix = f"its folder {folder} does not exist" if not exists else "check the folder's permissions"
        elif said in _UNUSABLE:
            fix = _UNUSABLE[said]
        else:
            return None
        return type(context.sqlalchemy_exception)(None, None, type(error)(f"{said} {path}: {fix}"))

    event.listen(engine, "connect", opened)
    event.listen(engine, "checkout", checked_out)
    event.listen(engine, "handle_error", unopened, retval=True)


_OPENED: Final = "kumiko_file"

#: What SQLite says, opening a file it cannot use as a database, and what to do.
_UNUSABLE: Final = {
    "file is not a database": "it holds no SQLite database (another file, or its first page damaged);"
    " restore it from a backup",
    "database disk image is malformed": "the file is damaged (cut short, or overwritten);"
    " restore it from a backup, or save what is left with sqlite3's .recover",
    "attempt to write a readonly database": "this process cannot write the file, or make its -wal and -shm"
    " files in its folder; give the service's user write access to both",
}


def _inode(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _postgres_connect(dbapi_connection: Any, _record: object) -> None:
    """Every connection's session in UTC, whatever the server's (or database's, or role's)
    ``timezone`` setting: PostgreSQL reads ``timestamptz`` back in the session's zone,
    takes a naive time as the session's local time, and casts an aware time to a
    ``timestamp`` column as its wall clock there.  SQLite answers all three in UTC
    (``_UtcDateTime``); so does PostgreSQL now, for a user's own columns too.  A listener,
    not ``options=-c TimeZone=UTC``: that would replace ``options`` a database URL gives."""
    _postgres_session_setting(dbapi_connection, "SET TIME ZONE 'UTC'")


def _postgres_session_setting(dbapi_connection: Any, statement: str) -> None:
    """Run ``statement`` (a ``SET``) for the connection's session, in no transaction: a
    rollback on check-in would undo it.

    A connection the server drops meanwhile is discarded by the pool: its error is raised
    as it came (``autocommit`` is not restored on it, which would raise "the connection is
    lost" in its place) and marked lost for :func:`_lost_while_set_up`."""
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
    except Exception as exc:
        if dbapi_connection.broken or dbapi_connection.closed:
            setattr(exc, _DROPPED_WHILE_SET_UP, True)
        raise
    finally:
        cursor.close()
    dbapi_connection.autocommit = autocommit


#: Marks an error raised while a new connection's session was set up on a dropped connection.
_DROPPED_WHILE_SET_UP: Final = "_kumiko_dropped_while_set_up"


def _lost_while_set_up(context: ExceptionContext) -> None:
    """``handle_error``: a connection dropped while its session was set up is a lost
    connection (``connection_invalidated``), one a worker outlives.  Connecting,
    SQLAlchemy asks the psycopg dialect whether an error is a disconnect without the
    connection, and it never says so: a killed backend would pass for a wrong URL."""
    if getattr(context.original_exception, _DROPPED_WHILE_SET_UP, False):
        context.is_disconnect = True


def _sqlite_given_up(context: ExceptionContext) -> None:
    """``handle_error`` of a SQLite engine: a full disk or a failed write may have rolled
    the whole transaction back (SQLite's documented answer to ``SQLITE_FULL`` and
    ``SQLITE_IOERR``), savepoints and all.  The connection is then dropped as a lost one (this connection only, not the
    pool): the transaction's next statement would else run outside any transaction,
    committing at once, and its savepoint's rollback failed with "no such savepoint",
    hiding the full disk behind an ``internal_error``."""
    if sqlite_exhausted(context.original_exception):
        # Ended here: SQLite closes a connection whose failed statement is still
        # referenced (by the exception's traceback) only once it is freed, and until
        # then the transaction's write lock stayed held.
        with suppress(Exception):
            if context.cursor is not None:
                context.cursor.close()
        with suppress(Exception):
            if context.connection is not None:
                context.connection.connection.dbapi_connection.rollback()  # type: ignore[union-attr]
        context.is_disconnect = True
        context.invalidate_pool_on_disconnect = False


def _sqlite_refuse_writes(dbapi_connection: Any, record: Any) -> None:
    record.info[_WRITES_REFUSED] = True  # _sqlite_begin leaves the pragma on
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only = ON")
    cursor.close()


def _postgres_refuse_writes(dbapi_connection: Any, _record: object) -> None:
    _postgres_session_setting(dbapi_connection, "SET default_transaction_read_only = on")


def _sqlite_begin(conn: Any) -> None:
    if conn.info.get(_WRITES_REFUSED):
        _send(conn, "BEGIN")  # query_only for good: no write lock, no pragma to reset
        return
    if conn.get_execution_options().get(READ_ONLY_OPTION):
        # A query: no write lock, and the connection refuses writes until its next writer
        # begins (the pragma outlives the transaction; no listener on every check-in).
        _send(conn, "PRAGMA query_only = ON")
        conn.info[READ_ONLY_OPTION] = True
        _send(conn, "BEGIN")
        return
    if conn.info.get(READ_ONLY_OPTION):
        _send(conn, "PRAGMA query_only = OFF")
        # Forgotten only once lifted: a failed pragma (an interrupt, a fault) left the
        # pooled connection refusing every later writer for good.
        del conn.info[READ_ONLY_OPTION]
    _send(conn, "BEGIN IMMEDIATE")


def unwatched(conn: Any) -> bool:
    """Whether nothing would see a statement sent on ``conn``'s driver connection itself
    instead of through ``exec_driver_sql``: no echo and no listener of statements
    (``before_cursor_execute``, an ``after_cursor_execute`` besides
    :func:`check_references`, which looks at writes only, a dialect's ``do_execute``)."""
    dispatch = conn.dispatch
    return not (
        conn._echo
        or dispatch.before_cursor_execute
        or not all(map(is_, dispatch.after_cursor_execute, repeat(check_references)))
        or conn.dialect.dispatch.do_execute
    )


def _send(conn: Any, sql: str) -> None:
    """``conn.exec_driver_sql(sql)`` for a statement that returns nothing, sent on the
    driver's connection itself when nothing would see the difference (:func:`unwatched`).
    SQLAlchemy's execution context, cursor and result around a ``BEGIN IMMEDIATE`` were
    a twentieth of a ``get_one -> update`` dispatch's CPU time (bench/handler.py).  A
    failure is wrapped and goes through ``handle_error`` as from ``exec_driver_sql``
    (SQLite still locked is ``unavailable``)."""
    if not unwatched(conn):
        conn.exec_driver_sql(sql)
        return
    try:
        conn.connection.dbapi_connection.execute(sql)
    except BaseException as exc:
        conn._handle_dbapi_exception(exc, sql, (), None, None)
