"""Boot validation: building an App checks the plugin's rules again and raises ONE BootError
listing every problem, worded by ``kumiko_typed._rules`` (DESIGN §1, §3.3, §4.5)."""

from __future__ import annotations

import enum
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest

from kumiko_typed import App, BootError, Feature, Ok, User, manual, ok
from kumiko_typed._builders import Pipeline, SubPipeline, WorkflowPipeline
from kumiko_typed._rules import (
    msg_async_iterator_resolver,
    msg_async_resolver,
    msg_duplicate_step,
    msg_empty_step_name,
    msg_foreign_pipeline,
    msg_no_return,
    msg_plain_enum_name,
    msg_return_in_subpipeline,
    msg_step_name,
    msg_tier,
    msg_unknown_capability,
    msg_unknown_step,
    msg_workflow_only,
    msg_workflow_pipeline,
)
from kumiko_typed._steps import Step

MakeApp = Callable[..., App]


@attrs.frozen
class P:
    n: int


def _boot_problems(features: list[Feature[Any]]) -> list[str]:
    with pytest.raises(BootError) as info:
        App(features, database_url="sqlite://")
    exc = info.value
    # One error whose message lists every problem.
    assert str(exc).startswith(f"{len(exc.problems)} problem(s) in the app definition:")
    for p in exc.problems:
        assert f"  - {p}" in str(exc)
    return exc.problems


def _handler(f: Feature[Any], name: str, build: Callable[[Any], Any]) -> None:
    f.write_handler(name, build(f.pipeline(P)).return_(lambda c: ok(None)))


def test_a_valid_app_boots(make_app: MakeApp, user: User) -> None:
    f = Feature("ok", requires=["mail.send"])
    _handler(
        f,
        "h",
        lambda p: (
            p.compute("a", lambda c: 1)
            .branch(
                when=lambda c: True,
                on_true=lambda b: b.compute("k", lambda c: 1),
                on_false=lambda b: b.compute("k", lambda c: 2).compute("only_false", lambda c: 3),
            )
            .for_each("i", over=lambda c: [1], do=lambda b: b.compute("body", lambda c: 1))
        ),
    )
    g = Feature("other")
    _handler(g, "h", lambda p: p.compute("a", lambda c: 1))  # same local and step names, other feature
    app = make_app([f, g])
    assert set(app.handlers) == {"ok:h", "other:h"}
    assert isinstance(app.dispatch(app.handlers["ok:h"], P(1), user=user), Ok)


def test_tier2_step_without_requires(make_app: MakeApp) -> None:
    f = Feature("shop")
    _handler(f, "notify", lambda p: p.compute("a", lambda c: 1).send_mail(to="a@b.c", subject="s", body="b"))
    prefix = "handler shop:notify, step 1 (mail.send)"
    assert _boot_problems([f]) == [
        f"{prefix}: {msg_tier('mail.send', 'send_mail', set())}",
    ]
    assert 'needs the tier-2 capability "mail.send"' in msg_tier("mail.send", "send_mail", set())


def test_tier2_step_inside_an_arm_names_the_declared_capabilities() -> None:
    f = Feature("shop", requires=["webhook.send"])
    _handler(
        f,
        "notify",
        lambda p: p.branch(when=lambda c: True, on_true=lambda b: b.send_mail(to="a@b.c", subject="s", body="b")),
    )
    prefix = "handler shop:notify, step 0/on_true/0 (mail.send)"
    problems = _boot_problems([f])
    assert problems == [
        f"{prefix}: {msg_tier('mail.send', 'send_mail', {'webhook.send'})}",
    ]
    assert '(it declares "webhook.send")' in problems[0]


def test_declared_tier2_step_has_no_tier_problem() -> None:
    f = Feature("shop", requires=["mail.send"])
    _handler(f, "notify", lambda p: p.send_mail(to="a@b.c", subject="s", body="b"))
    App([f], database_url="sqlite://").dispose()  # no BootError


def test_tier3_step_in_a_handler_pipeline() -> None:
    f = Feature("shop")
    _handler(f, "later", lambda p: p.compute("a", lambda c: 1).wait(timedelta(days=1)))
    _handler(f, "later-arm", lambda p: p.branch(when=lambda c: True, on_true=lambda b: b.wait("PT1H")))
    prefix = "handler shop:later, step 1 (workflow.wait)"
    arm = "handler shop:later-arm, step 0/on_true/0 (workflow.wait)"
    assert _boot_problems([f]) == [
        f"{prefix}: {msg_workflow_only('workflow.wait', 'wait', 'Pipeline')}",
        f"{arm}: {msg_workflow_only('workflow.wait', 'wait', 'SubPipeline')}",
    ]


@pytest.mark.parametrize("where", ["branch", "for_each"])
def test_return_in_a_sub_pipeline(where: str) -> None:
    f = Feature("shop")
    if where == "branch":
        pipeline = f.pipeline(P).branch(
            when=lambda c: True,
            on_true=lambda b: b.compute("x", lambda c: 1).return_(lambda c: ok("early")),  # type: ignore[misc]
        )
        path = "0/on_true/1"
    else:
        pipeline = f.pipeline(P).for_each(
            "i",
            over=lambda c: [1],
            do=lambda b: b.compute("x", lambda c: 1).return_(lambda c: ok("early")),  # type: ignore[misc]
        )
        path = "0/do/1"
    f.write_handler("early", pipeline.return_(lambda c: ok("late")))
    assert _boot_problems([f]) == [
        f"handler shop:early, step {path} (return): {msg_return_in_subpipeline('SubPipeline')}"
    ]


def test_duplicate_step_names() -> None:
    f = Feature("shop")
    _handler(f, "top", lambda p: p.compute("a", lambda c: 1).compute("b", lambda c: 2).compute("a", lambda c: 3))
    _handler(
        f,
        "arm",
        lambda p: p.compute("k", lambda c: 1).branch(
            when=lambda c: True, on_true=lambda b: b.compute("k", lambda c: 2)
        ),
    )
    _handler(
        f,
        "after-arm",
        lambda p: p.branch(
            when=lambda c: True, on_true=lambda b: b, on_false=lambda b: b.compute("k", lambda c: 2)
        ).compute("k", lambda c: 1),
    )
    _handler(
        f,
        "loop",
        lambda p: p.compute("v", lambda c: 1).for_each(
            "i", over=lambda c: [], do=lambda b: b.compute("v", lambda c: 2)
        ),
    )
    _handler(
        f,
        "in-arm",
        lambda p: p.branch(
            when=lambda c: True, on_true=lambda b: b.compute("z", lambda c: 1).compute("z", lambda c: 2)
        ),
    )
    assert _boot_problems([f]) == [
        f'handler shop:top, step 2 (compute "a"): {msg_duplicate_step("a")}',
        f'handler shop:arm, step 1/on_true/0 (compute "k"): {msg_duplicate_step("k")}',
        f'handler shop:after-arm, step 1 (compute "k"): {msg_duplicate_step("k")}',
        f'handler shop:loop, step 1/do/0 (compute "v"): {msg_duplicate_step("v")}',
        f'handler shop:in-arm, step 0/on_true/1 (compute "z"): {msg_duplicate_step("z")}',
    ]


def test_the_same_key_in_both_arms_of_one_branch_is_fine(make_app: MakeApp, user: User) -> None:
    f = Feature("shop")
    _handler(
        f,
        "both",
        lambda p: p.branch(
            when=lambda c: c.payload.n > 0,
            on_true=lambda b: b.compute("k", lambda c: "+"),
            on_false=lambda b: b.compute("k", lambda c: "-"),
        ).compute("after", lambda c: c.steps["k"]),
    )
    app = make_app([f])
    assert isinstance(app.dispatch(app.handlers["shop:both"], P(1), user=user), Ok)


def test_the_same_key_in_two_branches_is_a_duplicate() -> None:
    f = Feature("shop")
    _handler(
        f,
        "two",
        lambda p: p.branch(when=lambda c: True, on_true=lambda b: b.compute("k", lambda c: 1)).branch(
            when=lambda c: True, on_true=lambda b: b, on_false=lambda b: b.compute("k", lambda c: 2)
        ),
    )
    assert _boot_problems([f]) == [f'handler shop:two, step 1/on_false/0 (compute "k"): {msg_duplicate_step("k")}']


def test_duplicate_handler_names() -> None:
    f = Feature("shop")
    _handler(f, "buy", lambda p: p)
    _handler(f, "buy", lambda p: p.compute("x", lambda c: 1))
    assert _boot_problems([f]) == ["handler shop:buy: the name is registered twice; handler names must be unique"]


def test_duplicate_feature_names() -> None:
    a, b = Feature("shop"), Feature("shop")
    _handler(a, "buy", lambda p: p)
    _handler(b, "sell", lambda p: p)
    assert _boot_problems([a, b]) == ["feature 'shop' is listed twice; feature names must be unique"]


def test_write_handler_without_return() -> None:
    f = Feature("shop")
    f.write_handler("open", f.pipeline(P).compute("x", lambda c: 1))  # type: ignore[arg-type]
    assert _boot_problems([f]) == [f"handler shop:open: {msg_no_return('Pipeline')}"]


def test_write_handler_with_a_workflow_pipeline() -> None:
    f = Feature("shop")
    f.write_handler("wf", f.workflow_pipeline(P).return_(lambda c: ok(1)))  # type: ignore[arg-type]
    assert _boot_problems([f]) == [f"handler shop:wf: {msg_no_return('WorkflowFinished')}"]


@pytest.mark.parametrize("kind", ["Pipeline", "Finished", "QueryFinished", "str"])
def test_a_workflow_with_a_handlers_or_a_querys_pipeline(kind: str) -> None:
    """It booted and ran (a handler's pipeline has no wait to refuse); mypy says
    ``kumiko-workflow-pipeline`` (typecheck_tests/cases/errors_workflow_pipeline.py)."""
    f = Feature("shop")
    given: Any = {
        "Pipeline": f.pipeline(P).compute("x", lambda c: 1),
        "Finished": f.pipeline(P).return_(lambda c: ok(1)),
        "QueryFinished": f.query_pipeline(P).return_(lambda c: ok(1)),
        "str": "not a pipeline",  # raised AttributeError at registration
    }[kind]
    f.workflow("wf", trigger=manual(P), pipeline=given)
    assert _boot_problems([f]) == [f"workflow shop:wf: {msg_workflow_pipeline(kind)}"]
    assert f.workflows == []
    what = {"QueryFinished": "a query pipeline (QueryFinished)", "str": "str"}.get(
        kind, f"a write-handler pipeline ({kind})"
    )
    assert msg_workflow_pipeline(kind) == (
        f"A workflow needs a pipeline built with feature.workflow_pipeline(P), got {what}; "
        "build it with feature.workflow_pipeline(P), which offers the same steps and can wait"
    )


@pytest.mark.parametrize("requires", [["mail.sned"], ["mail.send", "mail.sned"], ["compute"]])
def test_unknown_capability_in_requires(requires: list[str]) -> None:
    f = Feature("shop", requires=requires)
    _handler(f, "buy", lambda p: p)
    bad = [r for r in requires if r != "mail.send"]
    assert _boot_problems([f]) == [f"feature 'shop': {msg_unknown_capability(k)}" for k in bad]
    assert '"mail.send"' in msg_unknown_capability(bad[0])


def test_a_workflow_with_tier3_steps_boots() -> None:
    f = Feature("shop")
    f.workflow("later", trigger=manual(P), pipeline=f.workflow_pipeline(P).compute("x", lambda c: 1).wait("PT1H"))
    App([f], database_url="sqlite://").dispose()


def test_every_problem_of_an_app_is_reported_at_once() -> None:
    shop = Feature("shop", requires=["mail.sned"])
    _handler(shop, "dup-steps", lambda p: p.compute("a", lambda c: 1).compute("a", lambda c: 2))
    _handler(
        shop,
        "arm-vs-outer",
        lambda p: p.compute("k", lambda c: 1).branch(
            when=lambda c: True, on_true=lambda b: b.compute("k", lambda c: 2)
        ),
    )
    _handler(shop, "mail", lambda p: p.send_mail(to="a@b.c", subject="s", body="b"))
    _handler(shop, "mail", lambda p: p)
    shop.write_handler("open", shop.pipeline(P))  # type: ignore[arg-type]
    billing = Feature("billing")
    _handler(billing, "sleepy", lambda p: p.wait(timedelta(hours=1)))
    _handler(billing, "fine", lambda p: p.compute("a", lambda c: 1))
    _handler(
        billing,
        "early",
        lambda p: p.branch(when=lambda c: True, on_true=lambda b: b.return_(lambda c: ok(1))),  # type: ignore[misc]
    )

    problems = _boot_problems([shop, billing])
    expected = [
        f"feature 'shop': {msg_unknown_capability('mail.sned')}",
        f'handler shop:dup-steps, step 1 (compute "a"): {msg_duplicate_step("a")}',
        f'handler shop:arm-vs-outer, step 1/on_true/0 (compute "k"): {msg_duplicate_step("k")}',
        f"handler shop:mail, step 0 (mail.send): {msg_tier('mail.send', 'send_mail', {'mail.sned'})}",
        "handler shop:mail: the name is registered twice; handler names must be unique",
        f"handler shop:open: {msg_no_return('Pipeline')}",
        f"handler billing:sleepy, step 0 (workflow.wait): {msg_workflow_only('workflow.wait', 'wait', 'Pipeline')}",
        f"handler billing:early, step 0/on_true/0 (return): {msg_return_in_subpipeline('SubPipeline')}",
    ]
    assert len(problems) == len(expected) >= 8
    assert sorted(problems) == sorted(expected)


def test_empty_roles_is_a_boot_problem() -> None:
    import attrs

    from kumiko_typed import App, BootError, Feature, ok

    @attrs.frozen
    class P:
        x: int

    f = Feature("f")
    f.write_handler("h", f.pipeline(P).return_(lambda c: ok(1)), roles=[])
    try:
        App([f], database_url="sqlite://")
    except BootError as exc:
        assert exc.problems == [
            "handler f:h: roles=[] admits nobody; use roles=None for any authenticated user, or name the roles"
        ]
    else:
        raise AssertionError("App accepted roles=[]")


def test_a_pipeline_of_another_feature_is_a_boot_problem() -> None:
    plain, mailer = Feature("plain"), Feature("mailer")
    plain.write_handler("h", mailer.pipeline(P).return_(lambda c: ok(None)))
    plain.workflow("wf", trigger=manual(P), pipeline=mailer.workflow_pipeline(P).compute("a", lambda c: 1))
    plain.query_handler("q", mailer.query_pipeline(P).return_(lambda c: ok(None)))
    problems = _boot_problems([plain, mailer])
    assert f"handler plain:h: {msg_foreign_pipeline('mailer', 'plain')}" in problems
    # The fix names the method the pipeline was started with (it said .pipeline(...) for each).
    assert f"workflow plain:wf: {msg_foreign_pipeline('mailer', 'plain', 'workflow_pipeline')}" in problems
    assert "build it with plain.workflow_pipeline(...)" in msg_foreign_pipeline("mailer", "plain", "workflow_pipeline")
    assert f"query plain:q: {msg_foreign_pipeline('mailer', 'plain', 'query_pipeline')}" in problems


async def _fetch(c: Any) -> int:
    return 1


def test_an_async_resolver_is_a_boot_problem() -> None:
    f = Feature("asyncy")
    _handler(
        f, "h", lambda p: p.compute("a", _fetch).branch(when=lambda c: True, on_true=lambda b: b.compute("b", _fetch))
    )
    problems = _boot_problems([f])
    assert len(problems) == 2, problems
    assert all(msg_async_resolver("compute", "fn") in problem for problem in problems)


class _AsyncCallable:
    async def __call__(self, c: Any) -> int:
        return 1


class _AsyncStreamCallable:
    async def __call__(self, c: Any) -> AsyncIterator[int]:
        yield 1


def test_an_object_with_an_async_call_is_a_boot_problem() -> None:
    """An instance whose __call__ is async passed boot (inspect looks at the instance, not at
    its class), and every dispatch stored a coroutine that never ran; the plugin refuses it."""
    f = Feature("asynccall")
    _handler(f, "h", lambda p: p.compute("a", _AsyncCallable()).compute("b", _AsyncStreamCallable()))
    assert _boot_problems([f]) == [
        f'handler asynccall:h, step 0 (compute "a"): {msg_async_resolver("compute", "fn")}',
        f'handler asynccall:h, step 1 (compute "b"): {msg_async_iterator_resolver("compute", "fn")}',
    ]


async def _stream(c: Any) -> AsyncIterator[int]:
    yield 1


def test_an_async_generator_resolver_is_a_boot_problem_told_what_it_is() -> None:
    """Refused as the plugin refuses it; it was told it returns an awaitable, which it does not."""
    f = Feature("asyncgen")
    _handler(f, "h", lambda p: p.compute("a", _stream))
    told = msg_async_iterator_resolver("compute", "fn")
    assert _boot_problems([f]) == [f'handler asyncgen:h, step 0 (compute "a"): {told}']


def test_an_empty_or_non_string_name_is_a_boot_problem_worded_as_the_plugin_words_it() -> None:
    """An empty name is told it is empty (it was told to be a string literal, which it is),
    and a loop's item name is checked too (an empty one passed boot, which the plugin refuses)."""
    f = Feature("empty")
    _handler(
        f,
        "h",
        lambda p: (
            p.compute("", lambda c: 1)
            .for_each("", over=lambda c: [1], do=lambda b: b)
            .find_one(4, lambda c: None)
            .for_each(7, over=lambda c: [1], do=lambda b: b)
        ),
    )
    assert _boot_problems([f]) == [
        f"handler empty:h, step 0 (compute): {msg_empty_step_name('compute')}",
        f"handler empty:h, step 1 (for_each): {msg_empty_step_name('for_each')}",
        f"handler empty:h, step 2 (read.find_one): {msg_step_name('find_one')}",
        f"handler empty:h, step 3 (for_each): {msg_step_name('for_each')}",
    ]


class _Plain(enum.Enum):
    LINE = "line"
    COUNT = 3


def test_a_member_of_an_enum_that_is_no_str_is_told_to_be_a_str_enum() -> None:
    """A key is a string: a plain Enum member names none (the plugin says so in the same words;
    it was told to be a StrEnum member without saying that the enum is not one)."""
    f = Feature("plain")
    _handler(
        f,
        "h",
        lambda p: p.compute(_Plain.LINE, lambda c: 1).for_each(_Plain.COUNT, over=lambda c: [1], do=lambda b: b),  # type: ignore[arg-type]
    )
    assert _boot_problems([f]) == [
        f"handler plain:h, step 0 (compute): {msg_plain_enum_name('compute', '_Plain', 'LINE', 'line')}",
        f"handler plain:h, step 1 (for_each): {msg_plain_enum_name('for_each', '_Plain', 'COUNT', None)}",
    ]


def test_retry_outside_a_workflow_written_without_mypy_is_a_boot_problem() -> None:
    """The refused stubs keep the typed signature's defaults: no TypeError at import."""
    f = Feature("plain")
    f.write_handler(
        "h",
        f.pipeline(P).retry(times=2, do=lambda b: b.compute("x", lambda c: 1)).return_(lambda c: ok(None)),  # type: ignore[deprecated]
    )
    assert _boot_problems([f]) == [
        f"handler plain:h, step 0 (workflow.retry): {msg_workflow_only('workflow.retry', 'retry', 'Pipeline')}"
    ]


@attrs.frozen(slots=True)
class _Homemade(Step):
    kind = "homemade.step"


def test_an_unknown_step_kind_is_a_boot_problem_not_a_key_error() -> None:
    f = Feature("odd")
    pipeline = f.pipeline(P).branch(when=lambda c: True, on_true=lambda b: b._then(SubPipeline, _Homemade()))
    f.write_handler("h", pipeline._then(Pipeline, _Homemade()).return_(lambda c: ok(None)))
    f.workflow("wf", trigger=manual(P), pipeline=f.workflow_pipeline(P)._then(WorkflowPipeline, _Homemade()))
    assert sorted(_boot_problems([f])) == [
        f"handler odd:h, step 0/on_true/0 (homemade.step): {msg_unknown_step('homemade.step')}",
        f"handler odd:h, step 1 (homemade.step): {msg_unknown_step('homemade.step')}",
        f"workflow odd:wf, step @homemade.step (homemade.step): {msg_unknown_step('homemade.step')}",
    ]


@pytest.mark.parametrize("target", [lambda: None, "shop:buy", None], ids=["function", "name", "none"])
def test_call_feature_of_something_that_is_no_handler_is_a_boot_problem(target: object) -> None:
    """Before: the boot check read ``target.name`` and raised AttributeError out of App()."""
    f = Feature("shop", requires=["call_feature"])
    f.write_handler(
        "relay",
        f.pipeline(P).call_feature("r", target, payload=lambda c: c.payload).return_(lambda c: ok(None)),  # type: ignore[arg-type]
    )
    kind = type(target).__name__
    assert _boot_problems([f]) == [
        f'handler shop:relay, step 0 (call_feature "r"): call_feature targets a {kind}, not a write handler; '
        "pass the handler that feature.write_handler(...) returned"
    ]


@pytest.mark.parametrize(
    ("kind", "given", "build"),
    [
        ("aggregate.create", "str", lambda p: p.create("x", "Product", data=lambda c: None)),
        (
            "aggregate.update",
            "int",
            lambda p: p.update("x", 5, id=lambda c: 1, changes=lambda c: {}, version=lambda c: 1),
        ),
        ("aggregate.append_event", "list", lambda p: p.append_event(["Product"], id=lambda c: 1, event=lambda c: None)),
    ],
    ids=["create-name", "update-instance", "append-list"],
)
def test_an_aggregate_step_on_something_that_is_no_class_is_a_boot_problem(
    kind: str, given: str, build: Callable[[Any], Any]
) -> None:
    """Before: the boot check read ``entity.__name__`` (or hashed a list) and raised out of App()."""
    f = Feature("shop")
    _handler(f, "write", build)
    [problem] = _boot_problems([f])
    assert problem.startswith(f"handler shop:write, step 0 ({kind}")
    assert problem.endswith(f"): the entity must be an Entity class, not a {given}; pass the class itself")


@pytest.mark.parametrize(
    ("method", "argument", "given", "build"),
    [
        ("for_each", "over", "list", lambda p: p.for_each("i", over=[1, 2], do=lambda b: b)),
        ("branch", "when", "bool", lambda p: p.branch(when=True, on_true=lambda b: b, on_false=lambda b: b)),
        ("guard", "otherwise", "str", lambda p: p.guard(lambda c: True, otherwise="no")),
        ("compute", "fn", "int", lambda p: p.compute("x", 5)),
    ],
    ids=["for_each-over", "branch-when", "guard-otherwise", "compute-fn"],
)
def test_a_resolver_that_is_no_function_is_a_boot_problem(
    method: str, argument: str, given: str, build: Callable[[Any], Any]
) -> None:
    """Before: the App booted, and every dispatch was an internal_error (a TypeError calling it)."""
    f = Feature("shop")
    _handler(f, "h", build)
    [problem] = _boot_problems([f])
    assert problem.endswith(
        f'{argument}= of step "{method}" must be a function of the context, not a {given}; '
        f"write {argument}=lambda c: ... instead"
    ), problem


def _nested(depth: int, innermost: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An arm ``depth`` sub-pipelines deep, alternating branches and loops, built by
    helpers (one expression that deep is beyond Python's own parser)."""
    arm = innermost
    for level in range(depth):
        inner = arm
        if level % 2:
            arm = lambda b, inner=inner: b.branch(when=lambda c: True, on_true=inner)  # noqa: E731
        else:
            arm = lambda b, inner=inner, level=level: b.for_each(f"i{level}", over=lambda c: [1], do=inner)  # noqa: E731
    return arm


def test_sub_pipelines_nest_to_the_limit_and_one_more_level_is_a_clear_error(make_app: MakeApp, admin: User) -> None:
    """Before: 400 nested branches raised RecursionError out of the builder (and fewer
    could pass the builder and overflow the stack at boot or run time)."""
    from kumiko_typed._builder import MAX_NESTING

    f = Feature("deep")
    deepest = _nested(MAX_NESTING - 1, lambda b: b.compute("k", lambda c: 7))
    h = f.write_handler(
        "h", f.pipeline(P).branch(when=lambda c: True, on_true=deepest).return_(lambda c: ok(c.steps["k"]))
    )
    assert make_app([f]).dispatch(h, P(1), user=admin) == Ok(7)

    for depth in (MAX_NESTING, 400, 5000):
        too_deep = _nested(depth, lambda b: b.compute("k", lambda c: 7))
        with pytest.raises(ValueError, match=rf"nest.* deeper than {MAX_NESTING} levels") as info:
            Feature("deeper").pipeline(P).branch(when=lambda c: True, on_true=too_deep)
        assert "call_feature" in str(info.value)


UNUSABLE_URLS = [
    ("garbage", "not a database URL SQLAlchemy can use (Could not parse SQLAlchemy URL"),
    ("postgresql+psycopg://u:hunter2@host:port/db", "not a database URL SQLAlchemy can use (its port is not a number"),
    # int()'s message quoted the "port": here a part of the password.
    ("postgresql://u:hun@ter:hunter2@host/db", "(its port is not a number; a '@', ':' or '/' in the password"),
    ("sqlite://host/x.sqlite3?password=hunter2", "(Invalid SQLite URL: sqlite://host/x.sqlite3?password=***)"),
    ("nosuchdb://u:hunter2@host/db", "(Can't load plugin: sqlalchemy.dialects:nosuchdb)"),
    # A new user's likely slips, each with what was meant: a hosting service's postgres://
    # DATABASE_URL (rewritten, password hidden), a SQLite file with two slashes, a bare path.
    (
        "postgres://u:hunter2@host:5433/db?password=hunter2",
        "(Can't load plugin: sqlalchemy.dialects:postgres); SQLAlchemy names PostgreSQL postgresql, not postgres:"
        " postgresql+psycopg://u:***@host:5433/db?password=***;",
    ),
    ("sqlite://x.sqlite3", "; a SQLite file takes three slashes before a relative path, four before an absolute one;"),
    ("data/x.sqlite3", "; a file path is no URL: sqlite:///PATH for a SQLite file;"),
    # Databases and drivers the runtime does not speak: the App built and failed later, at
    # a connect (ModuleNotFoundError: MySQLdb) or at the first dispatch (a KeyError in the
    # dialect seam), or with psycopg2 at the worker's first LISTEN.
    ("mysql://u:hunter2@host/db", "not on mysql+mysqldb"),
    ("postgresql+psycopg2://u:hunter2@host/db", "not on postgresql+psycopg2"),
    ("postgresql+asyncpg://u:hunter2@host/db", "not on postgresql+asyncpg (an asyncio driver"),
    ("sqlite+aiosqlite:///x.sqlite3", "not on sqlite+aiosqlite (an asyncio driver"),
]


@pytest.mark.parametrize(("url", "reason"), UNUSABLE_URLS, ids=[u.partition(":")[0] for u, _ in UNUSABLE_URLS])
def test_a_database_url_the_app_cannot_run_on_is_a_boot_problem(url: str, reason: str) -> None:
    """Was SQLAlchemy's ArgumentError, ValueError or ModuleNotFoundError from inside
    ``create_engine``; now one boot problem beside the definition's own, saying what the App
    runs on, and never the URL's password."""
    f = Feature("urls")
    _handler(f, "notify", lambda p: p.send_mail(to="a@b.c", subject="s", body="b"))  # a problem of its own
    with pytest.raises(BootError) as raised:
        App([f], database_url=url)
    assert len(raised.value.problems) == 2, raised.value.problems
    problem = raised.value.problems[1]
    assert problem.startswith("database_url: ") and reason in problem, problem
    assert "hunter2" not in str(raised.value)
    assert "SQLite (sqlite:///app.sqlite3) or PostgreSQL through psycopg 3" in problem


def test_a_postgresql_url_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg is an extra: without it, App(database_url="postgresql://...") raised
    SQLAlchemy's ModuleNotFoundError.  (tests/tooling/test_wheel.py sees the same in a venv
    that never had psycopg.)"""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what an import finds when it is not installed
    for url in ("postgresql://shop:hunter2@db/shop", "postgresql+psycopg://shop:hunter2@db/shop"):
        with pytest.raises(BootError) as raised:
            App([Feature("pg")], database_url=url)
        assert raised.value.problems == [
            'database_url: the database driver psycopg is not installed: pip install "kumiko-typed[postgres]"'
        ]


def test_a_workflows_boot_problem_names_the_step_as_its_runs_do() -> None:
    """A workflow's runs name a step by its name (``RunInfo.path``, a failed run's
    error); boot named it by index (``step 1/do/0/on_true/0``), which the person
    reading it had to count out.  A handler's steps stay by index, as its failures."""
    f = Feature("nb")
    f.workflow(
        "wf",
        trigger=manual(P),
        pipeline=f.workflow_pipeline(P)
        .wait("PT1H", name="cool-off")
        .for_each(
            "item",
            over=lambda c: [1],
            do=lambda b: b.branch(name="choose", when=lambda c: True, on_true=lambda t: t.wait("soon")),
        )
        .wait("later"),
    )
    _handler(
        f,
        "h",
        lambda p: p.compute("x", lambda c: 1).branch(
            when=lambda c: True, on_true=lambda b: b.compute("x", lambda c: 2)
        ),
    )
    duration = "is not an ISO-8601 duration such as 'PT30M', 'P1D' or 'P1DT12H' (years and months are refused)"
    assert _boot_problems([f]) == [
        f'handler nb:h, step 1/on_true/0 (compute "x"): {msg_duplicate_step("x")}',
        f"workflow nb:wf, step item/do/choose/on_true/@wait (workflow.wait): 'soon' {duration}",
        f"workflow nb:wf, step @wait (workflow.wait): 'later' {duration}",
    ]


def test_features_that_are_no_list_of_features_are_a_boot_problem() -> None:
    """A new user's App(todo) (no brackets) and App([add_task]) (the handler for its feature)
    raised TypeError "'Feature' object is not iterable" and AttributeError "'WriteHandler'
    object has no attribute 'handlers'" from inside the App."""
    f = Feature("todo")
    h = f.write_handler("add", f.pipeline(P).return_(lambda c: ok(1)))
    wrong: list[tuple[object, list[str]]] = [
        (f, ["features must be a list of Feature objects, not one Feature: App([todo], ...) with the brackets"]),
        ("todo", ["features must be a list of Feature objects, not str"]),
        (
            [h, f, None],
            [
                "features[0] is a WriteHandler, not a Feature; pass its feature, 'todo', instead",
                "features[2] is a NoneType, not a Feature",
            ],
        ),
    ]
    for features, problems in wrong:
        with pytest.raises(BootError) as raised:
            App(features, database_url="sqlite://")  # type: ignore[arg-type]
        assert raised.value.problems == problems


def test_features_given_as_a_generator_are_all_registered() -> None:
    """``App(f for f in ...)``: the checks iterated the generator first, so the App was
    built with no feature and every dispatch was ``not_found``."""
    f = Feature("todo")
    h = f.write_handler("add", f.pipeline(P).return_(lambda c: ok(1)))
    app = App((x for x in [f]), database_url="sqlite://")  # type: ignore[arg-type]
    assert app.features == (f,)
    app.create_all()
    assert app.dispatch(h, P(n=1), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset())) == ok(1)
