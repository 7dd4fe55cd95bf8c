"""A webhook posts the same bytes on both databases: its body's JSON text as the step's
value gives it (keys in the order written, ``1e20`` as ``1e+20``), which is what httpx's
``json=`` writes.  PostgreSQL keeps the outbox message as ``jsonb``, which sorts an
object's keys (shorter first) and writes a whole float as an integer, so the body was
posted in another order and spelling there.  A real receiver on 127.0.0.1."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _support import ok_data

from kumiko_typed import App, Feature, User, ok
from kumiko_typed._tables import outbox

AppOn = Callable[..., App]
BODY: dict[str, Any] = {
    "zeta": 1,
    "b": {"yy": 2, "x": 3},
    "big": 1e20,
    "neg": -0.0,
    "text": "é ✓",
    "list": [{"d": 4, "c": 5}],
}
WRITTEN = json.dumps(BODY, ensure_ascii=False, separators=(",", ":")).encode()


@attrs.frozen
class Post:
    url: str
    body: bool = True
    content_type: str | None = None


f = Feature("wh_bytes", requires=["webhook.send"])
post = f.write_handler(
    "post",
    f.pipeline(Post)
    .send_webhook(
        url=lambda c: c.payload.url,
        body=lambda c: BODY if c.payload.body else None,
        headers=lambda c: {} if c.payload.content_type is None else {"Content-Type": c.payload.content_type},
    )
    .return_(lambda c: ok(None)),
)


def _delivered(app: App, receiver: Receiver, payload: Post) -> Any:
    ok_data(app.dispatch(post, payload, user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))
    assert app.run_worker(once=True)["sent"] == 1
    (seen,) = receiver.requests
    return seen


def test_the_body_is_posted_as_written(app_on: AppOn, receiver: Receiver) -> None:
    seen = _delivered(app_on([f]), receiver, Post(receiver.url()))
    assert seen.body == WRITTEN
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["content-length"] == str(len(WRITTEN))


def test_the_steps_content_type_wins(app_on: AppOn, receiver: Receiver) -> None:
    seen = _delivered(app_on([f]), receiver, Post(receiver.url(), content_type="application/vnd.x+json"))
    assert (seen.body, seen.all("content-type")) == (WRITTEN, ["application/vnd.x+json"])


def test_no_body_posts_none(app_on: AppOn, receiver: Receiver) -> None:
    seen = _delivered(app_on([f]), receiver, Post(receiver.url(), body=False))
    assert seen.body == b"" and "content-type" not in seen.headers


@pytest.mark.parametrize("body", [BODY, None])
def test_a_row_written_before_keeps_being_delivered(app_on: AppOn, receiver: Receiver, body: Any) -> None:
    """A row stored with the body as a document (an earlier release) posts that document."""
    app = app_on([f])
    ok_data(app.dispatch(post, Post(receiver.url()), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4())))
    with app.engine.begin() as conn:
        message = dict(conn.execute(sa.select(outbox.c.message)).scalar_one())
        del message["text"]
        conn.execute(sa.update(outbox).values(message={**message, "body": body}))
    assert app.run_worker(once=True)["sent"] == 1
    (seen,) = receiver.requests
    assert (json.loads(seen.body) if seen.body else None) == body
