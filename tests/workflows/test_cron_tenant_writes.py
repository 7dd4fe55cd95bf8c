"""A cron run belongs to no tenant: it reads every tenant's aggregates with
``kumiko_all_tenants`` but may not change them (DESIGN §5: another tenant's aggregate is
``not_found``).  Its failure said only "<Entity> <id> not found" of the row it had just read,
which sent the author hunting for a missing row; it now says why.  A missing id, and
another tenant's id written by a user of a tenant, still get the plain answer (nothing
about another tenant's rows is told to a tenant).  On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, CronTick, Entity, Feature, User, cron, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


class CtwHold(Entity):
    __tablename__ = "ctw_hold"
    status: Mapped[str] = mapped_column(sa.String(20), default="held")


@attrs.frozen
class Released:
    hold_id: uuid.UUID


@attrs.frozen
class Ref:
    id: uuid.UUID


def _app(app_on: Callable[..., App], clock: FakeClock, target: str) -> tuple[App, Feature[str]]:
    f: Feature[str] = Feature("ctw")
    f.entity(CtwHold)
    f.event(Released, name="released")

    @f.projector(CtwHold, Released)
    def _released(row: CtwHold, event: Released) -> None:
        row.status = "released"

    def ids(c: object) -> list[uuid.UUID]:
        if target == "missing":
            return [uuid.uuid4()]
        rows = sa.select(CtwHold.id).order_by(CtwHold.id).execution_options(kumiko_all_tenants=True)
        return list(getattr(c, "db").scalars(rows))

    pipeline = f.workflow_pipeline(CronTick).compute("ids", ids)
    if target == "update":
        sweep = pipeline.for_each(
            "id",
            over=lambda c: c.steps["ids"],
            do=lambda d: d.update(
                "u", CtwHold, id=lambda c: c.scope["id"], changes=lambda c: {"status": "x"}, skip_optimistic_lock=True
            ),
        )
    else:
        sweep = pipeline.for_each(
            "id",
            over=lambda c: c.steps["ids"],
            do=lambda d: d.append_event(CtwHold, id=lambda c: c.scope["id"], event=lambda c: Released(c.scope["id"])),
        )
    f.workflow("sweep", trigger=cron("0 * * * *"), pipeline=sweep)
    f.write_handler(
        "hold", f.pipeline(Ref).create("h", CtwHold, data=lambda c: CtwHold()).return_(lambda c: ok(c.steps["h"].id))
    )
    f.write_handler(
        "release",
        f.pipeline(Ref)
        .append_event(CtwHold, id=lambda c: c.payload.id, event=lambda c: Released(c.payload.id))
        .return_(lambda c: ok(None)),
    )
    return app_on([f], clock=clock), f


@pytest.mark.parametrize("target", ["append", "update"])
def test_a_cron_run_changing_a_tenants_aggregate_is_told_why(
    app_on: Callable[..., App], user: User, target: str
) -> None:
    clock = FakeClock(T0)
    app, _ = _app(app_on, clock, target)
    hold = ok_data(app.dispatch_json("ctw:hold", {"id": str(uuid.uuid4())}, user=user))
    app.run_worker(once=True)  # the cron schedule starts
    clock.advance(minutes=30)
    assert app.run_worker(once=True)["started"] == 1
    (run,) = app.runs()
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "not_found"
    assert run.error["message"] == (
        f"CtwHold {hold} not found in the run's tenant: a run of no tenant (a cron run) may not change a "
        "tenant's aggregate; change it from a run of that tenant (docs/workflows.md, Triggers)"
    )


def test_a_missing_id_and_another_tenants_id_get_the_plain_answer(
    app_on: Callable[..., App], user: User, make_user: Callable[..., User]
) -> None:
    clock = FakeClock(T0)
    app, _ = _app(app_on, clock, "missing")
    app.run_worker(once=True)
    clock.advance(minutes=30)
    app.run_worker(once=True)
    (run,) = app.runs()
    assert run.error is not None and run.error["message"].endswith(" not found")
    hold = ok_data(app.dispatch_json("ctw:hold", {"id": str(uuid.uuid4())}, user=user))
    refused = failure_of(app.dispatch_json("ctw:release", {"id": str(hold)}, user=make_user()), "not_found")
    assert refused.message == f"CtwHold {hold} not found"
