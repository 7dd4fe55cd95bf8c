"""The interpreter: values flowing through compute/branch/for_each/return_ (DESIGN §3.3, §3.4)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs
import pytest
from _crash import located, said
from _support import failure_of, ok_data

from kumiko_typed import App, Ctx, Feature, User, fail, ok


@attrs.frozen
class Num:
    n: int


@attrs.frozen
class Flag:
    flag: bool


@attrs.frozen
class Items:
    items: list[int]


MakeApp = Callable[..., App]


# --- compute and return_ ------------------------------------------------------------------


def test_compute_values_flow_into_later_steps_and_return(make_app: MakeApp, user: User) -> None:
    f = Feature("calc")
    h = f.write_handler(
        "double-plus-one",
        f.pipeline(Num)
        .compute("double", lambda c: c.payload.n * 2)
        .compute("plus", lambda c: c.steps["double"] + 1)
        .compute("both", lambda c: (c.steps["double"], c.steps["plus"]))
        .return_(lambda c: ok({"plus": c.steps["plus"], "both": c.steps["both"]})),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Num(3), user=user)) == {"plus": 7, "both": (6, 7)}
    assert ok_data(app.dispatch(h, Num(-5), user=user)) == {"plus": -9, "both": (-10, -9)}


def test_top_level_keys_appear_only_once_their_step_ran(make_app: MakeApp, user: User) -> None:
    f = Feature("calc")
    h = f.write_handler(
        "snap",
        f.pipeline(Num)
        .compute("first", lambda c: dict(c.steps))
        .compute("second", lambda c: dict(c.steps))
        .return_(lambda c: ok((c.steps["first"], c.steps["second"]))),
    )
    app = make_app([f])
    first, second = ok_data(app.dispatch(h, Num(1), user=user))
    assert first == {}
    assert second == {"first": {}}


def test_ctx_carries_payload_user_event_and_clock(make_app: MakeApp, user: User, now: datetime) -> None:
    f = Feature("calc")
    h = f.write_handler(
        "who",
        f.pipeline(Num).return_(
            lambda c: ok(
                {
                    "payload": c.payload,
                    "user": c.user,
                    "tenant": c.tenant_id,
                    "handler": c.event.handler,
                    "event_payload": c.event.payload,
                    "event_user": c.event.user,
                    "event_tenant": c.event.tenant_id,
                    "correlation": c.event.correlation_id,
                    "time": c.event.time,
                    "now": c.now,
                    "workflow": c.workflow,
                }
            )
        ),
    )
    app = make_app([f])
    corr = uuid.uuid4()
    data = ok_data(app.dispatch(h, Num(4), user=user, correlation_id=corr))
    assert data == {
        "payload": Num(4),
        "user": user,
        "tenant": user.tenant_id,
        "handler": "calc:who",
        "event_payload": Num(4),
        "event_user": user,
        "event_tenant": user.tenant_id,
        "correlation": corr,
        "time": now,
        "now": now,
        "workflow": None,
    }
    # Without an explicit correlation id every dispatch gets a fresh one.
    a = ok_data(app.dispatch(h, Num(4), user=user))["correlation"]
    b = ok_data(app.dispatch(h, Num(4), user=user))["correlation"]
    assert isinstance(a, uuid.UUID)
    assert a != b


def test_return_fail_is_returned_as_is(make_app: MakeApp, user: User) -> None:
    f = Feature("calc")
    h = f.write_handler(
        "reject",
        f.pipeline(Num).return_(
            lambda c: (
                fail("unprocessable", f"{c.payload.n} is odd", {"n": c.payload.n})
                if c.payload.n % 2
                else ok(c.payload.n)
            )
        ),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Num(3), user=user))
    assert (res.code, res.message, res.details, res.http_status) == ("unprocessable", "3 is odd", {"n": 3}, 422)
    assert ok_data(app.dispatch(h, Num(4), user=user)) == 4


def test_return_of_a_non_result_is_an_internal_error(make_app: MakeApp, user: User) -> None:
    f = Feature("calc")
    h = f.write_handler("bad", f.pipeline(Num).return_(lambda c: c.payload.n))  # type: ignore[arg-type,return-value]
    app = make_app([f])
    res = failure_of(app.dispatch(h, Num(1), user=user))
    assert res.code == "internal_error"
    assert "return_ must give ok(...) or fail(...), not int" in said(res)  # the framework's own words
    assert located(res) == {"path": "0", "step": "return"}


# --- branch -----------------------------------------------------------------------------


def _branch_feature() -> tuple[Feature[str], Any]:
    f = Feature("br")
    h = f.write_handler(
        "arms",
        f.pipeline(Flag)
        .compute("before", lambda c: dict(c.steps))
        .branch(
            when=lambda c: c.payload.flag,
            on_true=lambda b: b.compute("t", lambda c: "yes").compute("t2", lambda c: c.steps["t"] + "!"),
            on_false=lambda b: b.compute("f", lambda c: "no"),
        )
        .compute("after", lambda c: (c.steps["t"], c.steps["t2"], c.steps["f"]))
        .return_(lambda c: ok((c.steps["before"], c.steps["after"]))),
    )
    return f, h


def test_branch_runs_one_arm_and_keys_of_the_other_arm_are_none(make_app: MakeApp, user: User) -> None:
    f, h = _branch_feature()
    app = make_app([f])
    _, after = ok_data(app.dispatch(h, Flag(True), user=user))
    assert after == ("yes", "yes!", None)
    _, after = ok_data(app.dispatch(h, Flag(False), user=user))
    assert after == (None, None, "no")


def test_keys_declared_in_sub_pipelines_exist_as_none_from_the_start(make_app: MakeApp, user: User) -> None:
    f, h = _branch_feature()
    app = make_app([f])
    before, _ = ok_data(app.dispatch(h, Flag(True), user=user))
    # Every arm key is there (None) before the branch ran; later top-level keys are not.
    assert before == {"t": None, "t2": None, "f": None}


def test_branch_without_on_false_does_nothing_when_false(make_app: MakeApp, user: User) -> None:
    f = Feature("br")
    h = f.write_handler(
        "maybe",
        f.pipeline(Flag)
        .branch(when=lambda c: c.payload.flag, on_true=lambda b: b.compute("note", lambda c: "sent"))
        .return_(lambda c: ok(c.steps["note"])),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Flag(True), user=user)) == "sent"
    assert ok_data(app.dispatch(h, Flag(False), user=user)) is None


def test_a_key_set_in_both_arms_holds_the_value_of_the_arm_that_ran(make_app: MakeApp, user: User) -> None:
    f = Feature("br")
    h = f.write_handler(
        "both",
        f.pipeline(Num)
        .branch(
            when=lambda c: c.payload.n > 0,
            on_true=lambda b: b.compute("sign", lambda c: "positive"),
            on_false=lambda b: b.compute("sign", lambda c: "not positive"),
        )
        .compute("shout", lambda c: c.steps["sign"].upper())
        .return_(lambda c: ok(c.steps["shout"])),
    )
    app = make_app([f])  # the same key in both arms is no boot problem
    assert ok_data(app.dispatch(h, Num(5), user=user)) == "POSITIVE"
    assert ok_data(app.dispatch(h, Num(0), user=user)) == "NOT POSITIVE"


def test_branch_condition_sees_earlier_steps_and_nested_branches(make_app: MakeApp, user: User) -> None:
    f = Feature("br")
    h = f.write_handler(
        "nested",
        f.pipeline(Num)
        .compute("big", lambda c: c.payload.n >= 100)
        .branch(
            when=lambda c: c.steps["big"],
            on_true=lambda b: b.compute("size", lambda c: "big"),
            on_false=lambda b: b.branch(
                when=lambda c: c.payload.n < 0,
                on_true=lambda bb: bb.compute("size", lambda c: "negative"),
                on_false=lambda bb: bb.compute("size", lambda c: "small"),
            ),
        )
        .return_(lambda c: ok(c.steps["size"])),
    )
    app = make_app([f])
    assert [ok_data(app.dispatch(h, Num(n), user=user)) for n in (150, -1, 7)] == ["big", "negative", "small"]


# --- for_each ---------------------------------------------------------------------------


def test_for_each_scope_item_inside_body_and_gone_afterwards(make_app: MakeApp, user: User) -> None:
    seen: list[tuple[object, dict[str, object]]] = []
    f = Feature("loop")
    h = f.write_handler(
        "each",
        f.pipeline(Items)
        .compute("scope_before", lambda c: dict(c.scope))
        .for_each(
            "item",
            over=lambda c: c.payload.items,
            do=lambda b: b.compute(
                "sq", lambda c: seen.append((c.scope["item"], dict(c.scope))) or c.scope["item"] ** 2
            ),
        )
        .compute("scope_after", lambda c: dict(c.scope))
        .return_(lambda c: ok((c.steps["scope_before"], c.steps["scope_after"], c.steps["sq"]))),
    )
    app = make_app([f])
    before, after, sq = ok_data(app.dispatch(h, Items([2, 3, 4]), user=user))
    assert seen == [(2, {"item": 2}), (3, {"item": 3}), (4, {"item": 4})]
    assert before == {}
    assert after == {}
    assert sq == 16  # the last iteration's value


def test_for_each_zero_iterations_leave_body_keys_none(make_app: MakeApp, user: User) -> None:
    f = Feature("loop")
    h = f.write_handler(
        "each",
        f.pipeline(Items)
        .for_each(
            "item",
            over=lambda c: c.payload.items,
            do=lambda b: b.compute("sq", lambda c: c.scope["item"] ** 2).compute(
                "label", lambda c: f"#{c.steps['sq']}"
            ),
        )
        .return_(lambda c: ok((c.steps["sq"], c.steps["label"]))),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([5]), user=user)) == (25, "#25")
    # A later dispatch starts from fresh values: nothing leaks from the previous run.
    assert ok_data(app.dispatch(h, Items([]), user=user)) == (None, None)


def test_for_each_body_sees_values_of_its_own_iteration(make_app: MakeApp, user: User) -> None:
    f = Feature("loop")
    h = f.write_handler(
        "running",
        f.pipeline(Items)
        .compute("start", lambda c: 100)
        .for_each(
            "item",
            over=lambda c: c.payload.items,
            # "total" of the previous iteration is visible (None in the first one).
            do=lambda b: b.compute(
                "total",
                lambda c: (c.steps["total"] if c.steps["total"] is not None else c.steps["start"]) + c.scope["item"],
            ),
        )
        .return_(lambda c: ok(c.steps["total"])),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([1, 2, 3]), user=user)) == 106


def test_inner_loop_with_the_same_item_name_restores_the_outer_item(make_app: MakeApp, user: User) -> None:
    trace: list[tuple[str, object]] = []

    def record(tag: str) -> Callable[[Any], object]:
        def fn(c: Any) -> object:
            trace.append((tag, c.scope["x"]))
            return c.scope["x"]

        return fn

    f = Feature("loop")
    h = f.write_handler(
        "shadow",
        f.pipeline(Items)
        .for_each(
            "x",
            over=lambda c: c.payload.items,
            do=lambda b: (
                b.compute("outer_before", record("outer"))
                .for_each("x", over=lambda c: ["a", "b"], do=lambda bb: bb.compute("inner", record("inner")))
                .compute("outer_after", record("restored"))
            ),
        )
        .compute("gone", lambda c: "x" in c.scope)
        .return_(lambda c: ok((c.steps["outer_before"], c.steps["inner"], c.steps["outer_after"], c.steps["gone"]))),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([1, 2]), user=user)) == (2, "b", 2, False)
    assert trace == [
        ("outer", 1),
        ("inner", "a"),
        ("inner", "b"),
        ("restored", 1),
        ("outer", 2),
        ("inner", "a"),
        ("inner", "b"),
        ("restored", 2),
    ]


def test_nested_loops_with_different_names_see_both_items(make_app: MakeApp, user: User) -> None:
    f = Feature("loop")
    h = f.write_handler(
        "grid",
        f.pipeline(Items)
        .compute("cells", lambda c: [])
        .for_each(
            "row",
            over=lambda c: c.payload.items,
            do=lambda b: b.for_each(
                "col",
                over=lambda c: range(c.scope["row"]),
                do=lambda bb: bb.compute("cell", lambda c: c.steps["cells"].append((c.scope["row"], c.scope["col"]))),
            ),
        )
        .return_(lambda c: ok(c.steps["cells"])),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([1, 2]), user=user)) == [(1, 0), (2, 0), (2, 1)]


def test_branch_inside_for_each_keeps_last_value_of_each_key(make_app: MakeApp, user: User) -> None:
    f = Feature("loop")
    h = f.write_handler(
        "parity",
        f.pipeline(Items)
        .for_each(
            "i",
            over=lambda c: c.payload.items,
            do=lambda b: b.branch(
                when=lambda c: c.scope["i"] % 2 == 0,
                on_true=lambda bb: bb.compute("even", lambda c: c.scope["i"]),
                on_false=lambda bb: bb.compute("odd", lambda c: c.scope["i"]),
            ),
        )
        .return_(lambda c: ok((c.steps["even"], c.steps["odd"]))),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([1, 2, 3, 4, 5]), user=user)) == (4, 5)
    assert ok_data(app.dispatch(h, Items([1, 3]), user=user)) == (None, 3)


# --- read-only context ----------------------------------------------------------------------


def _assign_step(c: Any) -> object:
    c.steps["hacked"] = 1
    return None


def _assign_scope(c: Any) -> object:
    c.scope["item"] = "other"
    return None


def _delete_step(c: Any) -> object:
    del c.steps["x"]
    return None


def _update_steps(c: Any) -> object:
    return c.steps.update(x=2)


def _pop_step(c: Any) -> object:
    return c.steps.pop("x")


def _clear_steps(c: Any) -> object:
    return c.steps.clear()


def _setdefault_step(c: Any) -> object:
    return c.steps.setdefault("hacked", 1)


@pytest.mark.parametrize(
    ("fn", "error"),
    # Ctx attributes are Final for type checkers (typecheck_tests/cases/errors_types.py);
    # at run time the step values themselves, and the loop items, are read-only views.
    [
        (_assign_step, "TypeError"),
        (_delete_step, "TypeError"),
        (_update_steps, "AttributeError"),
        (_pop_step, "AttributeError"),
        (_clear_steps, "AttributeError"),
        (_setdefault_step, "AttributeError"),
        (_assign_scope, "TypeError"),  # outside any loop: the empty view
    ],
    ids=["steps-item", "steps-del", "steps-update", "steps-pop", "steps-clear", "steps-setdefault", "scope-item"],
)
def test_ctx_is_read_only_at_run_time(make_app: MakeApp, user: User, fn: Callable[[Any], object], error: str) -> None:
    reached: list[object] = []
    f = Feature("ro")
    h = f.write_handler(
        "poke",
        f.pipeline(Num)
        .compute("x", lambda c: 1)
        .compute("poke", fn)
        .compute("after", lambda c: reached.append(c.steps))
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Num(1), user=user))
    assert res.code == "internal_error"
    assert error in res.message
    assert located(res) == {"path": "1", "step": 'compute "poke"'}
    assert reached == []


def test_a_ctx_kept_by_a_resolver_still_reads_its_own_run_afterwards(make_app: MakeApp, user: User) -> None:
    kept: list[Any] = []
    f = Feature("ro")
    h = f.write_handler(
        "keep",
        f.pipeline(Items)
        .compute("first", lambda c: c.payload.items[0])
        .for_each("item", over=lambda c: c.payload.items, do=lambda b: b.compute("seen", kept.append))
        .return_(lambda c: ok(c.steps["first"])),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([1, 2]), user=user)) == 1
    assert ok_data(app.dispatch(h, Items([7]), user=user)) == 7
    first, _, last = kept
    # Each run's own values, not reused by the next run; the loop's item gone after it.
    assert (first.payload, dict(first.steps), dict(first.scope)) == (Items([1, 2]), {"first": 1, "seen": None}, {})
    assert (last.payload, dict(last.steps), dict(last.scope)) == (Items([7]), {"first": 7, "seen": None}, {})
    assert (first.user, first.tenant_id, first.event.handler, repr(first)) == (
        user,
        user.tenant_id,
        "ro:keep",
        "<Ctx ro:keep payload=Items(items=[1, 2])>",
    )
    with pytest.raises(TypeError):
        first.steps["first"] = 2
    with pytest.raises(TypeError):
        first.scope["item"] = 2
    assert first.steps["first"] == 1


def test_a_ctx_built_by_hand_serves_a_resolver(user: User, now: datetime) -> None:
    """What a unit test of one resolver does: ``Ctx(...)`` with the values it reads."""
    correlation = uuid.uuid4()
    c: Ctx[Num, Any, Any] = Ctx(Num(2), user, {"double": 4}, {"item": 1}, None, now, None, "calc:one", correlation)

    def resolver(c: Ctx[Num, Any, Any]) -> int:
        return c.payload.n + c.steps["double"] + c.scope["item"]

    assert resolver(c) == 7
    assert (c.user, c.tenant_id, c.now, c.workflow, c.db) == (user, user.tenant_id, now, None, None)
    event = c.event
    assert (event.handler, event.payload, event.correlation_id, event.time) == ("calc:one", Num(2), correlation, now)
    assert Ctx(Num(2), user, {}, {}, None, now).event.correlation_id == uuid.UUID(int=0)


def test_scope_is_read_only_inside_a_loop(make_app: MakeApp, user: User) -> None:
    f = Feature("ro")
    h = f.write_handler(
        "poke",
        f.pipeline(Items)
        .for_each("item", over=lambda c: c.payload.items, do=lambda b: b.compute("poke", _assign_scope))
        .return_(lambda c: ok(None)),
    )
    app = make_app([f])
    res = failure_of(app.dispatch(h, Items([1]), user=user))
    assert res.code == "internal_error"
    assert "TypeError" in res.message
    assert located(res) == {"path": "0/do/#0/0", "step": 'compute "poke"'}


def test_reading_a_key_no_step_declared_is_an_internal_error(make_app: MakeApp, user: User) -> None:
    f = Feature("ro")
    h = f.write_handler("typo", f.pipeline(Num).compute("x", lambda c: 1).return_(lambda c: ok(c.steps["y"])))
    app = make_app([f])
    res = failure_of(app.dispatch(h, Num(1), user=user))
    assert res.code == "internal_error"
    assert "KeyError" in res.message
    assert located(res) == {"path": "1", "step": "return"}


class Key(enum.StrEnum):
    TOTAL = "total"
    ITEM = "item"
    QUOTE = 'it\'s "quoted"\n'


def test_strenum_step_names_run_as_their_values(make_app: MakeApp, user: User) -> None:
    """The fused computes are generated code: a member's repr (``<Key.TOTAL: 'total'>``)
    written into it was a SyntaxError when the handler was built."""
    f = Feature("enum")
    h = f.write_handler(
        "sum",
        f.pipeline(Items)
        .compute(Key.TOTAL, lambda c: sum(c.payload.items))
        .compute(Key.QUOTE, lambda c: c.steps[Key.TOTAL] * 2)
        .for_each(Key.ITEM, over=lambda c: c.payload.items, do=lambda b: b.compute("seen", lambda c: c.scope["item"]))
        .return_(lambda c: ok((c.steps["total"], c.steps['it\'s "quoted"\n'], c.steps["seen"]))),
    )
    app = make_app([f])
    assert ok_data(app.dispatch(h, Items([1, 2]), user=user)) == (3, 6, 2)
    assert [type(s.step_name) for s in h.pipeline.block.steps[:2]] == [str, str]
