"""A projection rebuild and the appends that run while it does, on SQLite and PostgreSQL.

A rebuild used to lock ``kumiko_events`` (``SHARE``) on PostgreSQL even to verify, and any
user may rebuild their own tenant's rows: one tenant's user paused every tenant's appends.
Now a rebuild reads one snapshot and holds no writer back (a repair on SQLite still
serialises, as every SQLite writer does); a repair that would overwrite a row an append
changed meanwhile fails ``unavailable`` instead.  Each test holds the rebuild in the middle
of its replay (in a projector) while other users dispatch."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, Ok, ProjectionReport, User, ok

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
#: Long enough for any append that is not held back; the old code held them all.
_PROMPT = 10.0


class RcTicket(Entity):
    __tablename__ = "rc_ticket"
    name: Mapped[str] = mapped_column(sa.String(50))
    count: Mapped[int]


TICKETS: sa.Table = RcTicket.__table__  # type: ignore[assignment]


@attrs.frozen
class Open:
    name: str


@attrs.frozen
class Bump:
    id: uuid.UUID
    by: int


@attrs.frozen
class Bumped:
    by: int


class Hold:
    """Stops the rebuild running in ``thread`` at the first event its replay projects,
    until ``release``; every other thread's projections run through."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        if threading.current_thread() is self.thread and not self.reached.is_set():
            self.reached.set()
            self.release.wait(60)


def _app(app_on: AppOn, hold: Hold) -> tuple[App, dict[str, Any]]:
    f: Feature[Any] = Feature("rc")
    f.entity(RcTicket)
    f.event(Bumped, name="bumped")

    @f.projector(RcTicket, Bumped)
    def bumped(row: RcTicket, event: Bumped) -> None:
        row.count += event.by
        hold()

    h: dict[str, Any] = {
        "open": f.write_handler(
            "open",
            f.pipeline(Open)
            .create("t", RcTicket, data=lambda c: RcTicket(name=c.payload.name, count=0))
            .return_(lambda c: ok(c.steps["t"].id)),
        ),
        "bump": f.write_handler(
            "bump",
            f.pipeline(Bump)
            .append_event(RcTicket, id=lambda c: c.payload.id, event=lambda c: Bumped(c.payload.by))
            .return_(lambda c: ok(None)),
        ),
    }
    return app_on([f], clock=lambda: T0), h


def _counts(app: App) -> dict[uuid.UUID, int]:
    with app.engine.connect() as conn:
        return {row.id: row.count for row in conn.execute(sa.select(TICKETS.c.id, TICKETS.c.count))}


def _drift(app: App, ticket: uuid.UUID, count: int) -> None:
    with app.engine.begin() as conn:  # a row changed behind the events' back
        conn.execute(sa.update(TICKETS).where(TICKETS.c.id == ticket).values(count=count))


def _rebuild_held(app: App, hold: Hold, user: User, *, verify: bool) -> tuple[threading.Thread, list[Any]]:
    """Start ``user``'s rebuild and return once its replay is held."""
    result: list[Any] = []
    hold.thread = threading.Thread(
        target=lambda: result.append(app.rebuild_projection(RcTicket, user=user, verify=verify))
    )
    hold.thread.start()
    assert hold.reached.wait(_PROMPT), "the rebuild never reached its replay"
    return hold.thread, result


def _dispatched(app: App, calls: list[tuple[Any, Any, User]]) -> list[Ok[Any] | Failure] | None:
    """The results of ``calls`` made one after another in a thread, or None if they did
    not all end within ``_PROMPT`` (they are left to end once the rebuild does)."""
    results: list[Ok[Any] | Failure] = []
    worker = threading.Thread(target=lambda: results.extend(app.dispatch(h, p, user=u) for h, p, u in calls))
    worker.start()
    worker.join(_PROMPT)
    return None if worker.is_alive() else results


def test_a_verify_held_open_holds_back_no_append_and_reports_its_snapshot(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    hold = Hold()
    app, h = _app(app_on, hold)
    alice, bob = make_user(), make_user()
    a1 = ok_data(app.dispatch(h["open"], Open("a1"), user=alice))
    ok_data(app.dispatch(h["bump"], Bump(a1, 2), user=alice))
    b1 = ok_data(app.dispatch(h["open"], Open("b1"), user=bob))
    _drift(app, a1, 7)

    thread, result = _rebuild_held(app, hold, alice, verify=True)
    try:
        # Another tenant's appends, and the verifying user's own (a row it has yet to read).
        during = _dispatched(
            app, [(h["bump"], Bump(b1, 1), bob), (h["open"], Open("b2"), bob), (h["bump"], Bump(a1, 5), alice)]
        )
        assert thread.is_alive()  # they ended while the verify was still held
    finally:
        hold.release.set()
        thread.join(_PROMPT)
    assert during is not None, "an append waited for the verify"
    assert all(isinstance(r, Ok) for r in during), during

    report = result[0]
    assert isinstance(report, Ok) and isinstance(report.data, ProjectionReport)
    # As of its start: a1 at 2 by its events, 7 in the table; the bump to 12 came after.
    assert (report.data.verified, report.data.streams, dict(report.data.changed)) == (True, 1, {a1: ("count",)})
    assert (report.data.missing, report.data.extra) == ((), ())
    assert _counts(app)[a1] == 12  # verify wrote nothing
    again = ok_data(app.rebuild_projection(RcTicket, user=alice, verify=True))
    assert dict(again.changed) == {a1: ("count",)}  # still the drift, now 12 against 7


def test_a_repair_never_overwrites_an_append_made_while_it_ran(
    app_on: AppOn, make_user: Callable[..., User], db_url: str
) -> None:
    hold = Hold()
    app, h = _app(app_on, hold)
    alice, bob = make_user(), make_user()
    a1 = ok_data(app.dispatch(h["open"], Open("a1"), user=alice))
    ok_data(app.dispatch(h["bump"], Bump(a1, 2), user=alice))
    b1 = ok_data(app.dispatch(h["open"], Open("b1"), user=bob))
    _drift(app, a1, 7)  # the repair will write a1's row
    sqlite = db_url.startswith("sqlite")

    thread, result = _rebuild_held(app, hold, alice, verify=False)
    results: list[Ok[Any] | Failure] = []
    calls = [(h["bump"], Bump(b1, 1), bob), (h["bump"], Bump(a1, 5), alice)]
    worker = threading.Thread(target=lambda: results.extend(app.dispatch(h, p, user=u) for h, p, u in calls))
    try:
        worker.start()
        # SQLite has one writer at a time: the appends wait for the repair (within the busy
        # timeout).  PostgreSQL's go on, another tenant's and the repairing user's own.
        worker.join(0.5 if sqlite else _PROMPT)
        assert worker.is_alive() == sqlite and thread.is_alive(), "an append waited for the rebuild"
    finally:
        hold.release.set()
        thread.join(_PROMPT)
        worker.join(_PROMPT)
    assert len(results) == 2 and all(isinstance(r, Ok) for r in results), results

    if sqlite:  # repaired first (a1 back to 2), then bumped
        assert isinstance(result[0], Ok) and dict(result[0].data.changed) == {a1: ("count",)}
        assert _counts(app) == {a1: 7, b1: 1}
    else:
        # Its replay had not the bump of a1: writing it would have undone the bump's row.
        failure_of(result[0], "unavailable")
        assert _counts(app) == {a1: 12, b1: 1}  # 7 drifted + 5 bumped: the bump's projection stands
        retried = ok_data(app.rebuild_projection(RcTicket, user=alice))
        assert dict(retried.changed) == {a1: ("count",)}
        assert _counts(app) == {a1: 7, b1: 1}
    assert ok_data(app.rebuild_projection(RcTicket, user=alice, verify=True)).matches
