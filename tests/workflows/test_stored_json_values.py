"""A value kept by the framework in a JSON column reads back as written, on both
databases: a run's payload and step values across a suspension, and a result an
idempotency key replays.

PostgreSQL keeps those columns as ``jsonb``, which holds a number as a ``numeric`` and
writes it out without an exponent and without the sign of a zero, and keeps an object's
keys sorted: ``1e20`` came back as the int ``100000000000000000000``, ``-0.0`` as ``0.0``,
a dict in jsonb's key order (SQLite gave what was written). A payload's ``float`` field
then held an int after a resume on PostgreSQL only."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import ok_data

from kumiko_typed import App, Feature, Ok, User, manual, ok
from kumiko_typed._tables import workflow_runs

FLOATS = [1e20, -1e16, 1e300, -0.0, 0.0, 1.0, 2.5, 5e-324, 9007199254740993.0, 123456789012345.0]


@attrs.frozen
class Go:
    x: float


def _same(read: Any, written: float) -> bool:
    return type(read) is float and read == written and math.copysign(1.0, read) == math.copysign(1.0, written)


flows: Feature[Any] = Feature("sflt")
later = flows.workflow(
    "later",
    trigger=manual(Go),
    pipeline=flows.workflow_pipeline(Go)
    .compute("value", lambda c: c.payload.x)
    .compute("values", lambda c: [c.payload.x, {"in": c.payload.x}])
    .wait("PT0S")
    .return_(lambda c: ok({"payload": c.payload.x, "step": c.steps["value"], "listed": c.steps["values"]})),
)
echo = flows.write_handler("echo", flows.pipeline(Go).return_(lambda c: ok([c.payload.x, {"in": c.payload.x}])))


@pytest.mark.parametrize("written", FLOATS, ids=repr)
def test_a_runs_floats_survive_its_suspension(app_on: Callable[..., App], user: User, written: float) -> None:
    app = app_on([flows])
    run_id = app.start_workflow(later, Go(written), user=user)
    assert app.run_worker(once=True)["resumed"] == 1
    seen = ok_data(app.result(later, run_id, user=user))
    assert _same(seen["payload"], written) and _same(seen["step"], written)
    assert _same(seen["listed"][0], written) and _same(seen["listed"][1]["in"], written)


@pytest.mark.parametrize("written", FLOATS, ids=repr)
def test_a_replayed_result_holds_the_floats_written(app_on: Callable[..., App], user: User, written: float) -> None:
    app = app_on([flows])
    first = ok_data(app.dispatch(echo, Go(written), user=user, idempotency_key="k"))
    again = ok_data(app.dispatch(echo, Go(written), user=user, idempotency_key="k"))
    assert again == first
    assert _same(again[0], written) and _same(again[1]["in"], written)


@attrs.frozen
class Ask:
    n: int


#: jsonb keeps an object's keys sorted (shorter first): read from PostgreSQL, a dict came
#: back in that order, from SQLite in the order written.
ORDERED = {"zeta": 1, "b": {"yy": 2, "x": 3}, "alpha": [{"d": 4, "c": 5}], "a": 6}
ordered = flows.workflow(
    "ordered",
    trigger=manual(Ask),
    pipeline=flows.workflow_pipeline(Ask)
    .compute("later_first", lambda c: c.payload.n)
    .compute("doc", lambda c: ORDERED)
    .compute("early", lambda c: c.payload.n)
    .wait("PT0S")
    .return_(lambda c: ok({"doc": c.steps["doc"], "steps": list(c.steps)})),
)
ordered_echo = flows.write_handler("ordered_echo", flows.pipeline(Ask).return_(lambda c: ok(ORDERED)))


def test_dicts_keep_their_order_across_a_suspension(app_on: Callable[..., App], user: User) -> None:
    app = app_on([flows])
    run_id = app.start_workflow(ordered, Ask(1), user=user)
    assert app.run_worker(once=True)["resumed"] == 1
    seen = ok_data(app.result(ordered, run_id, user=user))
    assert json.dumps(seen["doc"]) == json.dumps(ORDERED)
    assert seen["steps"] == ["later_first", "doc", "early"]


def test_a_replayed_dict_keeps_its_order(app_on: Callable[..., App], user: User) -> None:
    app = app_on([flows])
    ok_data(app.dispatch(ordered_echo, Ask(1), user=user, idempotency_key="k"))
    again = ok_data(app.dispatch(ordered_echo, Ask(1), user=user, idempotency_key="k"))
    assert json.dumps(again) == json.dumps(ORDERED)


@attrs.frozen
class Tally:
    counts: dict[str, int]


tally = flows.write_handler("tally", flows.pipeline(Tally).return_(lambda c: ok(list(c.payload.counts))))


def test_a_repeat_with_the_same_dict_in_another_order_is_the_same_payload(
    app_on: Callable[..., App], user: User
) -> None:
    """The stored order is for reading back; equal dicts are one payload to a key."""
    app = app_on([flows])
    first = ok_data(app.dispatch(tally, Tally({"a": 1, "b": 2}), user=user, idempotency_key="k"))
    again = ok_data(app.dispatch(tally, Tally({"b": 2, "a": 1}), user=user, idempotency_key="k"))
    assert first == again == ["a", "b"]


@attrs.frozen
class Span:
    n: int


#: A run's durations, read back exactly: a float of seconds lost microseconds past some
#: 300 years, and timedelta.max's rounded up past it (an OverflowError out of every pass).
SPANS = [
    timedelta.max,
    timedelta.max - timedelta(microseconds=1),  # its float seconds overflow as timedelta.max's do
    timedelta.min,
    timedelta(days=10**8, microseconds=1),
    timedelta(days=-(10**8), microseconds=999999),
    timedelta(seconds=1.5),
]
spans = flows.workflow(
    "spans",
    trigger=manual(Span),
    pipeline=flows.workflow_pipeline(Span)
    .compute("span", lambda c: SPANS[c.payload.n])
    .wait("PT0S")
    .return_(lambda c: ok(c.steps["span"])),
)
decimals = flows.workflow(
    "decimals",
    trigger=manual(Span),
    pipeline=flows.workflow_pipeline(Span)
    .compute("amount", lambda c: Decimal(c.payload.n))
    .wait("PT0S")
    .return_(lambda c: ok(c.steps["amount"])),
)


def _edit_step(app: App, run_id: uuid.UUID, key: str, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite a stored step value's JSON as an earlier release (or a hand) left it."""
    with app.engine.begin() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
        values = state["values"]["v"]
        values[key] = edit(values[key])
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(state=state))


@pytest.mark.parametrize("n", range(len(SPANS)), ids=[repr(s) for s in SPANS])
def test_a_runs_durations_survive_its_suspension_exactly(app_on: Callable[..., App], user: User, n: int) -> None:
    app = app_on([flows])
    run_id = app.start_workflow(spans, Span(n), user=user)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(spans, run_id, user=user) == Ok(SPANS[n])


def test_timedelta_max_an_earlier_release_stored_reads_as_timedelta_max(app_on: Callable[..., App], user: User) -> None:
    """It stored the float seconds alone, which round up past timedelta.max."""
    app = app_on([flows])
    run_id = app.start_workflow(spans, Span(0), user=user)
    _edit_step(app, run_id, "span", lambda stored: {key: part for key, part in stored.items() if key != "x"})
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(spans, run_id, user=user) == Ok(timedelta.max)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda stored: {**stored, "v": "abc"}, "the stored state cannot be read: a stored decimal is no number"),
        (lambda stored: {"$t": "timedelta", "v": 1e300}, "beyond what a timedelta holds"),
        (lambda stored: {"$t": "timedelta", "v": 1.0, "x": [10**10, 0, 0]}, "beyond what a timedelta holds"),
        # A mutation run found these untested: two parts (an IndexError) and a bool part.
        (lambda stored: {"$t": "timedelta", "v": 1.0, "x": [1, 0]}, "parts are not three integers"),
        (lambda stored: {"$t": "timedelta", "v": 1.0, "x": [True, 0, 0]}, "parts are not three integers"),
    ],
    ids=["decimal", "seconds", "parts", "two-parts", "bool-part"],
)
def test_a_damaged_number_fails_its_run_and_the_pass_goes_on(
    app_on: Callable[..., App], user: User, damage: Callable[[dict[str, Any]], dict[str, Any]], why: str
) -> None:
    """Before, the decoder's InvalidOperation or OverflowError (no ValueError) went out
    of the worker's pass, and out of every later one: no due run behind it resumed."""
    app = app_on([flows])
    damaged = app.start_workflow(decimals, Span(7), user=user)
    fine = app.start_workflow(decimals, Span(8), user=user)
    _edit_step(app, damaged, "amount", damage)
    app.run_worker(once=True)
    info = app.get_run(damaged)
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "unstorable_state" and why in info.error["message"], info.error
    assert app.result(decimals, fine, user=user) == Ok(Decimal(8))
