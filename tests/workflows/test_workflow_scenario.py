"""One workflow through every kind of suspension, on both databases: values computed
before a wait are readable after it; waits inside a branch arm and a for_each body
resume in place; a non-matching event leaves the run waiting, a matching one wakes
it with the event; a retry succeeds on attempt 3 with attempts 1-2 rolled back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import attrs
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok


@attrs.frozen
class SignedUp:
    user_id: uuid.UUID
    email: str


@attrs.frozen
class Verified:
    user_id: uuid.UUID


@attrs.frozen
class Verify:
    user_id: uuid.UUID


class WfAccount(Entity):
    __tablename__ = "wfscenario_account"
    email: Mapped[str]


def _feature(attempts: list[int]) -> tuple[Feature[str], object, object]:
    f = Feature("onb", requires=["mail.send"])
    f.entity(WfAccount)
    f.event(Verified)

    def flaky(c: object) -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError(f"flaky attempt {len(attempts)}")
        return "ok"

    pipeline = (
        f.workflow_pipeline(SignedUp)
        .compute("before", lambda c: c.payload.email.upper())
        .wait(timedelta(hours=1))
        .branch(
            when=lambda c: True,
            on_true=lambda b: b.wait("PT1H").compute("in_arm", lambda c: c.steps["before"] + "!"),
        )
        .for_each("n", over=lambda c: [1, 2, 3], do=lambda b: b.wait("PT1M").compute("last_n", lambda c: c.scope["n"]))
        .wait_for_event(
            "verified", Verified, key=lambda c: c.payload.user_id, event_key=lambda e: e.user_id, timeout="P1D"
        )
        .retry(times=3, base_delay=timedelta(seconds=10), do=lambda b: b.compute("flaky", flaky))
        .send_mail(to=lambda c: c.payload.email, subject="hi", body=lambda c: c.steps["in_arm"] or "")
    )
    workflow = f.workflow("welcome", trigger=manual(SignedUp), pipeline=pipeline)
    verify = f.write_handler(
        "account:verify",
        f.pipeline(Verify)
        .create("account", WfAccount, data=lambda c: WfAccount(email="x@example.com"))
        .append_event(WfAccount, id=lambda c: c.steps["account"].id, event=lambda c: Verified(c.payload.user_id))
        .return_(lambda c: ok(1)),
    )
    return f, workflow, verify


def test_every_suspension_resumes_in_place(db_url: str) -> None:
    attempts: list[int] = []
    feature, workflow, verify = _feature(attempts)
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    app = App([feature], database_url=db_url, clock=lambda: now[0])
    app.create_all()
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    user_id = uuid.uuid4()

    def after(delta: timedelta) -> None:
        now[0] += delta
        app.run_worker(once=True)

    run_id = app.start_workflow(workflow, SignedUp(user_id, "a@b.c"), user=user)  # type: ignore[arg-type]
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.path, info.steps["before"]) == ("suspended", "@wait", "A@B.C")

    app.run_worker(once=True)  # not due yet
    assert app.get_run(run_id).path == "@wait"  # type: ignore[union-attr]

    after(timedelta(hours=1))
    assert app.get_run(run_id).path == "@branch/on_true/@wait"  # type: ignore[union-attr]

    after(timedelta(hours=1))
    info = app.get_run(run_id)
    assert info is not None
    assert (info.path, info.steps["in_arm"]) == ("n/do/#0/@wait", "A@B.C!")

    for expected in ("n/do/#1/@wait", "n/do/#2/@wait", "verified"):
        after(timedelta(minutes=1))
        assert app.get_run(run_id).path == expected  # type: ignore[union-attr]
    assert app.get_run(run_id).steps["last_n"] == 3  # type: ignore[union-attr]

    assert app.dispatch(verify, Verify(uuid.uuid4()), user=user) == Ok(1)  # type: ignore[arg-type]
    app.run_worker(once=True)
    assert app.get_run(run_id).path == "verified"  # type: ignore[union-attr]  # another user's event

    assert app.dispatch(verify, Verify(user_id), user=user) == Ok(1)  # type: ignore[arg-type]
    app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None
    assert (info.path, info.steps["verified"]) == ("@retry/#2", Verified(user_id))
    assert "flaky" not in info.steps or info.steps["flaky"] is None  # attempt 1 left no value

    after(timedelta(seconds=9))
    assert app.get_run(run_id).path == "@retry/#2"  # type: ignore[union-attr]  # backoff not over
    after(timedelta(seconds=1))
    assert app.get_run(run_id).path == "@retry/#3"  # type: ignore[union-attr]  # 10 s * 2**1 next

    after(timedelta(seconds=20))
    info = app.get_run(run_id)
    assert info is not None
    assert (info.status, info.steps["flaky"], len(attempts)) == ("completed", "ok", 3)
    assert [item.kind for item in app.outbox()] == ["mail"]
    app.dispose()
