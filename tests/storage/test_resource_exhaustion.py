"""A database out of disk, memory or connections, for real: SQLite with ``max_page_count``
at its page count (``SQLITE_FULL``, "database or disk is full"), PostgreSQL with a trigger
raising ``disk_full`` (53100) or ``out_of_memory`` (53200), and a role at its
``CONNECTION LIMIT`` (53300).

A dispatch then answers ``unavailable`` (503, retry later) on both databases, with a
message that quotes no SQL, and writes nothing; once the space is back the same call
succeeds.  It was ``internal_error`` (500, "a bug, do not retry"), and on SQLite the full
disk hid behind "no such savepoint": SQLite had rolled the whole transaction back.
``program_limit_exceeded`` (54000) stays ``internal_error``: the same statement fails the
same way again."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _exhaustion import Full, limited_role
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._transient import transient

AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
#: Longer than a SQLite page: a row holding it needs new pages, which a full file has not.
BIG = "x" * 20_000


class RxNote(Entity):
    __tablename__ = "rx_note"
    text: Mapped[str] = mapped_column(default="")
    edits: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class RxEdited:
    text: str


@attrs.frozen
class NewNote:
    text: str


@attrs.frozen
class EditNote:
    id: uuid.UUID
    version: int
    text: str


def _feature() -> tuple[Feature[str], dict[str, Any]]:
    f: Feature[str] = Feature("rx")
    f.entity(RxNote)
    f.event(RxEdited, name="rx-edited")

    @f.projector(RxNote, RxEdited)
    def edited(row: RxNote, event: RxEdited) -> None:
        row.text = event.text
        row.edits += 1

    return f, {
        "create": f.write_handler(
            "create",
            f.pipeline(NewNote)
            .create("n", RxNote, data=lambda c: RxNote(text=c.payload.text))
            .return_(lambda c: ok(c.steps["n"].id)),
        ),
        "update": f.write_handler(
            "update",
            f.pipeline(EditNote)
            .update(
                "n",
                RxNote,
                id=lambda c: c.payload.id,
                changes=lambda c: {"text": c.payload.text},
                version=lambda c: c.payload.version,
            )
            .return_(lambda c: ok(c.steps["n"].version)),
        ),
        "append": f.write_handler(
            "append",
            f.pipeline(EditNote)
            .append_event(RxNote, id=lambda c: c.payload.id, event=lambda c: RxEdited(c.payload.text))
            .return_(lambda c: ok(None)),
        ),
    }


def _counts(app: App) -> tuple[int, int]:
    with app.engine.connect() as conn:
        return (
            conn.scalar(sa.text("SELECT count(*) FROM rx_note")) or 0,
            conn.scalar(sa.text("SELECT count(*) FROM kumiko_events")) or 0,
        )


def _unavailable(answer: object) -> None:
    failure = failure_of(answer, "unavailable")
    assert failure.http_status == 503
    assert "out of disk, memory or connections, try again" in failure.message
    for leak in ("INSERT", "UPDATE", "SELECT", "Traceback", "xxxx", "No space left"):
        assert leak not in failure.message
    assert failure.details["error_id"] in failure.message  # type: ignore[index]


@pytest.mark.parametrize("kind", ["create", "update", "append"])
def test_a_write_on_a_full_database_is_unavailable_writes_nothing_and_succeeds_later(app_on: AppOn, kind: str) -> None:
    f, handlers = _feature()
    app = app_on([f])
    full = Full(app)
    note = ok_data(app.dispatch(handlers["create"], NewNote("first"), user=USER))
    before = _counts(app)
    call = NewNote(BIG) if kind == "create" else EditNote(note, 1, BIG)
    full.on()
    _unavailable(app.dispatch(handlers[kind], call, user=USER))
    assert _counts(app) == before  # neither the event nor its row
    with app.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT max(length(text)) FROM rx_note")) == len("first")
    full.off()
    ok_data(app.dispatch(handlers[kind], call, user=USER))
    rows, events = _counts(app)
    assert events == before[1] + 1
    assert rows == before[0] + (kind == "create")


def test_an_idempotent_dispatch_on_a_full_database_keeps_no_key(app_on: AppOn) -> None:
    """The key is not stored with an ``unavailable``: the call repeated with the same key,
    once there is space, runs (once)."""
    f, handlers = _feature()
    app = app_on([f])
    full = Full(app, tables=("kumiko_events", "kumiko_idempotency_keys"))
    full.on()
    _unavailable(app.dispatch(handlers["create"], NewNote(BIG), user=USER, idempotency_key="k1"))
    assert _counts(app) == (0, 0)
    full.off()
    first = ok_data(app.dispatch(handlers["create"], NewNote(BIG), user=USER, idempotency_key="k1"))
    again = ok_data(app.dispatch(handlers["create"], NewNote(BIG), user=USER, idempotency_key="k1"))
    assert first == again
    assert _counts(app) == (1, 1)


@pytest.mark.postgres
@pytest.mark.parametrize("state", ["53100", "53200"])
def test_postgres_out_of_disk_or_memory_anywhere_in_the_transaction(fresh_postgres_url: str, state: str) -> None:
    """Whichever write meets it — the event, the projection's row — the answer is the same."""
    f, handlers = _feature()
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        for table in ("kumiko_events", "rx_note"):
            full = Full(app, state, (table,))
            full.on()
            _unavailable(app.dispatch(handlers["create"], NewNote("a"), user=USER))
            full.off()
        assert _counts(app) == (0, 0)
    finally:
        app.dispose()


@pytest.mark.postgres
def test_postgres_program_limit_exceeded_stays_an_internal_error(fresh_postgres_url: str) -> None:
    """54000 (an index row too large, too many columns): the same statement fails again,
    so no retry helps: ``internal_error``, as any other exception."""
    f, handlers = _feature()
    app = App([f], database_url=fresh_postgres_url)
    try:
        app.create_all()
        Full(app, "54000").on()
        failure = failure_of(app.dispatch(handlers["create"], NewNote("a"), user=USER), "internal_error")
        assert "raised OperationalError (error id" in failure.message
        assert "INSERT" not in failure.message
    finally:
        app.dispose()


# --- Too many connections (53300): a role at its CONNECTION LIMIT ---


@pytest.fixture
def limited(fresh_postgres_url: str) -> Iterator[tuple[str, Callable[[int], None]]]:
    with limited_role(fresh_postgres_url) as given:
        yield given


@pytest.mark.postgres
def test_a_dispatch_that_cannot_connect_for_too_many_connections_is_unavailable(
    limited: tuple[str, Callable[[int], None]],
) -> None:
    url, limit = limited
    f, handlers = _feature()
    app = App([f], database_url=url)
    try:
        app.create_all()
        app.engine.dispose()  # no pooled connection: the dispatch needs a new one
        limit(0)
        answer = app.dispatch(handlers["create"], NewNote("a"), user=USER)
        _unavailable(answer)
        limit(-1)
        ok_data(app.dispatch(handlers["create"], NewNote("a"), user=USER))
        assert _counts(app) == (1, 1)
    finally:
        app.dispose()


# --- create_all on a full database ---


def test_create_all_on_a_full_database_raises_its_error_creates_nothing_and_runs_again(db_url: str) -> None:
    """The database's own error (an outage, not a problem of the App's definition: no
    ``BootError``), nothing half-created, and the same call completes once there is
    space — while the first error is still held (SQLite's write lock is not)."""
    f, handlers = _feature()
    app = App([f], database_url=db_url)
    try:
        with app.engine.begin() as conn:  # a table of the operator's: a file of some pages
            conn.execute(sa.text("CREATE TABLE operator_notes (x INTEGER)"))
        full = Full(app)
        if full.sqlite:
            full.on()
        else:  # PostgreSQL out of disk for DDL: an event trigger
            with app.engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "CREATE FUNCTION rx_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN "
                        "RAISE EXCEPTION 'No space left on device' USING ERRCODE = '53100'; END $$"
                    )
                )
                conn.execute(sa.text("CREATE EVENT TRIGGER rx_ddl ON ddl_command_end EXECUTE FUNCTION rx_ddl()"))
        with pytest.raises(sa.exc.OperationalError) as raised:
            app.create_all()
        assert transient(raised.value)
        assert sorted(sa.inspect(app.engine).get_table_names()) == ["operator_notes"]
        if full.sqlite:
            full.off()
        else:
            with app.engine.begin() as conn:
                conn.execute(sa.text("DROP EVENT TRIGGER rx_ddl"))
        app.create_all()
        ok_data(app.dispatch(handlers["create"], NewNote("a"), user=USER))
        del raised
    finally:
        app.dispose()
