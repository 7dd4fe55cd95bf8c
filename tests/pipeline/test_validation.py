"""dispatch_json: untrusted input is structured strictly, every problem becomes one
``{"path", "message"}`` detail of a ``validation_error`` — never an exception (DESIGN §3.1)."""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kumiko_typed import App, Failure, Feature, Ok, User, ok
from kumiko_typed._results import HTTP_STATUS
from kumiko_typed._structuring import MAX_DETAILS, make_converter, structure


@attrs.frozen
class Address:
    street: str
    zip: int


@attrs.frozen
class Line:
    sku: str
    qty: int


@attrs.frozen
class Order:
    customer: str
    count: int
    price: float
    paid: bool
    address: Address
    lines: list[Line]
    tags: tuple[str, ...] = ()
    note: str | None = None


@attrs.frozen
class Typed:
    id: uuid.UUID
    at: datetime
    amount: Decimal
    day: date | None = None


MakeApp = Callable[..., App]

GOOD_ORDER: dict[str, Any] = {
    "customer": "ada",
    "count": 2,
    "price": 9.5,
    "paid": False,
    "address": {"street": "Main St", "zip": 12345},
    "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}],
}

ORDER_FIELDS = [a.name for a in attrs.fields(Order)]


def _with(**changes: Any) -> dict[str, Any]:
    return {**GOOD_ORDER, **changes}


def _without(*keys: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD_ORDER.items() if k not in keys}


def _build(make_app: MakeApp) -> tuple[App, list[object]]:
    ran: list[object] = []
    f = Feature("shop")
    f.write_handler(
        "order",
        f.pipeline(Order).compute("ran", lambda c: ran.append(c.payload)).return_(lambda c: ok(c.payload)),
    )
    f.write_handler("typed", f.pipeline(Typed).return_(lambda c: ok(c.payload)))
    return make_app([f]), ran


@pytest.fixture
def app_and_ran(make_app: MakeApp) -> tuple[App, list[object]]:
    return _build(make_app)


def _details(result: object) -> list[dict[str, str]]:
    assert isinstance(result, Failure), result
    assert result.code == "validation_error"
    assert result.http_status == 400
    assert isinstance(result.details, list)
    for d in result.details:
        assert set(d) == {"path", "message"}
        assert isinstance(d["message"], str)
        assert d["message"]
    return list(result.details)  # type: ignore[arg-type]


def test_a_valid_payload_is_structured(app_and_ran: tuple[App, list[object]], user: User) -> None:
    app, ran = app_and_ran
    res = app.dispatch_json("shop:order", _with(tags=["x", "y"], note=None), user=user)
    expected = Order("ada", 2, 9.5, False, Address("Main St", 12345), [Line("a", 1), Line("b", 2)], ("x", "y"), None)
    assert res == Ok(expected)
    assert ran == [expected]
    # An integer is a fine JSON number for a float field.
    res = app.dispatch_json("shop:order", _with(price=10), user=user)
    assert isinstance(res, Ok)
    assert res.data.price == 10.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_with(customer=5), [("$.customer", "expected a string, got number")]),
        (_with(customer=True), [("$.customer", "expected a string, got boolean")]),
        (_with(customer=None), [("$.customer", "expected a string, got null")]),
        (_with(customer=["ada"]), [("$.customer", "expected a string, got array")]),
        (_with(count="2"), [("$.count", "expected an integer, got string")]),
        (_with(count=True), [("$.count", "expected an integer, got boolean")]),
        (_with(count=False), [("$.count", "expected an integer, got boolean")]),
        (_with(count=2.0), [("$.count", "expected an integer, got number")]),
        (_with(count=2.5), [("$.count", "expected an integer, got number")]),
        (_with(price="9.5"), [("$.price", "expected a number, got string")]),
        (_with(price=True), [("$.price", "expected a number, got boolean")]),
        (_with(paid=1), [("$.paid", "expected true or false, got number")]),
        (_with(paid="true"), [("$.paid", "expected true or false, got string")]),
        (_with(note=3), [("$.note", "expected a string, got number")]),
    ],
    ids=lambda v: repr(v)[:60] if isinstance(v, dict) else None,
)
def test_json_types_are_not_coerced(
    app_and_ran: tuple[App, list[object]], user: User, data: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    app, ran = app_and_ran
    details = _details(app.dispatch_json("shop:order", data, user=user))
    assert [(d["path"], d["message"]) for d in details] == expected
    assert ran == []


def test_every_bad_field_gets_its_own_detail(app_and_ran: tuple[App, list[object]], user: User) -> None:
    app, ran = app_and_ran
    data = _with(customer=1, count="x", paid=None, price=[1])
    details = _details(app.dispatch_json("shop:order", data, user=user))
    assert sorted(d["path"] for d in details) == ["$.count", "$.customer", "$.paid", "$.price"]
    assert ran == []


def test_missing_fields_are_listed_one_by_one(app_and_ran: tuple[App, list[object]], user: User) -> None:
    app, _ = app_and_ran
    details = _details(app.dispatch_json("shop:order", _without("customer", "lines"), user=user))
    assert details == [
        {"path": "$.customer", "message": "required field is missing"},
        {"path": "$.lines", "message": "required field is missing"},
    ]
    # Fields with defaults may be left out.
    assert isinstance(app.dispatch_json("shop:order", _without("tags", "note"), user=user), Ok)
    # An empty object: every required field is missing.
    details = _details(app.dispatch_json("shop:order", {}, user=user))
    assert [d["path"] for d in details] == ["$.customer", "$.count", "$.price", "$.paid", "$.address", "$.lines"]
    assert {d["message"] for d in details} == {"required field is missing"}


def test_extra_keys_are_rejected(app_and_ran: tuple[App, list[object]], user: User) -> None:
    app, ran = app_and_ran
    details = _details(app.dispatch_json("shop:order", _with(zzz=1, admin=True), user=user))
    assert details == [
        {"path": "$.admin", "message": "unknown field"},
        {"path": "$.zzz", "message": "unknown field"},
    ]
    # Extra keys and a bad field are reported together.
    details = _details(app.dispatch_json("shop:order", _with(count="1", zzz=1), user=user))
    assert sorted((d["path"], d["message"]) for d in details) == [
        ("$.count", "expected an integer, got string"),
        ("$.zzz", "unknown field"),
    ]
    assert ran == []


def test_a_payload_with_very_many_problems_lists_a_hundred_and_counts_the_rest(
    app_and_ran: tuple[App, list[object]], user: User
) -> None:
    """Before: every problem was listed, so a body of a megabyte naming 150,000 wrong items
    was answered with ten megabytes of details."""
    app, ran = app_and_ran
    assert MAX_DETAILS == 100
    details = _details(app.dispatch_json("shop:order", _with(lines=[{"sku": 1, "qty": 1}] * 250), user=user))
    assert details[:2] == [
        {"path": "$.lines[0].sku", "message": "expected a string, got number"},
        {"path": "$.lines[1].sku", "message": "expected a string, got number"},
    ]
    assert len(details) == MAX_DETAILS + 1
    assert details[-1] == {"path": "$", "message": "and 150 more, not listed"}
    unknown = _details(app.dispatch_json("shop:order", _with(**{f"k{i:03}": 1 for i in range(300)}), user=user))
    assert unknown[0] == {"path": "$.k000", "message": "unknown field"}
    assert unknown[-1] == {"path": "$", "message": "and 200 more, not listed"}
    unsafe = _details(app.dispatch_json("shop:order", _with(tags=["\x00"] * 101), user=user))
    assert unsafe[-1] == {"path": "$", "message": "and 1 more, not listed"}
    # Exactly a hundred are all listed.
    assert len(_details(app.dispatch_json("shop:order", _with(lines=[{"sku": 1, "qty": 1}] * 100), user=user))) == 100
    assert ran == []


def test_refusing_very_many_wrong_items_keeps_a_hundred_of_them(
    app_and_ran: tuple[App, list[object]], user: User
) -> None:
    """Before: cattrs kept an exception (with its traceback and notes) for every wrong item,
    100,000 wrong tags held 217 MB at once, and the garbage collector walked them again
    and again: 200,000 took 10.7 s of CPU to refuse, 0.4 s to read when right.  Now the
    first hundred of a list, tuple or set are kept and the rest counted (0.2 MB; 0.55 s)."""
    app, ran = app_and_ran
    body = _with(tags=[1] * 100_000, lines=[{"sku": 1, "qty": "x"}] * 250)
    tracemalloc.start()
    try:
        details = _details(app.dispatch_json("shop:order", body, user=user))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert details[:2] == [
        {"path": "$.lines[0].sku", "message": "expected a string, got number"},
        {"path": "$.lines[0].qty", "message": "expected an integer, got string"},
    ]
    assert details[-1] == {"path": "$", "message": f"and {500 + 100_000 - 100} more, not listed"}
    assert peak < 20_000_000, peak
    assert ran == []


@pytest.mark.parametrize(
    ("kind", "wrong", "expected"),
    [
        (list[list[int]], [["x"] * 150] * 3, 450),
        (tuple[int, ...], ["x"] * 101, 101),
        (frozenset[int], [f"x{i}" for i in range(130)], 130),
        (set[str], [1, 2, 3], 3),
        (list[dict[str, int]], [{"a": "x", "b": "y"}] * 120, 240),
    ],
)
def test_every_wrong_item_is_counted_when_a_hundred_are_listed(kind: Any, wrong: list[Any], expected: int) -> None:
    """The count past the hundred listed is the number of wrong values, nested or not, as
    when every one was kept."""

    @attrs.frozen
    class Holder:
        values: Any

    converter = make_converter()
    converter.register_structure_hook(Holder, lambda value, _: Holder(converter.structure(value["values"], kind)))
    found = structure(converter, {"values": wrong}, Holder)
    assert isinstance(found, list)
    listed = min(expected, MAX_DETAILS)
    assert len(found) == listed + (expected > MAX_DETAILS)
    if expected > MAX_DETAILS:
        assert found[-1] == {"path": "$", "message": f"and {expected - MAX_DETAILS} more, not listed"}
    assert found[0]["path"].startswith("$")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object, got array"),
        ([GOOD_ORDER], "expected a JSON object, got array"),
        ("order", "expected a JSON object, got string"),
        (None, "expected a JSON object, got null"),
        (7, "expected a JSON object, got number"),
        (7.5, "expected a JSON object, got number"),
        (True, "expected a JSON object, got boolean"),
    ],
    ids=repr,
)
def test_a_non_object_top_level_is_one_detail_at_the_root(
    app_and_ran: tuple[App, list[object]], user: User, data: object, message: str
) -> None:
    app, ran = app_and_ran
    assert _details(app.dispatch_json("shop:order", data, user=user)) == [{"path": "$", "message": message}]
    assert ran == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_with(address={"street": "s", "zip": "123"}), [("$.address.zip", "expected an integer, got string")]),
        (_with(address={"street": "s"}), [("$.address.zip", "required field is missing")]),
        (_with(address={"street": "s", "zip": 1, "city": "x"}), [("$.address.city", "unknown field")]),
        (_with(address=None), [("$.address", "expected a JSON object, got null")]),
        (_with(address="Main St"), [("$.address", "expected a JSON object, got string")]),
        (_with(address=[1]), [("$.address", "expected a JSON object, got array")]),
        (
            _with(lines=[{"sku": "a", "qty": 1}, {"sku": "b", "qty": "2"}]),
            [("$.lines[1].qty", "expected an integer, got string")],
        ),
        (
            _with(lines=[{"sku": 1, "qty": 1}, {"sku": "b"}, {"sku": "c", "qty": 3, "x": 0}]),
            [
                ("$.lines[0].sku", "expected a string, got number"),
                ("$.lines[1].qty", "required field is missing"),
                ("$.lines[2].x", "unknown field"),
            ],
        ),
        (
            _with(lines=[None, "a"]),
            [("$.lines[0]", "expected a JSON object, got null"), ("$.lines[1]", "expected a JSON object, got string")],
        ),
        # A string or an object is not silently iterated into a list.
        (_with(lines="ab"), [("$.lines", "expected an array, got string")]),
        (_with(lines={"sku": "a", "qty": 1}), [("$.lines", "expected an array, got object")]),
        (_with(lines=None), [("$.lines", "expected an array, got null")]),
        (_with(lines=3), [("$.lines", "expected an array, got number")]),
        (_with(tags="abc"), [("$.tags", "expected an array, got string")]),
        (_with(tags=["a", 2]), [("$.tags[1]", "expected a string, got number")]),
    ],
    ids=lambda v: None,
)
def test_nested_paths_name_the_bad_field(
    app_and_ran: tuple[App, list[object]], user: User, data: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    app, ran = app_and_ran
    details = _details(app.dispatch_json("shop:order", data, user=user))
    assert [(d["path"], d["message"]) for d in details] == expected
    assert ran == []


def test_iso_strings_are_accepted_for_uuid_datetime_decimal_date(
    app_and_ran: tuple[App, list[object]], user: User
) -> None:
    app, _ = app_and_ran
    ident = uuid.uuid4()
    res = app.dispatch_json(
        "shop:typed",
        {"id": str(ident), "at": "2024-05-06T07:08:09+00:00", "amount": "12.50", "day": "2024-02-29"},
        user=user,
    )
    assert res == Ok(Typed(ident, datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC), Decimal("12.50"), date(2024, 2, 29)))
    assert isinstance(res, Ok)
    assert str(res.data.amount) == "12.50"  # the decimal keeps its digits
    # A JSON number is also a fine decimal.
    res = app.dispatch_json("shop:typed", {"id": str(ident), "at": "2024-05-06T07:08:09Z", "amount": 3}, user=user)
    assert isinstance(res, Ok)
    assert res.data.amount == Decimal(3)


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"id": "not-a-uuid"}, "$.id", "expected a UUID string, got 'not-a-uuid'"),
        ({"id": 5}, "$.id", "expected a UUID string, got number"),
        ({"at": "yesterday"}, "$.at", "expected an ISO-8601 datetime string, got 'yesterday'"),
        ({"at": 1714979289}, "$.at", "expected an ISO-8601 datetime string, got number"),
        ({"amount": "12,50"}, "$.amount", "expected a decimal string, got '12,50'"),
        ({"amount": True}, "$.amount", "expected a decimal string, got boolean"),
        ({"amount": None}, "$.amount", "expected a decimal string, got null"),
        ({"day": "2024-02-30"}, "$.day", "expected an ISO-8601 date string, got '2024-02-30'"),
    ],
)
def test_bad_iso_strings_are_validation_errors(
    app_and_ran: tuple[App, list[object]], user: User, changes: dict[str, Any], path: str, message: str
) -> None:
    app, _ = app_and_ran
    data = {"id": str(uuid.uuid4()), "at": "2024-05-06T07:08:09+00:00", "amount": "1", **changes}
    assert _details(app.dispatch_json("shop:typed", data, user=user)) == [{"path": path, "message": message}]


# --- property: never an exception ---------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
# Objects that use the payload's own keys reach the nested hooks more often than random keys.
near_orders = st.dictionaries(
    st.sampled_from([*ORDER_FIELDS, "street", "zip", "sku", "qty", "extra"]),
    json_values,
    max_size=len(ORDER_FIELDS) + 1,
)
near_lines = st.lists(
    st.dictionaries(st.sampled_from(["sku", "qty", "x"]), json_scalars, max_size=3) | json_values, max_size=3
)
KNOWN_CODES = set(HTTP_STATUS)


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    path: Path = tmp_path_factory.mktemp("prop") / "prop.sqlite3"
    f = Feature("shop")
    f.write_handler("order", f.pipeline(Order).return_(lambda c: ok(c.payload)))
    f.write_handler("typed", f.pipeline(Typed).return_(lambda c: ok(c.payload)))
    app = App([f], database_url=f"sqlite:///{path}")
    app.create_all()
    yield app
    app.dispose()


def _check_result(res: object, payload_type: type) -> None:
    assert isinstance(res, (Ok, Failure))
    if isinstance(res, Ok):
        assert isinstance(res.data, payload_type)
        return
    assert res.code in KNOWN_CODES
    assert res.code == "validation_error", res
    assert isinstance(res.details, list)
    assert res.details
    for d in res.details:
        assert set(d) == {"path", "message"}
        assert isinstance(d["path"], str)
        assert d["path"].startswith("$")


@settings(max_examples=300, deadline=None)
@given(
    data=json_values | near_orders | st.builds(lambda lines, rest: {**rest, "lines": lines}, near_lines, near_orders)
)
def test_arbitrary_json_never_raises(shared_app: App, data: object) -> None:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    _check_result(shared_app.dispatch_json("shop:order", data, user=user), Order)
    _check_result(shared_app.dispatch_json("shop:typed", data, user=user), Typed)


@settings(max_examples=100, deadline=None)
@given(field=st.sampled_from(ORDER_FIELDS), value=json_values)
def test_arbitrary_value_in_one_field_is_ok_or_names_that_field(shared_app: App, field: str, value: object) -> None:
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    res = shared_app.dispatch_json("shop:order", _with(**{field: value}), user=user)
    _check_result(res, Order)
    if isinstance(res, Failure):
        assert isinstance(res.details, list)
        for d in res.details:
            assert d["path"] == f"$.{field}" or d["path"].startswith((f"$.{field}.", f"$.{field}["))


def test_a_payload_validator_raising_anything_is_a_validation_error() -> None:
    import uuid

    import attrs

    from kumiko_typed import App, Feature, User, ok

    def odd(_inst: object, _attr: object, value: int) -> None:
        if value % 2 == 0:
            raise RuntimeError("must be odd")

    @attrs.frozen
    class P:
        n: int = attrs.field(validator=odd)

    f = Feature("f")
    f.write_handler("h", f.pipeline(P).return_(lambda c: ok(c.payload.n)))
    app = App([f], database_url="sqlite://")
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    res = app.dispatch_json("f:h", {"n": 2}, user=user)
    assert res.code == "validation_error"  # type: ignore[union-attr]
    # the field whose validator raised is the path, the exception's own words the message
    assert res.details == [{"path": "$.n", "message": "must be odd"}]  # type: ignore[union-attr]
    assert app.dispatch_json("f:h", {"n": 3}, user=user) == ok(3)
