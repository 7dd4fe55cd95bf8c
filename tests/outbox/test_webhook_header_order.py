"""A webhook's headers go out in the order the step gave them, from both databases.

PostgreSQL's ``jsonb`` sorts an object's keys (shorter first, then by bytes), SQLite's JSON
text keeps them as written: before, ``{"X-Zeta": .., "X-A": .., "X-Mid": ..}`` went out in
that order from SQLite and as ``X-A, X-Mid, X-Zeta`` from PostgreSQL.  The row now keeps
their order beside them (``header_order``, a list, which ``jsonb`` keeps); a row written
before is sent with its headers, in the order its column gives them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import sqlalchemy as sa
from _receiver import Receiver
from _support import ok_data

from kumiko_typed import App, Feature, User, ok
from kumiko_typed._tables import outbox


@attrs.frozen
class Hook:
    url: str


GIVEN = {"X-Zeta": "1", "X-A": "2", "X-Mid": "3", "x-b": "4"}

f = Feature("hord", requires=["webhook.send"])
hook = f.write_handler(
    "hook",
    f.pipeline(Hook)
    .send_webhook(url=lambda c: c.payload.url, headers=lambda c: dict(GIVEN), body={"n": 1})
    .return_(lambda c: ok(None)),
)


def _sent(receiver: Receiver) -> list[list[str]]:
    return [[name for name, _ in r.raw_headers if name.lower().startswith("x-")] for r in receiver.requests]


def test_webhook_headers_go_out_in_the_order_given(app_on: Callable[..., App], user: User, receiver: Receiver) -> None:
    app = app_on([f])
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    app.run_worker(once=True)
    assert _sent(receiver) == [list(GIVEN)]
    assert [dict((k, v) for k, v in r.raw_headers if k.lower().startswith("x-")) for r in receiver.requests] == [GIVEN]


def test_a_row_written_before_the_order_was_kept_is_sent_with_its_headers(
    app_on: Callable[..., App], user: User, receiver: Receiver
) -> None:
    app = app_on([f])
    ok_data(app.dispatch(hook, Hook(receiver.url()), user=user))
    with app.engine.begin() as conn:  # as an earlier release wrote it
        message: dict[str, Any] = conn.execute(sa.select(outbox.c.message)).scalar_one()
        del message["header_order"]
        conn.execute(sa.update(outbox).values(message=message))
    app.run_worker(once=True)
    (sent,) = _sent(receiver)
    assert sorted(sent) == sorted(GIVEN)
    assert [i.status for i in app.outbox()] == ["sent"]
