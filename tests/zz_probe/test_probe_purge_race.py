import threading, uuid, time
from datetime import UTC, datetime, timedelta
from typing import Any
import attrs
import sqlalchemy as sa
from kumiko_typed import App, Feature, User, ok
from kumiko_typed.testing import FakeClock

@attrs.frozen
class P:
    n: int

def test_purge_racing_a_takeover(db_url: str) -> None:
    gate = threading.Event(); inside = threading.Event(); runs = []
    f = Feature("pr")
    def body(c: Any) -> int:
        runs.append(1)
        if len(runs) == 2:
            inside.set(); gate.wait(10)
        return len(runs)
    h = f.write_handler("h", f.pipeline(P).compute("x", body).return_(lambda c: ok(c.steps["x"])))
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    app = App([f], database_url=db_url, clock=clock, idempotency_retention=timedelta(hours=1))
    app.create_all()
    u = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    assert app.dispatch(h, P(1), user=u, idempotency_key="k").data == 1
    clock.advance(seconds=7200)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("a", app.dispatch(h, P(1), user=u, idempotency_key="k")))
    t.start(); assert inside.wait(10)
    purged = {}
    p = threading.Thread(target=lambda: purged.setdefault("n", app.purge_idempotency_keys()))
    p.start(); time.sleep(1.0)
    gate.set(); t.join(10); p.join(20)
    print(out, purged)
    again = app.dispatch(h, P(1), user=u, idempotency_key="k")
    print("again", again, "runs", len(runs))
    assert again.data == 2 and len(runs) == 2
    app.dispose()
