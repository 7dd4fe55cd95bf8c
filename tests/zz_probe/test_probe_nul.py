import uuid
from typing import Any
import attrs
import pytest
from kumiko_typed import App, Feature, User, ok

@attrs.frozen
class P:
    text: str

@pytest.mark.parametrize("text", ["a\x00b", "a\ud800b", "a\udfffb"])
@pytest.mark.parametrize("where", ["body", "html", "webhook", "webhook_header", "reply"])
def test_nul(db_url: str, text: str, where: str, receiver: Any) -> None:
    f = Feature("nul", requires=["mail.send", "webhook.send"])
    p = f.pipeline(P)
    if where == "body":
        p2 = p.send_mail(to=lambda c: ["a@example.com"], subject=lambda c: "s", body=lambda c: c.payload.text)
    elif where == "html":
        p2 = p.send_mail(to=lambda c: ["a@example.com"], subject=lambda c: "s", body=lambda c: "b", html=lambda c: c.payload.text)
    elif where == "webhook":
        p2 = p.send_webhook(url=f"{receiver.base}/x", body=lambda c: {"t": c.payload.text})
    elif where == "webhook_header":
        p2 = p.send_webhook(url=f"{receiver.base}/x", body=lambda c: {"t": 1}, headers=lambda c: {"X-A": c.payload.text})
    else:
        p2 = p.send_webhook(url=lambda c: f"{receiver.base}/x?{c.payload.text}", body=lambda c: {"t": 1})
    h = f.write_handler("h", p2.return_(lambda c: ok(1)))
    from kumiko_typed.testing import MemoryMail
    app = App([f], database_url=db_url, mail=MemoryMail())
    app.create_all()
    u = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    r = app.dispatch(h, P(text), user=u)
    print("\nRESULT", db_url[:8], where, repr(text), r if not hasattr(r, "message") else (r.code, r.message[:200], str(r.details)[:200]))
    if hasattr(r, "data"):
        print("WORKER", app.run_worker(once=True), [ (i.status, i.last_error) for i in app.outbox()])
    app.dispose()
