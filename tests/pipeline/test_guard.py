"""``guard`` (issue 14.1): a false condition ends the whole handler with ``otherwise``'s
Failure — rolled back — from the top level, a branch arm or a loop body, and fails a
workflow run with that code; a true one lets the pipeline go on.  On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, fail, manual, ok

AppOn = Callable[..., App]


class GrdItem(Entity):
    __tablename__ = "grd_item"
    label: Mapped[str]


@attrs.frozen
class Order:
    labels: tuple[str, ...]
    express: bool = False


def _refuse(label: str) -> Callable[[Any], Failure]:
    return lambda c: fail("unprocessable", f"{label}: {list(c.payload.labels)} has a blocked label")


def _allowed(c: Any) -> bool:
    return "blocked" not in c.payload.labels


def _feature() -> Feature[Any]:
    f = Feature("grd")
    f.entity(GrdItem)
    return f


f = _feature()
top = f.write_handler(
    "top",
    f.pipeline(Order)
    .create("first", GrdItem, data=lambda c: GrdItem(label="first"))
    .guard(_allowed, otherwise=_refuse("top"))
    .compute("after", lambda c: "ran")
    .return_(lambda c: ok(c.steps["after"])),
)
in_arm = f.write_handler(
    "in_arm",
    f.pipeline(Order)
    .create("first", GrdItem, data=lambda c: GrdItem(label="first"))
    .branch(
        when=lambda c: c.payload.express,
        on_true=lambda b: b.compute("arm", lambda c: "on_true").guard(_allowed, otherwise=_refuse("arm")),
    )
    .create("second", GrdItem, data=lambda c: GrdItem(label="second"))
    .return_(lambda c: ok(c.steps["arm"])),
)
in_loop = f.write_handler(
    "in_loop",
    f.pipeline(Order)
    .for_each(
        "label",
        over=lambda c: c.payload.labels,
        do=lambda b: b.guard(lambda c: c.scope["label"] != "blocked", otherwise=_refuse("loop")).create(
            "item", GrdItem, data=lambda c: GrdItem(label=c.scope["label"])
        ),
    )
    .return_(lambda c: ok(len(c.payload.labels))),
)
not_a_failure = f.write_handler(
    "not_a_failure",
    f.pipeline(Order)
    .guard(lambda c: False, otherwise=lambda c: "no")  # type: ignore[arg-type, return-value]
    .return_(lambda c: ok(None)),
)
flow = f.workflow(
    "flow",
    trigger=manual(Order),
    pipeline=f.workflow_pipeline(Order)
    .create("first", GrdItem, data=lambda c: GrdItem(label="first"))
    .for_each(
        "label",
        over=lambda c: c.payload.labels,
        do=lambda b: b.branch(when=lambda c: True, on_true=lambda b: b.guard(_allowed, otherwise=_refuse("workflow"))),
    )
    .create("last", GrdItem, data=lambda c: GrdItem(label="last")),
)

retried = f.workflow(
    "retried",
    trigger=manual(Order),
    pipeline=f.workflow_pipeline(Order).retry(
        times=3,
        do=lambda b: b.create("tried", GrdItem, data=lambda c: GrdItem(label="tried")).guard(
            _allowed, otherwise=_refuse("retry")
        ),
    ),
)


def _labels(app: App) -> list[str]:
    table = GrdItem.__table__
    with app.engine.connect() as conn:
        return sorted(conn.scalars(sa.select(table.c.label)))


def _events(app: App) -> int:
    from kumiko_typed._tables import events

    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(events)) or 0)


BLOCKED = Order(("ok", "blocked", "later"), express=True)
FINE = Order(("ok", "later"), express=True)


@pytest.mark.parametrize(
    ("handler", "where"), [(top, "top"), (in_arm, "arm"), (in_loop, "loop")], ids=["top", "arm", "loop"]
)
def test_a_false_guard_ends_the_handler_with_its_failure_and_rolls_back(
    app_on: AppOn, user: User, handler: Any, where: str
) -> None:
    app = app_on([f])
    result = app.dispatch(handler, BLOCKED, user=user)
    assert result == Failure("unprocessable", f"{where}: ['ok', 'blocked', 'later'] has a blocked label")
    # The create before the guard (and any earlier loop iteration's) was rolled back.
    assert (_labels(app), _events(app)) == ([], 0)


def test_a_true_guard_lets_the_pipeline_go_on(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    assert app.dispatch(top, FINE, user=user) == Ok("ran")
    assert app.dispatch(in_arm, FINE, user=user) == Ok("on_true")
    assert app.dispatch(in_loop, FINE, user=user) == Ok(2)
    assert _labels(app) == ["first", "first", "later", "ok", "second"]
    assert _events(app) == 5


def test_a_guard_in_an_arm_not_taken_does_not_run(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    assert app.dispatch(in_arm, attrs.evolve(BLOCKED, express=False), user=user) == Ok(None)
    assert _labels(app) == ["first", "second"]


def test_otherwise_giving_no_failure_is_an_internal_error_naming_the_step(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    result = app.dispatch(not_a_failure, FINE, user=user)
    assert isinstance(result, Failure)
    assert result.code == "internal_error"
    assert result.message.startswith("step 0 guard raised StepRefused: guard's otherwise= must give fail(...), not str")
    assert isinstance(result.details, dict)
    assert (result.details["path"], result.details["step"]) == ("0", "guard")


def test_a_false_guard_fails_the_workflow_run_with_its_code(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    failed = app.start_workflow(flow, BLOCKED, user=user)
    info = app.get_run(failed)
    assert info is not None
    assert info.status == "failed"
    message = "workflow: ['ok', 'blocked', 'later'] has a blocked label"
    assert info.error == {"code": "unprocessable", "message": message}
    assert _labels(app) == []  # the segment's create went with it

    done = app.start_workflow(flow, FINE, user=user)
    info = app.get_run(done)
    assert info is not None
    assert info.status == "completed"
    assert _labels(app) == ["first", "last"]


def test_guard_is_recorded_with_no_step_key() -> None:
    steps = f.pipeline(Order).guard(_allowed, otherwise=_refuse("x")).steps
    assert [s.kind for s in steps] == ["guard"]
    assert steps[0].step_name is None


def test_a_false_guard_in_a_retry_body_fails_the_run_at_once_instead_of_retrying(app_on: AppOn, user: User) -> None:
    app = app_on([f])
    run_id = app.start_workflow(retried, BLOCKED, user=user)
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.wake_at) == ("failed", None)
    assert info.error == {"code": "unprocessable", "message": "retry: ['ok', 'blocked', 'later'] has a blocked label"}
    assert _labels(app) == []
