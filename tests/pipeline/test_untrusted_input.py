"""Untrusted input is a 4xx naming the field, never a 500 (issue 11, item 7), and the same
answer on SQLite and PostgreSQL: the payload converter refuses what no field type can be
trusted with (lone surrogates, NUL, NaN, naive datetimes, nesting without end), and values
that do not fit their columns are refused by the framework before the database sees them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok

AppOn = Callable[..., App]


class T7Item(Entity):
    __tablename__ = "t7_item"
    sku: Mapped[str] = mapped_column(sa.String(10), unique=True)
    qty: Mapped[int] = mapped_column(sa.Integer)
    weight: Mapped[float] = mapped_column(sa.Float)
    price: Mapped[Decimal] = mapped_column(sa.Numeric(10, 2))
    at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    tags: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    note: Mapped[str] = mapped_column(sa.Text, default="")


@attrs.frozen
class NewItem:
    sku: str
    qty: int
    weight: float
    price: Decimal
    at: datetime
    tags: dict[str, Any]
    note: str = ""


@attrs.frozen
class Noted:
    note: str
    more: int


@attrs.frozen
class Note:
    id: uuid.UUID
    note: str
    more: int = 1


def _feature() -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("t7", requires=["webhook.send"])
    f.entity(T7Item)
    f.event(Noted, name="t7-noted")

    @f.projector(T7Item, Noted)
    def apply(row: T7Item, event: Noted) -> None:
        row.note = event.note
        row.qty += event.more

    create = f.write_handler(
        "create",
        f.pipeline(NewItem)
        .create(
            "item",
            T7Item,
            data=lambda c: T7Item(
                sku=c.payload.sku,
                qty=c.payload.qty,
                weight=c.payload.weight,
                price=c.payload.price,
                at=c.payload.at,
                tags=c.payload.tags,
                note=c.payload.note,
            ),
        )
        .append_event(T7Item, id=lambda c: c.steps["item"].id, event=lambda c: Noted(c.payload.note, 1))
        .send_webhook(url="http://127.0.0.1:9/t7", body=lambda c: {"note": c.payload.note, "tags": c.payload.tags})
        .return_(lambda c: ok(c.steps["item"].id)),
    )
    note = f.write_handler(
        "note",
        f.pipeline(Note)
        .append_event(T7Item, id=lambda c: c.payload.id, event=lambda c: Noted(c.payload.note, c.payload.more))
        .return_(lambda c: ok(None)),
    )
    return f, create, note


GOOD: dict[str, Any] = {
    "sku": "tea",
    "qty": 3,
    "weight": 1.5,
    "price": "4.20",
    "at": "2024-05-06T07:08:09+00:00",
    "tags": {"a": [1, "b"]},
    "note": "fine",
}


def _counts(app: App) -> tuple[int, int, int]:
    with app.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.scalar(sa.select(sa.func.count()).select_from(t))
            for t in (T7Item.__table__, sa.table("kumiko_events"), sa.table("kumiko_outbox"))
        )


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


OUT_OF_UTC = "expected an ISO-8601 datetime within years 1 to 9999 in UTC"

#: field → a value the converter must refuse → the message it gives.
REFUSED: list[tuple[str, Any, str]] = [
    ("sku", "\ud800", "is not valid Unicode (it holds a lone surrogate)"),
    ("note", "a\udfffb", "is not valid Unicode (it holds a lone surrogate)"),
    ("note", "nul\x00", "must not contain NUL characters (U+0000)"),
    ("weight", float("nan"), "must be a finite number (not NaN or infinity)"),
    ("weight", float("inf"), "must be a finite number (not NaN or infinity)"),
    ("weight", float("-inf"), "must be a finite number (not NaN or infinity)"),
    ("weight", 10**400, "expected a number in the range of a double"),
    ("price", "NaN", "expected a finite decimal, got 'NaN'"),
    ("price", "sNaN", "expected a finite decimal, got 'sNaN'"),
    ("price", "-Infinity", "expected a finite decimal, got '-Infinity'"),
    # Past PostgreSQL's numeric: Python's arithmetic overflowed (an internal_error) or made it 0.
    ("price", "1e999999999", "must have at most 131072 digits before the decimal point"),
    ("price", "-1e-999999999", "must have at most 16383 digits after the decimal point"),
    ("price", "0E-16384", "must have at most 16383 digits after the decimal point"),
    ("at", "2024-05-06T07:08:09", "expected an ISO-8601 datetime with a UTC offset, got '2024-05-06T07:08:09'"),
    # In UTC (as both databases store it) outside what a datetime holds: PostgreSQL stored
    # it and then failed every read of the row; SQLite stored the wall-clock digits.
    ("at", "9999-12-31T23:59:59-12:00", f"{OUT_OF_UTC}, got '9999-12-31T23:59:59-12:00'"),
    ("at", "0001-01-01T00:00:00+01:00", f"{OUT_OF_UTC}, got '0001-01-01T00:00:00+01:00'"),
    # More digits than Python writes: the JSON encoder raised ValueError (internal_error).
    ("qty", 10**5000, "must have at most 4300 digits"),
    ("tags", {"k": [-(10**4301)]}, "must have at most 4300 digits"),
]


def _case_id(field: str, value: Any) -> str:
    try:
        shown = repr(value)
    except ValueError:  # the numbers too long to write
        shown = "a number too long to write"
    return f"{field}={shown}"[:30]


@pytest.mark.parametrize(("field", "value", "message"), REFUSED, ids=[_case_id(f, v) for f, v, _ in REFUSED])
def test_the_converter_refuses_what_no_column_can_be_trusted_with(
    app_on: AppOn, admin: User, field: str, value: Any, message: str
) -> None:
    f, create, _note = _feature()
    app = app_on([f])
    result = app.dispatch_json(create.name, {**GOOD, field: value}, user=admin)
    assert isinstance(result, Failure), result
    assert (result.code, result.http_status) == ("validation_error", 400)
    path = "$.tags.k[0]" if field == "tags" else f"$.{field}"
    assert result.details == [{"path": path, "message": message}]
    assert _counts(app) == (0, 0, 0)


@attrs.frozen
class Priced:
    price: Decimal


@pytest.mark.parametrize(
    ("price", "answer"),
    [
        ("1e999999999", "must have at most 131072 digits before the decimal point"),
        ("-1e-999999999", "must have at most 16383 digits after the decimal point"),
        ("9e131071", "8.1E+262143"),
        ("1e-16383", "1E-32766"),
    ],
)
def test_a_decimal_is_refused_where_postgresqls_numeric_ends_and_computes_within_it(
    app_on: AppOn, admin: User, price: str, answer: str
) -> None:
    """Before: ``1e999999999`` squared was an ``internal_error`` (decimal.Overflow) and
    ``-1e-999999999`` squared a silent 0; within the bound a product stays far inside
    Python's decimal exponents."""
    f: Feature[Any] = Feature("t7d")
    square = f.write_handler(
        "square",
        f.pipeline(Priced)
        .compute("square", lambda c: c.payload.price * c.payload.price)
        .return_(lambda c: ok(str(c.steps["square"]))),
    )
    result = app_on([f]).dispatch_json(square.name, {"price": price}, user=admin)
    if isinstance(result, Ok):
        assert result.data == answer
    else:
        assert (result.code, result.details) == ("validation_error", [{"path": "$.price", "message": answer}])


@pytest.mark.parametrize("depth", [65, 600, 900, 5000])
def test_json_nested_without_end_is_refused_with_its_path(app_on: AppOn, admin: User, depth: int) -> None:
    f, create, _note = _feature()
    app = app_on([f])
    result = app.dispatch_json(create.name, {**GOOD, "tags": {"deep": _nested(depth)}}, user=admin)
    assert isinstance(result, Failure), result
    assert result.code == "validation_error"
    assert result.details == [{"path": "$.tags.deep" + "[0]" * 62, "message": "is nested deeper than 64 levels"}]
    assert _counts(app) == (0, 0, 0)


def test_keys_are_checked_as_strings_are(app_on: AppOn, admin: User) -> None:
    f, create, _note = _feature()
    app = app_on([f])
    result = app.dispatch_json(create.name, {**GOOD, "tags": {"ok": 1, "k\x00": 2}}, user=admin)
    assert isinstance(result, Failure) and result.code == "validation_error", result
    assert result.details == [{"path": "$.tags", "message": "has a key that must not contain NUL characters (U+0000)"}]


@pytest.mark.parametrize("name", [["x"], {"a": 1}, None, 3])
def test_a_handler_name_that_is_not_a_string_is_not_found(app_on: AppOn, admin: User, name: Any) -> None:
    f, _create, _note = _feature()
    app = app_on([f])
    result = app.dispatch_json(name, GOOD, user=admin)
    assert isinstance(result, Failure) and result.code == "not_found", result


# --- column limits: checked before the database, the same on both -------------------------------

STEP = '0 aggregate.create "item"'

#: A payload accepted by the converter that the columns cannot hold → the one problem.
UNFIT: list[tuple[dict[str, Any], dict[str, str]]] = [
    ({"sku": "x" * 11}, {"path": "$.sku", "message": "must be at most 10 characters long, not 11"}),
    ({"sku": "ü" * 11}, {"path": "$.sku", "message": "must be at most 10 characters long, not 11"}),
    ({"qty": 2**31}, {"path": "$.qty", "message": "must be between -2147483648 and 2147483647"}),
    ({"qty": -(2**70)}, {"path": "$.qty", "message": "must be between -2147483648 and 2147483647"}),
    ({"price": "123456789.5"}, {"path": "$.price", "message": "must have at most 8 digits before the decimal point"}),
    ({"price": "1e131071"}, {"path": "$.price", "message": "must have at most 8 digits before the decimal point"}),
    # More decimals than the scale: PostgreSQL rounds (99999999.995 then overflows), SQLite keeps them.
    ({"price": "4.205"}, {"path": "$.price", "message": "must have at most 2 digits after the decimal point"}),
    ({"price": "99999999.995"}, {"path": "$.price", "message": "must have at most 2 digits after the decimal point"}),
]


@pytest.mark.parametrize(("change", "problem"), UNFIT, ids=[repr(c)[:40] for c, _ in UNFIT])
def test_a_value_its_column_cannot_hold_is_the_same_validation_error_on_both_databases(
    app_on: AppOn, admin: User, change: dict[str, Any], problem: dict[str, str]
) -> None:
    """Before: PostgreSQL refused with path "$" (or an internal error), SQLite stored it."""
    f, create, _note = _feature()
    app = app_on([f])
    column = f"t7_item.{next(iter(change))}"
    result = app.dispatch_json(create.name, {**GOOD, **change}, user=admin)
    assert isinstance(result, Failure), result
    assert (result.code, result.http_status) == ("validation_error", 400)
    assert result.details == [{**problem, "column": column, "step": STEP}]
    named = f"{column}, from {problem['path']}"
    assert result.message == f"step {STEP}: a value does not fit its column: {problem['message']} ({named})"
    assert _counts(app) == (0, 0, 0)


def test_a_nul_from_a_structured_payload_is_refused_at_each_store(app_on: AppOn, admin: User) -> None:
    """``dispatch`` skips the converter: the columns' check catches it, in the entity's
    text column, in an event payload, in an outbox message."""
    f, create, note = _feature()
    app = app_on([f])
    good = NewItem("tea", 3, 1.5, Decimal("4.20"), datetime.fromisoformat(GOOD["at"]), {}, "fine")
    item_id = app.dispatch(create, good, user=admin)
    assert isinstance(item_id, Ok), item_id
    before = _counts(app)

    bad_row = app.dispatch(create, attrs.evolve(good, sku="nul", note="a\x00"), user=admin)
    assert isinstance(bad_row, Failure) and bad_row.code == "validation_error", bad_row
    nul = "must not contain NUL characters (U+0000)"
    assert bad_row.details == [{"path": "$.note", "message": nul, "column": "t7_item.note", "step": STEP}]
    bad_tags = app.dispatch(create, attrs.evolve(good, sku="tag", tags={"k": "v\x00"}), user=admin)
    assert isinstance(bad_tags, Failure) and bad_tags.details == [
        {
            "path": "$.tags.k",
            "message": "must not contain NUL characters (U+0000) (at $.k)",
            "column": "t7_item.tags",
            "step": STEP,
        }
    ]
    bad_event = app.dispatch(note, Note(item_id.data, "x\x00"), user=admin)
    assert isinstance(bad_event, Failure) and bad_event.details == [
        {
            "path": "$.note",
            "message": "must not contain NUL characters (U+0000) (at $.note)",
            "column": "kumiko_events.payload",
            "step": "0 aggregate.append_event",
        }
    ]
    overflow = app.dispatch(note, Note(item_id.data, "fine", 2**31), user=admin)
    assert isinstance(overflow, Failure) and overflow.details == [
        {  # the projector's sum came from no payload field
            "path": "$",
            "message": "must be between -2147483648 and 2147483647",
            "column": "t7_item.qty",
            "step": "0 aggregate.append_event",
        }
    ]
    assert _counts(app) == before


def test_what_a_structured_payload_brings_past_the_converter_is_refused_by_the_column(
    app_on: AppOn, admin: User
) -> None:
    """``dispatch`` skips the converter: a time the UTC column cannot hold and a number the
    JSON encoder cannot write are the same validation_error on both databases (before:
    PostgreSQL stored the time, then every read of the row failed; the number was an
    internal_error)."""
    f, create, _note = _feature()
    app = app_on([f])
    good = NewItem("tea", 3, 1.5, Decimal("4.20"), datetime.fromisoformat(GOOD["at"]), {}, "fine")
    late = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12)))
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    for at in (late, early):
        refused = app.dispatch(create, attrs.evolve(good, at=at), user=admin)
        assert isinstance(refused, Failure) and refused.code == "validation_error", refused
        problem = {"path": "$.at", "message": "must be between years 1 and 9999 in UTC", "column": "t7_item.at"}
        assert refused.details == [{**problem, "step": STEP}]
    long = app.dispatch(create, attrs.evolve(good, tags={"n": 10**5000}), user=admin)
    too_long = {"path": "$.tags.n", "message": "must have at most 4300 digits (at $.n)", "column": "t7_item.tags"}
    assert isinstance(long, Failure) and long.details == [{**too_long, "step": STEP}]
    assert _counts(app) == (0, 0, 0)
    # The last minute a UTC column holds is fine, and reads back.
    edge = datetime(9999, 12, 31, 22, 59, tzinfo=timezone(timedelta(hours=-1)))
    assert isinstance(app.dispatch(create, attrs.evolve(good, at=edge), user=admin), Ok)
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(T7Item.__table__.c.at)) == edge


@attrs.frozen
class ByText:
    """A payload that names an aggregate by a plain string, as code without a type checker may."""

    ref: str


def test_an_id_given_as_text_means_the_same_on_both_databases(app_on: AppOn, admin: User) -> None:
    """PostgreSQL casts text to its uuid; SQLite's Uuid raised AttributeError on a str, so
    every such call was an internal_error there (and a valid UUID found the row on
    PostgreSQL).  Now text that is a UUID finds the row on both, and other text is the
    same validation_error on both."""
    f, create, _note = _feature()
    rename = f.write_handler(
        "rename",
        f.pipeline(ByText)
        .update("item", T7Item, id=lambda c: c.payload.ref, changes=lambda c: {"note": "moved"}, version=2)
        .return_(lambda c: ok(c.steps["item"].version)),
    )
    read = f.query_handler(
        "read",
        f.query_pipeline(ByText)
        .get_one("item", lambda c: sa.select(T7Item).where(T7Item.id == c.payload.ref))
        .return_(lambda c: ok(c.steps["item"].note)),
    )
    app = app_on([f])
    made = app.dispatch_json(create.name, GOOD, user=admin)
    assert isinstance(made, Ok), made
    assert app.dispatch_json(rename.name, {"ref": str(made.data).upper()}, user=admin) == Ok(3)
    assert app.query_json(read.name, {"ref": str(made.data)}, user=admin) == Ok("moved")
    for text in ("not-a-uuid", ""):
        for result, step in (
            (app.dispatch_json(rename.name, {"ref": text}, user=admin), '0 aggregate.update "item"'),
            (app.query_json(read.name, {"ref": text}, user=admin), '0 read.get_one "item"'),
        ):
            assert isinstance(result, Failure) and result.code == "validation_error", result
            assert result.message.startswith(f"step {step}: a value ")
            assert result.message.endswith(": must be a UUID (t7_item.id, from $.ref)")
            assert isinstance(result.details, list)
            assert (result.details[0]["path"], result.details[0]["column"]) == ("$.ref", "t7_item.id")
    assert _counts(app) == (1, 3, 1)


@attrs.frozen
class Before:
    at: datetime


def test_times_of_any_offset_are_stored_and_compared_as_the_same_instants_on_both_databases(
    app_on: AppOn, admin: User
) -> None:
    """SQLite kept a ``DateTime(timezone=True)`` value's wall-clock digits and dropped its
    offset: 05:00+05:00 was stored as 05:00 (PostgreSQL: 00:00 UTC), came back naive, and
    a ``where at < ...`` compared digits of different offsets."""
    f, create, _note = _feature()
    earlier = f.query_handler(
        "earlier",
        f.query_pipeline(Before)
        .find_many("items", lambda c: sa.select(T7Item).where(T7Item.at < c.payload.at).order_by(T7Item.at))
        .return_(lambda c: ok([item.at for item in c.steps["items"]])),
    )
    app = app_on([f])
    for n, at in enumerate(("2024-01-01T05:00:00+05:00", "2024-01-01T01:00:00+00:00", "2023-12-31T20:30:00-04:00")):
        assert isinstance(app.dispatch_json(create.name, {**GOOD, "sku": f"s{n}", "at": at}, user=admin), Ok)
    found = app.query_json(earlier.name, {"at": "2024-01-01T00:45:00+00:00"}, user=admin)
    assert found == Ok([datetime(2024, 1, 1, 0, 0, tzinfo=UTC), datetime(2024, 1, 1, 0, 30, tzinfo=UTC)])
    assert all(at.utcoffset() == timedelta(0) for at in found.data)  # type: ignore[union-attr]
    # A TIMESTAMP column (which pysqlite maps to a type of its own) is stored the same way.
    stamps = sa.Table("t7_stamps", sa.MetaData(), sa.Column("at", sa.TIMESTAMP(timezone=True)))
    stamps.create(app.engine)
    with app.engine.begin() as conn:
        conn.execute(stamps.insert().values(at=datetime.fromisoformat("2024-01-01T05:00:00+05:00")))
        assert conn.scalar(sa.select(stamps.c.at)) == datetime(2024, 1, 1, tzinfo=UTC)


def test_fraction_digits_past_the_sixth_are_dropped_alike_on_both_databases(app_on: AppOn, admin: User) -> None:
    """.NET writes seven digits: the first six are kept, as ``datetime.fromisoformat`` and
    pydantic keep them; PostgreSQL, reading such text itself, would have rounded to
    ``.123457`` (then the row below would be earlier than the query's time)."""
    f, create, _note = _feature()
    earlier = f.query_handler(
        "earlier",
        f.query_pipeline(Before)
        .find_many("items", lambda c: sa.select(T7Item).where(T7Item.at < c.payload.at))
        .return_(lambda c: ok([item.at for item in c.steps["items"]])),
    )
    app = app_on([f])
    made = app.dispatch_json(create.name, {**GOOD, "at": "2026-12-06T10:00:00.1234567Z"}, user=admin)
    assert isinstance(made, Ok), made
    kept = datetime(2026, 12, 6, 10, 0, 0, 123456, tzinfo=UTC)
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(T7Item.at)) == kept
    assert app.query_json(earlier.name, {"at": "2026-12-06T10:00:00.1234569Z"}, user=admin) == Ok([])
    assert app.query_json(earlier.name, {"at": "2026-12-06T10:00:00.123457Z"}, user=admin) == Ok([kept])
    # Dropped, the last instant of year 9999 stays one (rounded, it would be year 10000).
    late = {**GOOD, "sku": "late", "at": "9999-12-31T23:59:59.9999999Z"}
    assert isinstance(app.dispatch_json(create.name, late, user=admin), Ok)


# --- the fuzz: no internal_error, no partial write ------------------------------------------------

_SPECIAL_TEXT = st.sampled_from(
    ["", "\ud800", "a\x00b", "x" * 11, "ü" * 10, "🍵" * 11, "NaN", "sNaN", "Infinity", "1e999999999", "-0", "0.005"]
)
_TEXT = st.one_of(st.text(st.characters(exclude_categories=()), max_size=14), _SPECIAL_TEXT)
_INTS = st.one_of(
    st.integers(-1000, 1000), st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**70, 10**400])
)
_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
_TIMES = st.one_of(
    st.datetimes(timezones=st.sampled_from([None, UTC])).map(lambda d: d.isoformat()),
    st.sampled_from(["2024-05-06T07:08:09", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-12:00", "yesterday"]),
)
_SCALARS = st.one_of(st.none(), st.booleans(), _INTS, _FLOATS, _TEXT)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=8,
)
_DEEP = st.integers(1, 200).map(lambda n: {"deep": _nested(n)})
_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "sku": st.one_of(_TEXT, _JSON),
    "qty": st.one_of(_INTS, _JSON),
    "weight": st.one_of(_FLOATS, _INTS, _JSON),
    "price": st.one_of(_TEXT, _INTS, _FLOATS, _JSON),
    "at": st.one_of(_TIMES, _JSON),
    "tags": st.one_of(st.dictionaries(_TEXT, _JSON, max_size=4), _DEEP, _JSON),
    "note": st.one_of(_TEXT, _JSON),
}


@st.composite
def _payloads(draw: st.DrawFn) -> Any:
    """Mostly well-formed objects with one or more odd fields; sometimes anything at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(_JSON)
    data = {k: draw(s) if draw(st.integers(0, 3)) == 0 else GOOD[k] for k, s in _FIELDS.items()}
    if draw(st.integers(0, 9)) == 0:
        data[draw(_TEXT)] = draw(_JSON)
    if data["sku"] == GOOD["sku"]:  # a fresh sku, else every call but the first is a unique_violation
        data["sku"] = f"s{draw(st.integers(0, 10**6))}"
    if draw(st.integers(0, 9)) == 0:
        data.pop(draw(st.sampled_from(sorted(_FIELDS))), None)
    return data


@pytest.mark.slow
def test_fuzzed_json_never_gives_an_internal_error_nor_a_partial_write(app_on: AppOn, admin: User) -> None:
    f, create, _note = _feature()
    app = app_on([f])
    internal: list[tuple[object, object]] = []
    seen: dict[str, int] = {}

    @settings(max_examples=2000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(_payloads())
    def dispatch_one(data: Any) -> None:
        before = _counts(app)
        try:
            result = app.dispatch_json(create.name, data, user=admin)
        except Exception as exc:  # worse than an internal_error: counted with them
            seen["raised"] = seen.get("raised", 0) + 1
            internal.append((data, exc))
            return
        after = _counts(app)
        code = "ok" if isinstance(result, Ok) else result.code
        seen[code] = seen.get(code, 0) + 1
        if isinstance(result, Ok):
            assert after == (before[0] + 1, before[1] + 2, before[2] + 1)
            return
        assert after == before, (data, result)  # a failure writes nothing
        if result.code == "internal_error":
            internal.append((data, result))
        elif "the database refused" in result.message:  # the database's word: path "$", per database
            seen["database_refused"] = seen.get("database_refused", 0) + 1
            internal.append((data, result))
        else:
            assert result.http_status < 500, result

    dispatch_one()
    print(f"fuzz on {app.engine.dialect.name}: {sum(seen.values())} examples, {seen}")
    assert sum(seen.values()) >= 2000
    assert internal == [], f"{len(internal)} internal_error(s) or database refusals, e.g. {internal[:3]}"


@attrs.frozen
class Nothing:
    pass


STRUCTURED = NewItem("tea", 3, 1.5, Decimal("4.20"), datetime(2024, 5, 6, tzinfo=UTC), {"a": [1, "b"]}, "fine")


@pytest.mark.parametrize("given", ["abc", str(uuid.UUID(int=7)), 12, b"\x00" * 16])
def test_a_correlation_id_that_is_not_a_uuid_is_refused_before_anything_runs(
    app_on: AppOn, admin: User, given: Any
) -> None:
    """Before: the first event row could not bind it, an ``internal_error`` after the work ran."""
    f, create, _note = _feature()
    count = f.query_handler("count", f.query_pipeline(Nothing).return_(lambda c: ok(1)))
    app = app_on([f])
    expected = f"correlation_id must be a uuid.UUID or None, not {type(given).__name__}"
    results = [
        app.dispatch_json(create.name, GOOD, user=admin, correlation_id=given),
        app.dispatch(create, STRUCTURED, user=admin, correlation_id=given),
        app.query_json(count.name, {}, user=admin, correlation_id=given),
        app.query(count, Nothing(), user=admin, correlation_id=given),
    ]
    for result in results:
        assert isinstance(result, Failure) and result.code == "validation_error", result
        assert result.message.startswith(expected), result
        assert result.details == [{"path": "correlation_id", "message": result.message}]
    assert _counts(app) == (0, 0, 0)
    assert isinstance(app.dispatch(create, STRUCTURED, user=admin, correlation_id=uuid.UUID(int=7)), Ok)
    assert _counts(app) == (1, 2, 1)
