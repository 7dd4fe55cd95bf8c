"""The nil UUID is no tenant's id: it is what cron-started runs (``SYSTEM_USER``) write
their rows and events under, and only a ``sysadmin`` reaches those (DESIGN §5, the
operations' rule).  A ``User`` whose ``tenant_id`` is the nil UUID — what an
authentication layer gives for a token without a tenant claim, ``uuid.UUID(int=0)`` —
read, changed and rebuilt that data through every entry point but ``cancel_run``,
``result`` and ``requeue``; those told it ``not_found`` of every run and row, its own
tenant's too, where every other entry point says why it is refused.  On SQLite and
PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, CronTick, Entity, Feature, User, cron, manual, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NIL = uuid.UUID(int=0)


class NtLog(Entity):
    __tablename__ = "nt_log"
    note: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class Ref:
    id: uuid.UUID


@attrs.frozen
class Job:
    n: int


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("nt")
    f.entity(NtLog)
    hourly = f.workflow(
        "hourly",
        trigger=cron("0 * * * *"),
        pipeline=f.workflow_pipeline(CronTick).create("log", NtLog, data=lambda c: NtLog(note="system")),
    )
    get = f.write_handler(
        "get",
        f.pipeline(Ref)
        .get_one("log", lambda c: sa.select(NtLog).where(NtLog.id == c.payload.id))
        .return_(lambda c: ok(c.steps["log"].note)),
    )
    listed = f.query_handler(
        "listed",
        f.query_pipeline(Ref)
        .find_many("logs", lambda c: sa.select(NtLog))
        .return_(lambda c: ok([log.note for log in c.steps["logs"]])),
    )
    plain = f.workflow("plain", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).compute("x", lambda c: 1))
    return f, {"get": get, "listed": listed, "hourly": hourly, "plain": plain}


@pytest.fixture
def cron_log(app_on: AppOn) -> tuple[App, dict[str, Any], uuid.UUID]:
    """An App whose cron run has created one ``NtLog`` row, of no tenant."""
    clock = FakeClock(T0)
    f, h = _feature()
    app = app_on([f], clock=clock)
    app.run_worker(once=True)  # the cron cursor starts now
    clock.advance(hours=1)
    assert app.run_worker(once=True)["started"] == 1
    with app.engine.connect() as conn:
        (log_id, tenant) = conn.execute(sa.select(NtLog.__table__.c.id, NtLog.__table__.c.tenant_id)).one()
    assert tenant == NIL
    return app, h, log_id


def test_a_user_of_the_nil_tenant_is_refused_everywhere_its_rows_are(
    cron_log: tuple[App, dict[str, Any], uuid.UUID],
) -> None:
    app, h, log_id = cron_log
    nobody = User(id=uuid.uuid4(), tenant_id=NIL)
    for answer in (
        app.dispatch(h["get"], Ref(log_id), user=nobody),
        app.dispatch_json("nt:get", {"id": str(log_id)}, user=nobody),
        app.query(h["listed"], Ref(log_id), user=nobody),
        app.query_json("nt:listed", {"id": str(log_id)}, user=nobody),
        app.read_stream(NtLog, log_id, user=nobody),
        app.rebuild_projection(NtLog, user=nobody),
        app.rebuild_projection(NtLog, user=nobody, tenant=NIL),
    ):
        refused = failure_of(answer, "access_denied")
        assert refused.message == "a user of no tenant (the nil tenant id) is refused: only a sysadmin acts there"
    with pytest.raises(PermissionError, match="a user of no tenant"):
        app.start_workflow(h["plain"], Job(1), user=nobody)
    assert app.runs(h["plain"]) == []


def test_a_sysadmin_reaches_the_nil_tenants_rows(cron_log: tuple[App, dict[str, Any], uuid.UUID]) -> None:
    app, h, log_id = cron_log
    operator = User(id=uuid.uuid4(), tenant_id=NIL, roles={"sysadmin"})
    assert ok_data(app.dispatch(h["get"], Ref(log_id), user=operator)) == "system"
    assert [e.version for e in ok_data(app.read_stream(NtLog, log_id, user=operator))] == [1]
    other = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"sysadmin"})
    assert [e.tenant_id for e in ok_data(app.read_stream(NtLog, log_id, user=other))] == [NIL]
    # A user of a tenant still finds nothing there.
    someone = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    failure_of(app.dispatch(h["get"], Ref(log_id), user=someone), "not_found")
    assert ok_data(app.query(h["listed"], Ref(log_id), user=someone)) == []


def test_the_operations_refuse_a_user_of_the_nil_tenant_as_the_other_entry_points_do(
    cron_log: tuple[App, dict[str, Any], uuid.UUID],
) -> None:
    """Refused before the id is looked up: the answer is the same for a run of no tenant,
    an id of nothing and a row that does not exist, so it tells nothing of them."""
    app, h, _log_id = cron_log
    nobody = User(id=uuid.uuid4(), tenant_id=NIL)
    [run] = app.runs(h["hourly"])
    for run_id in (run.run_id, uuid.uuid4()):
        for answer in (
            app.cancel_run(run_id, user=nobody, reason="no"),
            app.result(h["hourly"], run_id, user=nobody),
            app.requeue(run_id, user=nobody),
        ):
            refused = failure_of(answer, "access_denied")
            assert refused.message == "a user of no tenant (the nil tenant id) is refused: only a sysadmin acts there"
    assert app.get_run(run.run_id) == run  # not cancelled
    operator = User(id=uuid.uuid4(), tenant_id=NIL, roles={"sysadmin"})
    assert ok_data(app.result(h["hourly"], run.run_id, user=operator)) is None
