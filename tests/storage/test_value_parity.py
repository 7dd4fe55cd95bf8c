"""The same input gives the same answer on SQLite and PostgreSQL, for values where the two
differed: an event's dict fields and headers read back as written (PostgreSQL's ``jsonb``
sorted their keys and dropped the sign of ``-0.0``); a ``Float`` column holds ``-0.0`` as
``0.0`` on both (SQLite kept ``0.0``, PostgreSQL ``-0.0``); a bool given to a number column
is a ``validation_error`` naming its field (SQLite stored ``1``, PostgreSQL refused it
with an ``internal_error``)."""

from __future__ import annotations

import datetime as dt
import enum
import math
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import AggregateCreated, App, Entity, Feature, User, ok
from kumiko_typed.testing.postgres import PostgresServer

AppOn = Callable[..., App]


class Shade(enum.Enum):
    DARK = "d"
    LIGHT = "l"


class Swap(enum.Enum):
    """Each member's value is the other's name."""

    A = "B"
    B = "A"


class PvThing(Entity):
    __tablename__ = "pv_thing"
    label: Mapped[str | None] = mapped_column(sa.String(40), nullable=True, default=None)
    ratio: Mapped[float | None] = mapped_column(sa.Float, nullable=True, default=None)
    count: Mapped[int | None] = mapped_column(sa.Integer, nullable=True, default=None)
    doc: Mapped[Any] = mapped_column(sa.JSON, nullable=True, default=None)
    shade: Mapped[Shade | None] = mapped_column(sa.Enum(Shade), nullable=True, default=None)
    ref: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid, nullable=True, default=None)
    day: Mapped[dt.date | None] = mapped_column(sa.Date, nullable=True, default=None)
    at: Mapped[dt.datetime | None] = mapped_column(sa.DateTime(timezone=True), nullable=True, default=None)
    clock: Mapped[dt.time | None] = mapped_column(sa.Time, nullable=True, default=None)
    amount: Mapped[Decimal | None] = mapped_column(sa.Numeric(10, 2), nullable=True, default=None)
    swap: Mapped[Swap | None] = mapped_column(sa.Enum(Swap), nullable=True, default=None)


@attrs.frozen
class Put:
    """Sets one column (a test's stand-in for a value a compute step made)."""

    column: str
    value: Any


@attrs.frozen
class Labels:
    pattern: str = "%"
    folded: bool = False


@attrs.frozen
class Tag:
    id: uuid.UUID
    data: dict[str, Any]
    maybe: dict[str, list[int] | None] | None = None


@attrs.frozen
class Tagged:
    data: dict[str, Any]
    maybe: dict[str, list[int] | None] | None = None


pv = Feature("pv")
pv.entity(PvThing)
pv.event(Tagged, name="tagged")


@pv.projector(PvThing, Tagged)
def _tagged(row: PvThing, event: Tagged) -> None:
    row.doc = event.data


put = pv.write_handler(
    "put",
    pv.pipeline(Put)
    .create("thing", PvThing, data=lambda c: PvThing(**{c.payload.column: c.payload.value}))
    .return_(lambda c: ok(c.steps["thing"].id)),
)
tag = pv.write_handler(
    "tag",
    pv.pipeline(Tag)
    .append_event(
        PvThing,
        id=lambda c: c.payload.id,
        event=lambda c: Tagged(c.payload.data, c.payload.maybe),
        headers=lambda c: {"zone": "b", "area": "a", "kind": "c"},
    )
    .return_(lambda c: ok(None)),
)


@attrs.frozen
class Change:
    id: uuid.UUID
    column: str
    value: Any


change = pv.write_handler(
    "change",
    pv.pipeline(Change)
    .update(
        "thing",
        PvThing,
        id=lambda c: c.payload.id,
        changes=lambda c: {c.payload.column: c.payload.value},
        skip_optimistic_lock=True,
    )
    .return_(lambda c: ok(None)),
)


labels = pv.query_handler(
    "labels",
    pv.query_pipeline(Labels)
    .find_many(
        "things",
        lambda c: (
            sa.select(PvThing)
            .where(
                PvThing.label.ilike(c.payload.pattern) if c.payload.folded else PvThing.label.like(c.payload.pattern)
            )
            .order_by(PvThing.label)
        ),
    )
    .return_(lambda c: ok([t.label for t in c.steps["things"]])),
)


@attrs.frozen
class ByRef:
    ref: Any


by_ref = pv.query_handler(
    "by-ref",
    pv.query_pipeline(ByRef)
    .find_many("things", lambda c: sa.select(PvThing).where(PvThing.ref == c.payload.ref))
    .return_(lambda c: ok(len(c.steps["things"]))),
)


@pytest.fixture
def app(app_on: AppOn) -> App:
    return app_on([pv])


def _column(app: App, id: uuid.UUID, column: str) -> Any:
    table: sa.Table = PvThing.__table__  # type: ignore[assignment]
    with app.engine.connect() as conn:
        return conn.execute(sa.select(table.c[column]).where(table.c.id == id)).scalar_one()


def test_an_events_dict_fields_and_headers_read_back_as_written(app: App, user: User) -> None:
    created = ok_data(app.dispatch(put, Put("label", "x"), user=user))
    data = {"b": 1, "a": {"d": -0.0, "c": 1e20}, "aa": []}
    maybe = {"k": None, "j": [1]}
    ok_data(app.dispatch(tag, Tag(created, data, maybe), user=user))

    stored = ok_data(app.read_stream(PvThing, created, user=user))[1]
    assert stored.event == Tagged(data, maybe)
    assert list(stored.event.data) == ["b", "a", "aa"]
    assert list(stored.event.data["a"]) == ["d", "c"]
    assert math.copysign(1, stored.event.data["a"]["d"]) == -1
    assert type(stored.event.data["a"]["c"]) is float
    assert list(stored.event.maybe) == ["k", "j"]
    assert list(stored.headers) == ["zone", "area", "kind"]
    # The projector's JSON column had it right before: the row and the event now agree.
    assert list(_column(app, created, "doc")) == ["b", "a", "aa"]


def test_a_created_rows_json_column_reads_back_from_its_event_as_written(app: App, user: User) -> None:
    doc = {"zeta": 1, "alpha": {"b": 2.0, "a": -0.0}}
    created = ok_data(app.dispatch(put, Put("doc", doc), user=user))
    first = ok_data(app.read_stream(PvThing, created, user=user))[0].event
    assert isinstance(first, AggregateCreated)
    assert first.values["doc"] == doc
    assert list(first.values["doc"]) == ["zeta", "alpha"]
    assert list(first.values["doc"]["alpha"]) == ["b", "a"]
    assert math.copysign(1, first.values["doc"]["alpha"]["a"]) == -1


def test_an_event_store_made_with_jsonb_columns_keeps_working(fresh_postgres_url: str, user: User) -> None:
    """A database made before the change keeps ``jsonb`` columns (``create_all`` alters no
    table): events are still appended and read, with that type's key order."""
    app = App([pv], database_url=fresh_postgres_url)
    try:
        app.create_all()
        with app.engine.begin() as conn:
            for column in ("payload", "headers"):
                conn.exec_driver_sql(f"ALTER TABLE kumiko_events ALTER COLUMN {column} TYPE jsonb")
        app.create_all()  # no complaint about the old type
        created = ok_data(app.dispatch(put, Put("label", "x"), user=user))
        ok_data(app.dispatch(tag, Tag(created, {"b": 1, "a": 2}), user=user))
        stream = ok_data(app.read_stream(PvThing, created, user=user))
        assert [e.type for e in stream] == ["pv-thing.created", "tagged"]
        assert stream[1].event == Tagged({"a": 2, "b": 1})
        assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches
    finally:
        app.dispose()


def test_a_negative_zero_in_a_float_column_reads_back_as_zero_on_both(app: App, user: User) -> None:
    created = ok_data(app.dispatch(put, Put("ratio", -0.0), user=user))
    assert math.copysign(1, _column(app, created, "ratio")) == 1
    with app.engine.connect() as conn:  # a computed one too
        table: sa.Table = PvThing.__table__  # type: ignore[assignment]
        assert math.copysign(1, conn.execute(sa.select(-table.c.ratio)).scalar_one()) == 1
    assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches


@pytest.mark.parametrize("column", ["ratio", "count"])
def test_a_bool_in_a_number_column_is_a_validation_error_naming_the_field(app: App, user: User, column: str) -> None:
    failure = failure_of(app.dispatch(put, Put(column, True), user=user), "validation_error")
    assert failure.details[0]["path"] == "$.value"
    assert failure.details[0]["column"] == f"pv_thing.{column}"
    assert failure.details[0]["message"] == "must be a number, not true or false"
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(PvThing)).scalar_one() == 0


@pytest.fixture(params=["sqlite", "postgres-icu"])
def locale_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """SQLite, or a PostgreSQL database whose default collation is an ICU locale's, as a
    server set up for people rather than for tests often has."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kumiko.sqlite3'}"
        return
    server: PostgresServer = request.getfixturevalue("kumiko_postgres")
    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(server.admin_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        try:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en' LOCALE 'C'")
        except psycopg.Error as exc:  # before PostgreSQL 15, or built without ICU
            pytest.skip(f"this server makes no ICU database: {exc}")
    try:
        yield server.url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        server.drop_database(name)


def test_text_orders_and_folds_case_by_code_point_whatever_the_databases_collation(
    locale_db_url: str, user: User
) -> None:
    app = App([pv], database_url=locale_db_url)
    try:
        app.create_all()
        for label in ("b", "B", "a", "é", "É", "Z", "_x", "1"):
            ok_data(app.dispatch(put, Put("label", label), user=user))
        assert ok_data(app.query(labels, Labels(), user=user)) == ["1", "B", "Z", "_x", "a", "b", "É", "é"]
        assert ok_data(app.query(labels, Labels("é%", folded=True), user=user)) == ["é"]
        assert ok_data(app.query(labels, Labels("B%", folded=True), user=user)) == ["B", "b"]
    finally:
        app.dispose()


def test_a_json_element_read_as_text_orders_by_code_point_whatever_the_databases_collation(
    locale_db_url: str, user: User
) -> None:
    """``->>`` gives text of the database's default collation: in an ICU database a JSON
    element read as text was ordered, compared and cast under the locale's rules ("_x",
    "1", "a", "B", "é", "Z"), where SQLite orders by code point, as a text column does on both."""
    app = App([pv], database_url=locale_db_url)
    try:
        app.create_all()
        for label in ("b", "B", "a", "é", "É", "Z", "_x", "1"):
            ok_data(app.dispatch(put, Put("doc", {"k": label, "in": {"k": label}}), user=user))
        table: sa.Table = PvThing.__table__  # type: ignore[assignment]
        by_code_point = ["1", "B", "Z", "_x", "a", "b", "É", "é"]
        with app.engine.connect() as conn:
            for element in (
                table.c.doc["k"].as_string(),
                table.c.doc[("in", "k")].as_string(),
                sa.cast(table.c.doc["k"].as_string(), sa.String(40)),
            ):
                assert list(conn.scalars(sa.select(element).order_by(element))) == by_code_point
                assert conn.scalar(sa.select(sa.func.max(element))) == "é"
                assert sorted(conn.scalars(sa.select(element).where(element < "a"))) == ["1", "B", "Z", "_x"]
                assert sorted(conn.scalars(sa.select(element).where(element.ilike("é%")))) == ["é"]
    finally:
        app.dispose()


@pytest.mark.parametrize("given", [Shade.LIGHT, "LIGHT"])
def test_an_enum_column_given_a_members_name_reads_back_from_its_event(app: App, user: User, given: object) -> None:
    """SQLAlchemy's ``Enum`` takes text as a member's name; the event stored that text,
    and reading it back by value failed: ``read_stream`` and rebuilds were internal errors."""
    created = ok_data(app.dispatch(put, Put("shade", given), user=user))
    assert _column(app, created, "shade") is Shade.LIGHT
    first = ok_data(app.read_stream(PvThing, created, user=user))[0].event
    assert isinstance(first, AggregateCreated) and first.values["shade"] is Shade.LIGHT
    assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches


def test_text_that_is_no_uuid_is_a_validation_error_naming_the_field(app: App, user: User) -> None:
    failure = failure_of(app.dispatch(put, Put("ref", "not-a-uuid"), user=user), "validation_error")
    assert failure.details[0] == {
        "path": "$.value",
        "message": "must be a UUID",
        "column": "pv_thing.ref",
        "step": '0 aggregate.create "thing"',
    }
    read = failure_of(app.query(by_ref, ByRef("not-a-uuid"), user=user), "validation_error")
    assert (read.details[0]["path"], read.details[0]["message"]) == ("$.ref", "must be a UUID")
    assert "not-a-uuid" not in failure.message + read.message
    written = ok_data(app.dispatch(put, Put("ref", "ABCDEF00-0000-0000-0000-000000000001"), user=user))
    assert _column(app, written, "ref") == uuid.UUID("abcdef00-0000-0000-0000-000000000001")
    assert ok_data(app.query(by_ref, ByRef("abcdef00-0000-0000-0000-000000000001"), user=user)) == 1


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (
            "day",
            dt.datetime(2024, 1, 1, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            "must be a date, not a datetime",
        ),
        ("day", dt.datetime(2024, 1, 1, 12, 30), "must be a date, not a datetime"),
        ("day", "2024-01-01", "must be a date, not text"),
        ("at", "2024-01-01T00:00:00+00:00", "must be a datetime, not text"),
        ("clock", "10:00", "must be a time, not text"),
        ("label", b"abc", "must be text, not bytes"),
        ("ref", 5, "must be a UUID"),
    ],
)
def test_a_value_of_another_kind_than_its_column_is_refused_alike(
    app: App, user: User, column: str, value: object, message: str
) -> None:
    """Before: PostgreSQL cast ISO text to a date or time where SQLite's types raised (an
    ``internal_error``); a datetime in a ``Date`` lost its time (PostgreSQL took an aware
    one's UTC date, SQLite its wall-clock date) and its event could not be read back;
    bytes in a ``String`` were a BLOB on SQLite, the text ``\\x616263`` on PostgreSQL; a
    number for a ``Uuid`` was an ``internal_error`` on both."""
    failure = failure_of(app.dispatch(put, Put(column, value), user=user), "validation_error")
    detail = failure.details[0]
    assert (detail["path"], detail["column"]) == ("$.value", f"pv_thing.{column}")
    assert detail["message"].startswith(message)
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(PvThing)).scalar_one() == 0


@pytest.mark.parametrize(
    ("column", "value"),
    [("day", dt.date(2024, 1, 1)), ("at", dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)), ("clock", dt.time(10, 0, 1))],
)
def test_a_value_of_its_columns_kind_is_written_and_replayed(app: App, user: User, column: str, value: object) -> None:
    created = ok_data(app.dispatch(put, Put(column, value), user=user))
    assert _column(app, created, column) == value
    first = ok_data(app.read_stream(PvThing, created, user=user))[0].event
    assert isinstance(first, AggregateCreated) and first.values[column] == value
    assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches


def test_a_float_in_a_numeric_column_replays_as_the_decimal_the_row_holds(app: App, user: User) -> None:
    """The event keeps the float as JSON writes it (1.1); read back through ``Decimal(float)``
    it was 1.100000000000000088817841970012523233890533447265625, so a verifying rebuild
    found every such row changed, and a repairing one would have written that."""
    created = ok_data(app.dispatch(put, Put("amount", 1.1), user=user))
    assert _column(app, created, "amount") == Decimal("1.10")
    first = ok_data(app.read_stream(PvThing, created, user=user))[0].event
    assert isinstance(first, AggregateCreated) and first.values["amount"] == Decimal("1.1")
    assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches


@pytest.mark.parametrize(
    "text",
    [
        "urn:uuid:abcdef00-0000-0000-0000-000000000001",
        " bcdef00000000000000000000000001",
        "+bcdef00000000000000000000000001",
        "abcd_f00000000000000000000000001",
        "{abcdef00000000000000000000000001",
        "-abcdef00-0000-0000-0000-000000000001-",
        "\u0661" * 32,
    ],
)
def test_text_pythons_uuid_takes_but_postgresql_refuses_is_no_uuid_on_both(app: App, user: User, text: str) -> None:
    """``uuid.UUID`` strips ``urn:uuid:``, every hyphen and either brace, and ``int`` takes
    spaces, a sign, underscores and other scripts' digits: SQLite stored such text as a
    UUID, PostgreSQL's cast refused it with an ``internal_error`` naming no field."""
    failure = failure_of(app.dispatch(put, Put("ref", text), user=user), "validation_error")
    assert (failure.details[0]["path"], failure.details[0]["message"]) == ("$.value", "must be a UUID")
    read = failure_of(app.query(by_ref, ByRef(text), user=user), "validation_error")
    assert (read.details[0]["path"], read.details[0]["message"]) == ("$.ref", "must be a UUID")


@pytest.mark.parametrize(
    "text",
    [
        "{abcdef00-0000-0000-0000-000000000001}",
        "abcdef00000000000000000000000001",
        "abcd-ef00-0000-0000-0000-0000-0000-0001",
    ],
)
def test_text_of_every_uuid_form_both_take_is_written(app: App, user: User, text: str) -> None:
    written = ok_data(app.dispatch(put, Put("ref", text), user=user))
    assert _column(app, written, "ref") == uuid.UUID("abcdef00-0000-0000-0000-000000000001")
    assert ok_data(app.query(by_ref, ByRef(text), user=user)) == 1


@pytest.mark.parametrize("given", ["A", Swap.A])
def test_an_enum_columns_text_that_is_also_another_members_value_replays_as_the_row(
    app: App, user: User, given: object
) -> None:
    """SQLAlchemy's ``Enum`` reads text as a member's name (the row holds ``Swap.A`` for
    ``"A"``); read back by value first, the event said ``Swap.B``."""
    created = ok_data(app.dispatch(put, Put("swap", given), user=user))
    assert _column(app, created, "swap") is Swap.A
    first = ok_data(app.read_stream(PvThing, created, user=user))[0].event
    assert isinstance(first, AggregateCreated) and first.values["swap"] is Swap.A
    assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches
    ok_data(app.dispatch(change, Change(created, "swap", "B"), user=user))
    assert _column(app, created, "swap") is Swap.B
    assert ok_data(app.rebuild_projection(PvThing, user=user, verify=True)).matches
