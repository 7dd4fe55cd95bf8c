"""The ASGI app as the write entry point of the event store, over real HTTP on SQLite and
PostgreSQL: requests racing to append with one expected version get one 200 and 409s
(503 only past a busy database's wait), never a 500, and leave one event; a request whose
projector raises is a JSON 500 naming the projector and an error id, without the
exception's text, and writes nothing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import httpx
import pytest
import sqlalchemy as sa
from _asgi_server import Served
from sqlalchemy.orm import Mapped, mapped_column
from starlette.requests import Request

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._tables import events
from kumiko_typed.contrib.asgi import asgi_app

RACERS = 6
ANN = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


class HaTally(Entity):
    __tablename__ = "ha_tally"
    total: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Counted:
    n: int


@attrs.frozen
class Begin:
    pass


@attrs.frozen
class Count:
    id: uuid.UUID
    n: int
    version: int


ha = Feature("ha")
ha.entity(HaTally)
ha.event(Counted, name="counted")


@ha.projector(HaTally, Counted)
def _counted(row: HaTally, event: Counted) -> None:
    if event.n < 0:
        raise RuntimeError("password=hunter2")
    row.total += event.n


ha.write_handler(
    "begin", ha.pipeline(Begin).create("t", HaTally, data=lambda c: HaTally()).return_(lambda c: ok(c.steps["t"].id))
)
ha.write_handler(
    "count",
    ha.pipeline(Count)
    .append_event(
        HaTally, id=lambda c: c.payload.id, event=lambda c: Counted(c.payload.n), version=lambda c: c.payload.version
    )
    .return_(lambda c: ok(c.payload.n)),
)


def _ann(request: Request) -> User | None:
    return ANN


@pytest.fixture
def served(app_on: Callable[..., App]) -> Iterator[tuple[App, Served]]:
    app = app_on([ha])
    server = Served(asgi_app(app, user=_ann))
    yield app, server
    server.close()


def _versions(app: App) -> list[int]:
    with app.engine.connect() as conn:
        return list(conn.scalars(sa.select(events.c.stream_version).order_by(events.c.stream_version)))


def test_requests_racing_with_one_version_get_one_200_and_409s(served: tuple[App, Served]) -> None:
    app, server = served
    tally = server.http.post("/ha/begin", json={}).json()["data"]
    gate = threading.Barrier(RACERS)
    answers: list[httpx.Response | None] = [None] * RACERS

    def post(i: int) -> None:
        with httpx.Client(base_url=server.base, timeout=60) as own:  # a connection each
            gate.wait(timeout=60)
            answers[i] = own.post("/ha/count", json={"id": tally, "n": 1, "version": 1})

    threads = [threading.Thread(target=post, args=(i,)) for i in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a request hung"
    statuses = sorted(a.status_code for a in answers if a is not None)
    assert len(statuses) == RACERS and statuses.count(200) == 1, statuses
    assert set(statuses) <= {200, 409, 503}, statuses
    for answer in answers:
        assert answer is not None
        if answer.status_code == 409:
            body: dict[str, Any] = answer.json()
            assert body["code"] == "version_conflict"
            assert body["details"] == {"entity_id": tally, "expected_version": 1, "current_version": 2}
    assert _versions(app) == [1, 2]


def test_a_projector_raising_is_a_json_500_without_its_text_and_writes_nothing(
    served: tuple[App, Served], caplog: pytest.LogCaptureFixture
) -> None:
    app, server = served
    tally = server.http.post("/ha/begin", json={}).json()["data"]
    answer = server.http.post("/ha/count", json={"id": tally, "n": -1, "version": 1})
    assert answer.status_code == 500
    body = answer.json()
    assert body["code"] == "internal_error" and "_counted" in body["message"]
    assert "hunter2" not in answer.text and "Traceback" not in answer.text
    assert body["details"]["error_id"] in body["message"]
    assert "hunter2" in caplog.text  # kept for the operator, under the error id
    assert _versions(app) == [1]
    assert server.http.post("/ha/count", json={"id": tally, "n": 2, "version": 1}).json() == {"data": 2}
