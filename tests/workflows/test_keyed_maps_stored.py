"""Maps keyed by UUIDs, ints, dates or enum members — which a payload reads from JSON and an
event stores (docs/http.md, "Payload schemas") — are stored wherever the App stores values:
an idempotency key's payload and result, and a workflow run's state, on SQLite and
PostgreSQL.  Before, each refused them ("only mappings with string keys can be stored"): a
keyed dispatch of such a payload was a validation_error at ``$``, and a run holding one
failed with ``unstorable_state``."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import date
from typing import Any

import attrs
import pytest
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, ok, on_event
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]


class Shift(enum.Enum):
    EARLY = "early"
    LATE = "late"


@attrs.frozen
class Rota:
    by_person: dict[uuid.UUID, int]
    by_day: dict[date, Shift]
    by_shift: dict[Shift, list[int]]
    by_week: dict[int, str]


class KmRoster(Entity):
    __tablename__ = "km_roster"
    weeks: Mapped[int]


@attrs.frozen
class Planned:
    rota: Rota


ANN, BOB = uuid.UUID(int=1), uuid.UUID(int=2)
ROTA = Rota(
    by_person={ANN: 3, BOB: 1},
    by_day={date(2026, 3, 2): Shift.EARLY},
    by_shift={Shift.LATE: [1, 2]},
    by_week={10: "ten", -1: "last"},
)
AS_JSON: dict[str, Any] = {
    "by_person": {str(ANN): 3, str(BOB): 1},
    "by_day": {"2026-03-02": "early"},
    "by_shift": {"late": [1, 2]},
    "by_week": {"10": "ten", "-1": "last"},
}


@pytest.fixture
def rota() -> tuple[Feature[Any], Any, list[Rota]]:
    f: Feature[Any] = Feature("km")
    f.entity(KmRoster)
    f.event(Planned, name="planned")
    ran: list[Rota] = []

    def plan(c: Any) -> int:
        ran.append(c.payload)
        return len(ran)

    keyed = f.write_handler(
        "plan",
        f.pipeline(Rota)
        .compute("n", plan)
        .create(
            "roster",
            KmRoster,
            data=lambda c: KmRoster(weeks=len(c.payload.by_week)),
            event=lambda c: Planned(c.payload),
        )
        .return_(lambda c: ok((c.payload, c.steps["n"]))),
    )

    @f.projector(KmRoster, Planned)
    def planned(row: KmRoster, event: Planned) -> None:
        row.weeks = len(event.rota.by_week)

    f.workflow(
        "notify",
        trigger=on_event(Planned),
        pipeline=f.workflow_pipeline(Planned)
        .compute("rota", lambda c: c.payload.rota)
        .wait("PT1H")
        .compute("people", lambda c: sorted(c.steps["rota"].by_person)),
    )
    return f, keyed, ran


def test_a_keyed_dispatch_of_such_a_payload_runs_once_and_answers_alike(
    app_on: AppOn, user: User, rota: tuple[Feature[Any], Any, list[Rota]]
) -> None:
    f, _, ran = rota
    app = app_on([f])
    first = ok_data(app.dispatch_json("km:plan", AS_JSON, user=user, idempotency_key="week 10"))
    assert first == (ROTA, 1)
    # The same maps in another key order are the same payload, as equal dicts are.
    reordered = {**AS_JSON, "by_person": {str(BOB): 1, str(ANN): 3}}
    assert ok_data(app.dispatch_json("km:plan", reordered, user=user, idempotency_key="week 10")) == (ROTA, 1)
    assert ran == [ROTA]
    changed = {**AS_JSON, "by_person": {str(ANN): 3}}
    failure_of(app.dispatch_json("km:plan", changed, user=user, idempotency_key="week 10"), "idempotency_conflict")


def test_a_run_holds_such_an_event_across_a_wait(
    app_on: AppOn, user: User, rota: tuple[Feature[Any], Any, list[Rota]]
) -> None:
    f, keyed, _ = rota
    clock = FakeClock()
    app = app_on([f], clock=clock)
    ok_data(app.dispatch(keyed, ROTA, user=user))
    app.run_worker(once=True)
    clock.advance(hours=1)
    app.run_worker(once=True)
    [run] = app.runs("km:notify")
    assert (run.status, run.error) == ("completed", None)
    assert (run.steps["rota"], run.steps["people"]) == (ROTA, [ANN, BOB])
