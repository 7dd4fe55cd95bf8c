"""asyncio.CancelledError in the HTTP adapter, against uvicorn on 127.0.0.1: one that the
application's code raised (a user dependency, a step) is that code's exception, the JSON
500 ``internal_error`` with an error id, and nothing is written; before, it escaped the
adapter as Starlette's plain-text 500.  A real cancellation of the task serving the
request (the server shutting down, a timeout middleware) still goes on up, unanswered."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import pytest
import sqlalchemy as sa
from _asgi_server import Served
from sqlalchemy.orm import Mapped, mapped_column
from starlette.requests import Request

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed.contrib.asgi import asgi_app

ANN = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


class CxNote(Entity):
    __tablename__ = "cx_note"
    text: Mapped[str] = mapped_column(default="")


@attrs.frozen
class Note:
    text: str


def _raise_cancelled(text: str) -> None:
    if text == "cancel":
        raise asyncio.CancelledError  # as code that awaited a future someone else cancelled


cx = Feature("cx")
cx.entity(CxNote)
cx.write_handler(
    "note",
    cx.pipeline(Note)
    .create("n", CxNote, data=lambda c: CxNote(text=c.payload.text))
    .compute("check", lambda c: _raise_cancelled(c.payload.text))
    .return_(lambda c: ok(c.payload.text)),
)


def _notes(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(CxNote.__table__.c.text)))


def _internal_error(answer: Any, where: str) -> str:
    assert answer.status_code == 500 and answer.headers["content-type"] == "application/json", answer.text
    body = answer.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == "internal_error", body
    error_id: str = body["details"]["error_id"]
    assert body["message"] == f"{where} raised CancelledError (error id {error_id})"
    return error_id


async def _async_cancelled(request: Request) -> User | None:
    raise asyncio.CancelledError


def _sync_cancelled(request: Request) -> User | None:  # in a worker thread
    raise asyncio.CancelledError


@pytest.mark.parametrize("dependency", [_async_cancelled, _sync_cancelled], ids=["async", "sync"])
def test_a_user_dependency_raising_cancelled_error_is_a_json_500(
    app_on: Callable[..., App], caplog: pytest.LogCaptureFixture, dependency: Any
) -> None:
    app = app_on([cx])
    server = Served(asgi_app(app, user=dependency))
    try:
        with caplog.at_level(logging.ERROR, logger="kumiko_typed.asgi"):
            answer = server.http.post("/cx/note", json={"text": "x"})
        error_id = _internal_error(answer, "the user dependency")
        [record] = [r for r in caplog.records if r.name == "kumiko_typed.asgi"]
        assert error_id in record.getMessage() and record.exc_info is not None
        assert _notes(app) == []
    finally:
        server.close()


def test_a_step_raising_cancelled_error_is_a_json_500_and_writes_nothing(app_on: Callable[..., App]) -> None:
    app = app_on([cx])
    server = Served(asgi_app(app, user=lambda request: ANN))
    try:
        for headers in ({}, {"Idempotency-Key": "k"}):
            answer = server.http.post("/cx/note", json={"text": "cancel"}, headers=headers)
            _internal_error(answer, 'step 1 compute "check"')
        assert _notes(app) == []
        # The thread's session was left clean: the next request writes.
        assert server.http.post("/cx/note", json={"text": "kept"}).json() == {"data": "kept"}
        assert _notes(app) == ["kept"]
    finally:
        server.close()


def test_a_real_cancellation_of_the_request_goes_on_up(app_on: Callable[..., App]) -> None:
    """The task serving the request is cancelled while the user dependency awaits, and
    while the handler runs in its thread: the adapter answers nothing and the cancellation
    reaches its caller (here a wrapper that says what it saw)."""
    step_entered, step_release = threading.Event(), threading.Event()

    def held(text: str) -> None:
        if text == "held":
            step_entered.set()
            step_release.wait(30)

    held_feature = Feature("held")
    held_feature.write_handler(
        "take", held_feature.pipeline(Note).compute("wait", lambda c: held(c.payload.text)).return_(lambda c: ok(1))
    )
    app = app_on([cx, held_feature])

    async def waiting_user(request: Request) -> User | None:
        if request.url.path == "/held/take":
            return ANN
        request.scope["entered"].set()
        await asyncio.Event().wait()  # until cancelled
        return ANN

    adapter = asgi_app(app, user=waiting_user)

    async def cancelling(scope: Any, receive: Any, send: Any) -> None:
        entered = scope["entered"] = asyncio.Event()
        answered: list[int] = []

        async def recording(message: Any) -> None:
            if message["type"] == "http.response.start":
                answered.append(message["status"])

        task = asyncio.ensure_future(adapter(scope, receive, recording))
        if scope["path"] == "/held/take":
            await anyio.to_thread.run_sync(step_entered.wait)
        else:
            await entered.wait()
        task.cancel()
        if scope["path"] == "/held/take":
            step_release.set()  # the thread ends its step; the cancellation is delivered then
        try:
            await task
            seen = b"swallowed"
        except asyncio.CancelledError:
            seen = b"cancelled"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": seen + b" %r" % answered})

    server = Served(cancelling)
    try:
        assert server.http.post("/cx/note", json={"text": "x"}).text == "cancelled []"
        assert server.http.post("/held/take", json={"text": "held"}).text == "cancelled []"
    finally:
        step_release.set()
        server.close()
