"""``app.outbox(status=...)``: the database picks the rows, so listing the pending and dead
deliveries (what ``kumiko-typed outbox`` shows) reads none of the sent rows, which stay
until deleted.  Both databases; counted as rows read at n and 4n sent rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from _sql_log import rows_read
from _support import ok_data

from kumiko_typed import App, Feature, User, ok
from kumiko_typed._tables import outbox as outbox_table
from kumiko_typed.testing import FakeClock

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


def _insert(app: App, rows: list[dict[str, Any]]) -> list[uuid.UUID]:
    with app.engine.begin() as conn:
        conn.execute(sa.insert(outbox_table), rows)
    return [r["id"] for r in rows]


def _pages(app: App, limit: int, **status: Any) -> list[list[uuid.UUID]]:
    pages, after = [], None
    while page := app.outbox(limit=limit, after=after, **status):
        pages.append([i.id for i in page])
        after = page[-1].id
    return pages


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_paging_lists_every_row_once_in_order_even_queued_at_one_instant(
    app_on: Callable[..., App], limit: int
) -> None:
    """Rows queued in one transaction share their ``created_at``: the id breaks the tie,
    so a page's edge neither skips nor repeats one.  Before, ``outbox()`` had no page: a
    listing of an outbox that keeps its sent rows read every one of them."""
    app = app_on([Feature("lst")])
    same = [{**r, "created_at": T0} for r in _rows("sent", 4, 0)]
    ids = _insert(app, same + _rows("dead", 2, 10) + _rows("sent", 1, 20))
    listed = [i.id for i in app.outbox()]
    assert listed == sorted(ids[:4], key=lambda i: i.hex) + ids[4:]
    pages = _pages(app, limit)
    assert [i for page in pages for i in page] == listed
    assert all(len(page) == limit for page in pages[:-1])


def test_a_page_of_a_status_goes_on_past_rows_of_others(app_on: Callable[..., App]) -> None:
    app = app_on([Feature("lst")])
    rows = [r for k in range(3) for r in _rows("sent", 2, 10 * k) + _rows("dead", 1, 10 * k + 5)]
    ids = _insert(app, rows)
    dead = [i for i, r in zip(ids, rows, strict=True) if r["status"] == "dead"]
    assert _pages(app, 2, status="dead") == [dead[:2], dead[2:]]
    # A cursor row of another status (or one that left the filter) still marks the place.
    assert [i.id for i in app.outbox(status="dead", after=ids[0])] == dead


def test_rows_queued_between_pages_come_last_and_shift_nothing(app_on: Callable[..., App]) -> None:
    app = app_on([Feature("lst")])
    ids = _insert(app, _rows("pending", 4, 0))
    first = app.outbox(limit=2)
    later = _insert(app, _rows("pending", 2, 100))
    rest = app.outbox(limit=10, after=first[-1].id)
    assert [i.id for i in first + rest] == ids + later


def test_a_page_is_cut_by_the_database(app_on: Callable[..., App], db_url: str) -> None:
    """The limit and the cursor are in the SELECT: a page of 3 hands 3 rows to Python at
    40 rows and at 160; on SQLite the plan walks ``kumiko_outbox_listed`` rather than
    sorting the table."""
    app = app_on([Feature("lst")])

    def read_of_a_page(count: int, start: int) -> int:
        ids = _insert(app, _rows("sent", count, start))
        with rows_read(app.engine, "kumiko_outbox") as read:
            assert len(app.outbox(limit=3, after=ids[count // 2])) == 3
        return read["kumiko_outbox"]

    assert read_of_a_page(40, 0) == read_of_a_page(120, 1000) == 1 + 3  # the cursor's row, the page
    indexes = {i["name"]: i["column_names"] for i in sa.inspect(app.engine).get_indexes("kumiko_outbox")}
    assert indexes["kumiko_outbox_listed"] == ["created_at", "id"]
    if db_url.startswith("sqlite"):  # PostgreSQL's planner picks by the table's statistics
        c = outbox_table.c
        page = sa.select(outbox_table).where(c.created_at >= T0, sa.or_(c.created_at > T0, c.id > uuid.UUID(int=1)))
        compiled = page.order_by(c.created_at, c.id).limit(3).compile(app.engine)
        unbound = tuple(None for _ in compiled.positiontup or ())  # the plan does not read the values
        with app.engine.connect() as conn:
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(compiled), unbound))
        assert "kumiko_outbox_listed" in plan and "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"limit": 0}, ValueError, "limit must be a positive int, not 0"),
        ({"limit": True}, TypeError, "limit must be an int or None, not bool"),
        ({"limit": "5"}, TypeError, "limit must be an int or None, not str"),
        ({"after": "0b6c…"}, TypeError, r"after must be a uuid.UUID \(an outbox row's id\), not str"),
        ({"after": uuid.UUID(int=7)}, LookupError, "after: no outbox row 00000000-0000-0000-0000-000000000007"),
    ],
)
def test_bad_page_arguments_are_a_sentence_naming_the_fix(
    make_app: Callable[..., App], kwargs: dict[str, Any], error: type[Exception], text: str
) -> None:
    app = make_app([Feature("lst")])
    with pytest.raises(error, match=text):
        app.outbox(**kwargs)


def test_an_empty_outbox_is_an_empty_page(app_on: Callable[..., App]) -> None:
    app = app_on([Feature("lst")])
    assert app.outbox(limit=5) == [] and app.outbox(status="dead", limit=1) == []


@attrs.frozen
class Hook:
    url: str


hooks = Feature("lst_order", requires=["webhook.send"])
queue_hook = hooks.write_handler(
    "hook", hooks.pipeline(Hook).send_webhook(url=lambda c: c.payload.url).return_(lambda c: ok(None))
)


def test_rows_queued_while_the_clock_stands_still_are_listed_and_delivered_as_queued(
    app_on: Callable[..., App], user: User, receiver: Receiver
) -> None:
    """A test's clock standing still gives every row one ``created_at`` and one due time.
    Their ids, which break the tie, are made in order (UUIDv7), so a listing, its pages and
    a worker's claims take them in the order they were queued.  Before, the ids were
    random: the listing's order was no one's, and the claims' was the database's."""
    app = app_on([hooks], clock=FakeClock(T0), delivery_concurrency=1)
    paths = [f"/h{i}" for i in range(12)]
    for path in paths:
        ok_data(app.dispatch(queue_hook, Hook(receiver.url(path)), user=user))

    assert [i.target.rpartition("/")[2] for i in app.outbox()] == [p[1:] for p in paths]
    assert [i for page in _pages(app, 5) for i in page] == [i.id for i in app.outbox()]
    assert app.run_worker(once=True)["sent"] == 12
    assert [r.path for r in receiver.requests] == paths
