"""``wait_for_event`` keys match as Python's ``==`` says, on SQLite and PostgreSQL alike:
keys are compared by their stored text, which is now the key's canonical encoding
(``Codec.encode(..., canonical=True)``).  Before, keys equal in Python but encoded apart
(``1`` and ``1.0``, one instant in two time zones, a set and a frozenset) never matched,
and the run waited silently until its timeout.  Keys unequal in Python still never match,
and a wait stored in an earlier release's form is still woken."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed._steps.workflow import bounded_key
from kumiko_typed._tables import workflow_waits
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
AppOn = Callable[..., App]
LONG = "k" * 1_200  # a key past 1,000 characters of JSON: stored as its digest
PLUS5 = timezone(timedelta(hours=5))

#: The keys the tests name: a run's payload and an event carry a name, ``key=`` and
#: ``event_key=`` look the value up (so no value is changed by an event's own storage).
VALUES: dict[str, object] = {
    "noon+05": datetime(2026, 1, 1, 12, tzinfo=PLUS5),
    "7utc": datetime(2026, 1, 1, 7, tzinfo=UTC),
    "7naive": datetime(2026, 1, 1, 7),
    "t12+05": time(12, tzinfo=PLUS5),
    "t7utc": time(7, tzinfo=UTC),
    "t7naive": time(7),
    "day": date(2026, 1, 1),
    "midnight": datetime(2026, 1, 1),
    "dec1.0": Decimal("1.0"),
    "dec1": Decimal("1"),
    "int1": 1,
    "float1": 1.0,
    "true": True,
    "str1": "1",
    "float0.1": 0.1,
    "dec0.1": Decimal("0.1"),
    "float0.5": 0.5,
    "dec0.50": Decimal("0.50"),
    "frozen": frozenset({1, 2}),
    "set": {2, 1},
    "uuid": uuid.UUID(int=7),
    "uuid-text": str(uuid.UUID(int=7)),
    "tuple": (1, 2),
    "list": [1, 2],
    "nested-a": (Decimal("2.50"), [True, {"at": datetime(2026, 1, 1, 12, tzinfo=PLUS5)}], {frozenset({1.0})}),
    "nested-b": (2.5, [1, {"at": datetime(2026, 1, 1, 7, tzinfo=UTC)}], {frozenset({Decimal("1")})}),
    "dict-a": {1.0: "x", "n": Decimal("3.0")},
    "dict-b": {True: "x", "n": 3},
    "long-a": (LONG, 1.0, frozenset({"a"})),
    "long-b": (LONG, Decimal("1.000"), {"a"}),
}

EQUAL = [
    ("noon+05", "7utc"),
    ("t12+05", "t7utc"),
    ("dec1.0", "dec1"),
    ("int1", "float1"),
    ("true", "int1"),
    ("true", "dec1.0"),
    ("float0.5", "dec0.50"),
    ("frozen", "set"),
    ("nested-a", "nested-b"),
    ("dict-a", "dict-b"),
    ("long-a", "long-b"),
]
UNEQUAL = [
    ("int1", "str1"),
    ("7naive", "7utc"),
    ("t7naive", "t7utc"),
    ("float0.1", "dec0.1"),
    ("uuid", "uuid-text"),
    ("day", "midnight"),
    ("tuple", "list"),
]


@attrs.frozen
class Expect:
    which: str


@attrs.frozen
class Said:
    which: str


class WkeLetter(Entity):
    __tablename__ = "wke_letter"
    which: Mapped[str]


f = Feature("wke")
f.entity(WkeLetter)
f.event(Said)
say = f.write_handler(
    "say",
    f.pipeline(Said)
    .create("letter", WkeLetter, data=lambda c: WkeLetter(which=c.payload.which))
    .append_event(WkeLetter, id=lambda c: c.steps["letter"].id, event=lambda c: c.payload)
    .return_(lambda c: ok(None)),
)
expect = f.workflow(
    "expect",
    trigger=manual(Expect),
    pipeline=f.workflow_pipeline(Expect).wait_for_event(
        "got", Said, key=lambda c: VALUES[c.payload.which], event_key=lambda e: VALUES[e.which], timeout="PT1H"
    ),
)


def _status(app: App, run_id: uuid.UUID) -> tuple[str, Any]:
    info = app.get_run(run_id)
    assert info is not None
    return info.status, info.steps.get("got")


def _said(app: App, which: str, user: User) -> None:
    assert app.dispatch(say, Said(which), user=user) == Ok(None)
    app.run_worker(once=True)


@pytest.mark.parametrize(("a", "b"), EQUAL, ids=[f"{a}={b}" for a, b in EQUAL])
def test_a_key_equal_in_python_wakes_the_run_whichever_form_waits(app_on: AppOn, user: User, a: str, b: str) -> None:
    assert VALUES[a] == VALUES[b]
    app = app_on([f], clock=FakeClock(T0))
    for waits, said in ((a, b), (b, a)):
        run_id = app.start_workflow(expect, Expect(waits), user=user)
        _said(app, said, user)
        assert _status(app, run_id) == ("completed", Said(said))


@pytest.mark.parametrize(("a", "b"), UNEQUAL, ids=[f"{a}!={b}" for a, b in UNEQUAL])
def test_a_key_unequal_in_python_never_wakes_the_run(app_on: AppOn, user: User, a: str, b: str) -> None:
    """Each run is woken by its own key only (a guard against a form that joins too much)."""
    assert VALUES[a] != VALUES[b]
    app = app_on([f], clock=FakeClock(T0))
    on_a = app.start_workflow(expect, Expect(a), user=user)
    on_b = app.start_workflow(expect, Expect(b), user=user)
    _said(app, b, user)
    assert _status(app, on_a) == ("suspended", None)
    assert _status(app, on_b) == ("completed", Said(b))
    _said(app, a, user)
    assert _status(app, on_a) == ("completed", Said(a))


def _earlier_text(app: App, value: object) -> str:
    """The key text the previous release stored: the key's JSON, unsorted numbers, zones
    and set tags as they came (its ``key_text``), past 1,000 characters its digest."""
    encoded = app._workflow_engine.codec.encode(value, ordered=False)
    return bounded_key(json.dumps(encoded, sort_keys=True))


@pytest.mark.parametrize(
    ("which", "canonical"),
    [
        ("float1", "1"),
        ("noon+05", '{"$t": "datetime", "v": "2026-01-01T07:00:00+00:00"}'),
        ("dec1.0", "1"),
        ("true", "1"),
        ("frozen", '{"$t": "set", "v": [1, 2]}'),
        ("dict-a", '{"$t": "map", "v": [["n", 3], [1, "x"]]}'),  # pairs sorted by their key's JSON
        ("long-a", None),
    ],
    ids=lambda v: v if v in VALUES else "form",
)
def test_a_wait_stored_in_the_previous_releases_form_is_still_woken(
    app_on: AppOn, user: User, which: str, canonical: str | None
) -> None:
    """A new wait stores the canonical text; one the previous release stored (its text
    put in the row, as it would have written it) is woken by an event of that key."""
    app = app_on([f], clock=FakeClock(T0))
    run_id = app.start_workflow(expect, Expect(which), user=user)
    earlier = _earlier_text(app, VALUES[which])
    with app.engine.begin() as conn:
        stored = conn.execute(sa.select(workflow_waits.c.key)).scalar_one()
        if canonical is not None:
            assert stored == canonical
        assert stored != earlier
        conn.execute(sa.update(workflow_waits).values(key=earlier))
    _said(app, which, user)
    assert _status(app, run_id) == ("completed", Said(which))


def test_an_equal_key_of_another_tenant_never_wakes_the_run(app_on: AppOn, make_user: Callable[[], User]) -> None:
    ada, bob = make_user(), make_user()
    app = app_on([f], clock=FakeClock(T0))
    adas = app.start_workflow(expect, Expect("noon+05"), user=ada)
    bobs = app.start_workflow(expect, Expect("noon+05"), user=bob)
    _said(app, "7utc", bob)
    assert _status(app, bobs) == ("completed", Said("7utc"))
    assert _status(app, adas) == ("suspended", None)
