"""``app.outbox(status=...)``: the database picks the rows, so listing the pending and dead
deliveries (what ``kumiko-typed outbox`` shows) reads none of the sent rows, which stay
until deleted.  Both databases; counted as rows read at n and 4n sent rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from _sql_log import rows_read

from kumiko_typed import App, Feature
from kumiko_typed._tables import outbox as outbox_table

T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


def _rows(status: str, count: int, start: int) -> list[dict[str, Any]]:
    return [
        {
            "id": uuid.uuid4(),
            "kind": "webhook",
            "message": {"url": f"https://example.com/{start + i}", "body": {}},
            "status": status,
            "attempts": 1,
            "max_attempts": 3,
            "backoff": "exponential",
            "base_delay_seconds": 10.0,
            "next_attempt_at": None if status == "sent" else T0,
            "last_error": "refused" if status == "dead" else None,
            "created_at": T0 + timedelta(seconds=start + i),
            "sent_at": T0 if status == "sent" else None,
            "handler": "lst:send",
            "tenant_id": uuid.UUID(int=1),
            "correlation_id": None,
        }
        for i in range(count)
    ]


def test_listing_by_status_reads_no_sent_rows(app_on: Callable[..., App]) -> None:
    app = app_on([Feature("lst")])

    def unsent_after(sent: int, start: int) -> tuple[list[str], int]:
        with app.engine.begin() as conn:
            conn.execute(sa.insert(outbox_table), _rows("sent", sent, start))
            unsent = _rows("pending", 1, start + sent) + _rows("dead", 1, start + sent + 1)
            conn.execute(sa.insert(outbox_table), unsent)
        with rows_read(app.engine, "kumiko_outbox") as read:
            listed = app.outbox(status=("pending", "dead"))
        return [i.status for i in listed], read["kumiko_outbox"]

    assert unsent_after(10, 0) == (["pending", "dead"], 2)
    assert unsent_after(40, 100) == (["pending", "dead"] * 2, 4)
    assert [i.status for i in app.outbox(status="dead")] == ["dead", "dead"]
    assert len(app.outbox()) == 54


@pytest.mark.parametrize(
    ("status", "error"),
    [("delivered", ValueError), ((), ValueError), (3, TypeError), (["sent", None], TypeError)],
)
def test_an_unknown_status_is_refused(make_app: Callable[..., App], status: object, error: type[Exception]) -> None:
    app = make_app([Feature("lst")])
    with pytest.raises(error, match="status"):
        app.outbox(status=status)  # type: ignore[arg-type]
