"""Hostile values in workflow state and ``wait_for_event`` keys give the same answer on
SQLite and PostgreSQL (DESIGN §6, §8): keys empty, unicode or far longer than an index
row; strings PostgreSQL refuses (a NUL, a lone surrogate) in a payload or a step's value."""

from __future__ import annotations

import json
import random
import re
import string
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed._errors import StateError
from kumiko_typed._tables import workflow_waits
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
AppOn = Callable[..., App]


@attrs.frozen
class Expect:
    key: str


@attrs.frozen
class Sent:
    key: str


class WfhLetter(Entity):
    __tablename__ = "wfh_letter"
    key: Mapped[str]


f = Feature("wfh")
f.entity(WfhLetter)
f.event(Sent)
send = f.write_handler(
    "send",
    f.pipeline(Sent)
    .create("letter", WfhLetter, data=lambda c: WfhLetter(key=c.payload.key))
    .append_event(WfhLetter, id=lambda c: c.steps["letter"].id, event=lambda c: c.payload)
    .return_(lambda c: ok(None)),
)
expect = f.workflow(
    "expect",
    trigger=manual(Expect),
    pipeline=f.workflow_pipeline(Expect).wait_for_event(
        "got", Sent, key=lambda c: c.payload.key, event_key=lambda e: e.key, timeout="PT1H"
    ),
)
keep = f.workflow(
    "keep",
    trigger=manual(Expect),
    pipeline=f.workflow_pipeline(Expect)
    .compute("kept", lambda c: {"note": c.payload.key.encode().decode("unicode_escape")})
    .wait("PT1M"),
)


def _refuse(c: Any) -> int:
    raise ValueError(f"refused\x00{c.payload.key}")  # an exception quoting input with a NUL


flaky = f.workflow(
    "flaky",
    trigger=manual(Expect),
    pipeline=f.workflow_pipeline(Expect).retry(times=2, do=lambda b: b.compute("n", _refuse), name="r"),
)

LONG = "".join(random.Random(5).choices(string.ascii_letters, k=10_000))  # compresses poorly


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def _status(app: App, run_id: uuid.UUID) -> tuple[str, Any]:
    info = app.get_run(run_id)
    assert info is not None
    return info.status, info.steps.get("got")


@pytest.mark.parametrize("key", ["", "ключ ☃ \U0001f600", LONG], ids=["empty", "unicode", "10000-chars"])
def test_a_hostile_key_waits_and_resumes_alike_on_both_databases(
    app_on: AppOn, clock: FakeClock, user: User, key: str
) -> None:
    """Before, on PostgreSQL the 10,000-character key failed the run at once
    (``unstorable_state``: the wait's index row was too big) while SQLite waited."""
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(expect, Expect(key), user=user)
    near = app.start_workflow(expect, Expect(key + "x"), user=user)  # a key one character longer
    assert _status(app, run_id) == ("suspended", None)

    assert app.dispatch(send, Sent(key), user=user) == Ok(None)
    app.run_worker(once=True)
    assert _status(app, run_id) == ("completed", Sent(key))
    assert _status(app, near) == ("suspended", None)


def test_a_long_key_stored_whole_by_an_earlier_release_still_matches(
    app_on: AppOn, clock: FakeClock, user: User
) -> None:
    """Keys longer than the limit are stored as their digest; a wait row that holds one
    in full (written before digests) is compared in the same form."""
    key = "a" * 5000  # compresses well: PostgreSQL's index takes it whole, as it did
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(expect, Expect(key), user=user)
    with app.engine.begin() as conn:
        stored = conn.execute(sa.select(workflow_waits.c.key)).scalar_one()
        assert stored.startswith("sha256:") and len(stored) == 71
        conn.execute(sa.update(workflow_waits).values(key=f'"{key}"'))

    assert app.dispatch(send, Sent(key), user=user) == Ok(None)
    app.run_worker(once=True)
    assert _status(app, run_id) == ("completed", Sent(key))


@pytest.mark.parametrize(
    ("text", "reason"),
    [("a\x00b", "it must not contain NUL characters (U+0000)"), ("a\ud800b", "it is not valid Unicode")],
    ids=["nul", "lone-surrogate"],
)
def test_a_string_postgresql_refuses_is_refused_on_both_databases(
    app_on: AppOn, clock: FakeClock, user: User, text: str, reason: str
) -> None:
    """SQLite kept these strings (its JSON escapes them), PostgreSQL refused them: a start
    raised there only, and a run holding one failed there only.  Now the state codec
    refuses them on both, with the same words."""
    app = app_on([f], clock=clock)
    with pytest.raises(StateError, match=f"workflow wfh:keep: the payload cannot be stored: .*{re.escape(reason)}"):
        app.start_workflow(keep, Expect(text), user=user)
    assert app.runs() == []

    escaped = text.encode("unicode_escape").decode()  # the step's value holds it, unescaped
    run_id = app.start_workflow(keep, Expect(escaped), user=user)
    info = app.get_run(run_id)
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "unstorable_state"
    assert reason in info.error["message"] and "@wait" in info.error["message"]


def test_a_failed_attempt_whose_error_holds_a_nul_suspends_its_retry_on_both_databases(
    app_on: AppOn, clock: FakeClock, user: User
) -> None:
    """The retry record keeps the attempt's error text in the run's state.  Before, a NUL in
    it (an exception quoting input) failed the run as ``unstorable_state`` on PostgreSQL
    only; it is escaped, as a run's ``error`` is."""
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flaky, Expect("x"), user=user)
    info = app.get_run(run_id)
    assert info is not None and info.error is not None
    assert (info.status, info.path, info.error["code"]) == ("suspended", "r/#2", "internal_error")


@attrs.frozen
class Items:
    items: list[str]


deep = f.workflow(
    "deep",
    trigger=manual(Items),
    pipeline=f.workflow_pipeline(Items).for_each(
        "item",
        over=lambda c: c.payload.items,
        # 400 characters in the first iteration (boot lets it be), 401 in the eleventh.
        do=lambda b: b.branch(
            when=lambda c: c.scope["item"] == "last", on_true=lambda p: p.wait("PT1M", name="w" * 373)
        ),
    ),
)


def test_a_path_longer_than_its_column_fails_the_run_alike_on_both_databases(
    app_on: AppOn, clock: FakeClock, user: User
) -> None:
    """Before, PostgreSQL refused the 401-character path (``value too long``) and SQLite
    stored it whole."""
    app = app_on([f], clock=clock)
    info = app.get_run(app.start_workflow(deep, Items([*"abcdefghij", "last"]), user=user))
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "unstorable_state"
    assert info.error["message"].endswith(": the path is longer than 400 characters")
    assert info.error["message"].startswith("at step item/do/#10/@branch/on_true/www")


class _Unregistered:
    """A class no Feature or App names as a value type."""


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (lambda c: _Unregistered(), "cannot be stored: only JSON values"),
        (lambda c: float("nan"), "JSON has no NaN or Infinity"),
    ],
    ids=["unregistered-class", "nan"],
)
def test_a_key_that_cannot_be_stored_fails_the_run_saying_why(
    app_on: AppOn, user: User, key: Callable[[Any], object], said: str
) -> None:
    """Before, the run's error was only 'raised StateError': the reason, which names a
    type and the fix, never the value, went to the log alone."""
    g = Feature("wfh_key")
    g.event(Sent)
    flow = g.workflow(
        "flow",
        trigger=manual(Expect),
        pipeline=g.workflow_pipeline(Expect).wait_for_event(
            "got", Sent, key=key, event_key=lambda e: e.key, timeout="PT1H"
        ),
    )
    app = app_on([g], clock=FakeClock(T0))
    info = app.get_run(app.start_workflow(flow, Expect("k"), user=user))
    assert info is not None and info.status == "failed" and info.error is not None
    assert info.error["code"] == "internal_error"
    assert "wait_for_event 'got': its key cannot be stored: " in info.error["message"]
    assert said in info.error["message"]


def _dict_keyed(event_key: Callable[[Sent], object]) -> tuple[Feature[Any], Any]:
    """A wait keyed by a dict written letter first, and an event keyed by ``event_key``."""
    g = Feature("wfh_dict")
    g.event(Sent)
    flow = g.workflow(
        "flow",
        trigger=manual(Expect),
        pipeline=g.workflow_pipeline(Expect).wait_for_event(
            "got", Sent, key=lambda c: {"letter": c.payload.key, "kind": "sent"}, event_key=event_key, timeout="PT1H"
        ),
    )
    return g, flow


def test_equal_dict_keys_match_whatever_order_their_keys_were_written_in(
    app_on: AppOn, clock: FakeClock, user: User
) -> None:
    """Before, a dict key's stored text kept its insertion order: the run was never woken,
    and timed out with ``None``."""
    g, flow = _dict_keyed(lambda e: {"kind": "sent", "letter": e.key})
    app = app_on([f, g], clock=clock)
    run_id = app.start_workflow(flow, Expect("k1"), user=user)
    other = app.start_workflow(flow, Expect("k2"), user=user)
    assert app.dispatch(send, Sent("k1"), user=user) == Ok(None)
    app.run_worker(once=True)
    assert _status(app, run_id) == ("completed", Sent("k1"))
    assert _status(app, other) == ("suspended", None)


@pytest.mark.parametrize("letter", ["k1", "k" * 2000], ids=["short", "long-stored-whole"])
def test_a_dict_key_stored_in_its_order_by_an_earlier_release_still_matches_that_order(
    app_on: AppOn, clock: FakeClock, user: User, letter: str
) -> None:
    """Earlier releases stored a dict key with its keys' order (and, before digests, a long
    one whole): such a wait is still matched by an event whose key has that order."""
    g, flow = _dict_keyed(lambda e: {"letter": e.key, "kind": "sent"})
    app = app_on([f, g], clock=clock)
    run_id = app.start_workflow(flow, Expect(letter), user=user)
    ordered = {"$t": "dict", "v": {"letter": letter, "kind": "sent"}, "k": ["letter", "kind"]}
    with app.engine.begin() as conn:
        conn.execute(sa.update(workflow_waits).values(key=json.dumps(ordered, sort_keys=True)))
    assert app.dispatch(send, Sent(letter), user=user) == Ok(None)
    app.run_worker(once=True)
    assert _status(app, run_id) == ("completed", Sent(letter))
