import uuid
from datetime import UTC, datetime, timedelta

import attrs
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, manual, ok


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

class Account(Entity):
    __tablename__ = "wfsmoke_account"
    email: Mapped[str]

def test_wf(db_url):
    f = Feature("onb", requires=["mail.send"])
    f.entity(Account)
    f.event(Verified)
    f.event(SignedUp)
    t = [datetime(2026, 1, 1, tzinfo=UTC)]
    attempts = []
    def flaky(c):
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("flaky")
        return "ok"
    wf = f.workflow("welcome", trigger=manual(SignedUp), pipeline=f.workflow_pipeline(SignedUp)
        .compute("before", lambda c: c.payload.email.upper())
        .wait(timedelta(hours=1))
        .branch(when=lambda c: True, on_true=lambda b: b.wait("PT1H").compute("in_arm", lambda c: c.steps["before"] + "!"))
        .for_each("n", over=lambda c: [1, 2, 3], do=lambda b: b.wait("PT1M").compute("last_n", lambda c: c.scope["n"]))
        .wait_for_event("verified", Verified, key=lambda c: c.payload.user_id, event_key=lambda e: e.user_id, timeout="P1D")
        .retry(times=3, base_delay=timedelta(seconds=10), do=lambda b: b.compute("flaky", flaky))
        .send_mail(to=lambda c: c.payload.email, subject="hi", body=lambda c: c.steps["in_arm"] or ""))
    create = f.write_handler("acc:create", f.pipeline(Verify).create("acc", Account, data=lambda c: Account(email="x")).append_event(Account, id=lambda c: c.steps["acc"].id, event=lambda c: Verified(c.payload.user_id)).return_(lambda c: ok(1)))
    app = App([f], database_url=db_url, clock=lambda: t[0])
    app.create_all()
    u = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    uid = uuid.uuid4()
    rid = app.start_workflow(wf, SignedUp(uid, "a@b.c"), user=u)
    info = app.get_run(rid)
    assert info.status == "suspended" and info.path == "1" and info.steps["before"] == "A@B.C"
    t[0] += timedelta(hours=1)
    assert info.path == "2/on_true/0"
    t[0] += timedelta(hours=1); app.run_worker(once=True); info = app.get_run(rid)
    assert info.path == "3/do/#0/0" and info.steps["in_arm"] == "A@B.C!"
    for k in range(3):
        t[0] += timedelta(minutes=1); app.run_worker(once=True); info = app.get_run(rid)
    assert info.path == "4" and info.steps["last_n"] == 3
    # a non-matching event then a matching one
    assert app.dispatch(create, Verify(uuid.uuid4()), user=u).data == 1
    app.run_worker(once=True); assert app.get_run(rid).path == "4"
    assert app.dispatch(create, Verify(uid), user=u).data == 1
    print(info)
    assert info.path == "5/#2" and info.steps["verified"] == Verified(uid)
    t[0] += timedelta(seconds=10); app.run_worker(once=True); info = app.get_run(rid)
    assert info.path == "5/#3"
    t[0] += timedelta(seconds=20)
    assert info.status == "completed" and info.steps["flaky"] == "ok"
    assert [o.kind for o in app.outbox()] == ["mail"]
    app.dispose()
