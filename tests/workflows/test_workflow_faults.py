"""Faults an outside reviewer injects into the workflow engine: a wake time given without
a time zone, on a PostgreSQL server whose time zone is not UTC; the clock moved back;
an event appended by another run of the same worker transaction.  Both databases; time
is a hand-moved clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import sqlalchemy as sa
from _support import run_info

from kumiko_typed import App, Feature, User, manual
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AppOn = Callable[..., App]
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())


@attrs.frozen
class Go:
    n: int


def _server_time_zone(db_url: str, zone: str) -> None:
    """Set the database's default time zone (PostgreSQL; SQLite has none): what a server
    configured for its country's local time gives every new connection."""
    if not db_url.startswith("postgresql"):
        return
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        name = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        conn.execute(sa.text(f"ALTER DATABASE \"{name}\" SET timezone = '{zone}'"))
    engine.dispose()


def test_a_wake_time_without_a_time_zone_is_utc_on_both_databases(db_url: str) -> None:
    """A ``wait`` resolver's naive datetime is taken as UTC (``UtcDateTime``).  Before, on
    PostgreSQL it was sent as a ``timestamp`` and read in the server's time zone: at +14
    hours the run woke 14 hours early; SQLite woke it at 10:00 UTC."""
    _server_time_zone(db_url, "Pacific/Kiritimati")  # UTC+14
    f = Feature("naive_wake")
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).wait(lambda c: datetime(2026, 3, 2, 10, 0)).compute("done", lambda c: 1),
    )
    clock = FakeClock(T0)
    app = App([f], database_url=db_url, clock=clock)
    try:
        app.create_all()
        run_id = app.start_workflow(flow, Go(1), user=USER)
        assert run_info(app, run_id).wake_at == datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
        clock.advance(minutes=30)
        app.run_worker(once=True)
        assert run_info(app, run_id).status == "suspended"  # 09:30 UTC: not yet
        clock.advance(minutes=30)
        app.run_worker(once=True)
        assert run_info(app, run_id).status == "completed"
    finally:
        app.dispose()
