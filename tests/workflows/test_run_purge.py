"""``app.purge_runs(older_than=...)``: a finished run keeps its payload and step values for
good unless deleted.  A purge deletes the completed, failed and cancelled runs last
changed long enough ago (by the App's clock), in batches; never a running or suspended
one, which still resumes after it.  Both databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from kumiko_typed import App, Failure, Feature, Ok, User, fail, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AppOn = Callable[..., App]


@attrs.frozen
class Job:
    n: int


f = Feature("purge_r")
done = f.workflow(
    "done",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job)
    .compute("twice", lambda c: c.payload.n * 2)
    .return_(lambda c: ok(c.steps["twice"])),
)
broken = f.workflow(
    "broken",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).return_(lambda c: fail("unprocessable", "no")),
)
slow = f.workflow(
    "slow",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).wait("P60D").return_(lambda c: ok(c.payload.n)),
)


def _statuses(app: App) -> list[str]:
    return sorted(r.status for r in app.runs())


def _start_all(app: App, user: User) -> dict[str, uuid.UUID]:
    """One run in each status but running: completed, failed, suspended, cancelled."""
    runs = {
        "completed": app.start_workflow(done, Job(1), user=user),
        "failed": app.start_workflow(broken, Job(2), user=user),
        "suspended": app.start_workflow(slow, Job(3), user=user),
        "cancelled": app.start_workflow(slow, Job(4), user=user),
    }
    assert isinstance(app.cancel_run(runs["cancelled"], user=user), Ok)
    return runs


def test_finished_runs_older_than_the_age_go_the_others_stay(app_on: AppOn, user: User) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    old = _start_all(app, user)
    clock.advance(days=20)
    recent = app.start_workflow(done, Job(5), user=user)
    assert _statuses(app) == ["cancelled", "completed", "completed", "failed", "suspended"]

    clock.advance(days=10)  # the first ones changed exactly 30 days ago: old enough
    assert app.purge_runs(older_than=timedelta(days=30), batch=1) == 3
    assert _statuses(app) == ["completed", "suspended"]
    assert {r.run_id for r in app.runs()} == {recent, old["suspended"]}
    for status in ("completed", "failed", "cancelled"):
        assert app.get_run(old[status]) is None
    gone = app.result(done, old["completed"], user=user)
    assert isinstance(gone, Failure) and gone.code == "not_found", gone
    assert app.purge_runs(older_than=timedelta(days=30)) == 0

    # The suspended run is untouched and still resumes, then is old like any other.
    clock.advance(days=31)
    assert app.run_worker(once=True)["resumed"] == 1
    assert app.result(slow, old["suspended"], user=user) == ok(3)
    assert app.purge_runs(older_than=timedelta(0)) == 2
    assert app.runs() == []


def test_status_chooses_which_finished_runs_go(app_on: AppOn, user: User) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    _start_all(app, user)
    clock.advance(days=1)
    assert app.purge_runs(older_than=timedelta(hours=1), status="failed") == 1
    assert _statuses(app) == ["cancelled", "completed", "suspended"]
    assert app.purge_runs(older_than=timedelta(hours=1), status=["completed", "cancelled"]) == 2
    assert _statuses(app) == ["suspended"]


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"status": "suspended"}, ValueError, "status 'suspended' is not a finished run status"),
        ({"status": "running"}, ValueError, "one of: completed, failed, cancelled"),
        ({"status": []}, ValueError, "status is empty"),
        ({"status": 3}, TypeError, "status must be a finished run status"),
        ({"older_than": 30}, TypeError, "older_than must be a datetime.timedelta, not int"),
        ({"older_than": timedelta(days=-1)}, ValueError, "older_than must not be negative"),
        ({"batch": 0}, ValueError, "batch must be a positive int"),
    ],
)
def test_wrong_arguments_are_refused_before_anything_is_deleted(
    app_on: AppOn, user: User, kwargs: dict[str, object], error: type[Exception], text: str
) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    _start_all(app, user)
    clock.advance(days=400)
    with pytest.raises(error, match=text):
        app.purge_runs(**{"older_than": timedelta(days=1), **kwargs})  # type: ignore[arg-type]
    assert len(app.runs()) == 4


def test_a_purged_keyed_run_lets_its_key_start_again(app_on: AppOn, user: User) -> None:
    """What the docstring warns of: the key lived in the run's row."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    first = app.start_workflow(done, Job(1), user=user, key="order-7")
    assert app.start_workflow(done, Job(1), user=user, key="order-7") == first
    clock.advance(days=2)
    assert app.purge_runs(older_than=timedelta(days=1)) == 1
    again = app.start_workflow(done, Job(1), user=user, key="order-7")
    assert again != first and app.get_run(again) is not None


def test_runs_of_every_tenant_and_of_removed_workflows_go(app_on: AppOn) -> None:
    """An operator's purge, like the listing: by age, whatever the tenant, and runs of a
    workflow this App no longer registers too."""
    clock = FakeClock(T0)
    before = app_on([f], clock=clock)
    for _ in range(3):
        before.start_workflow(done, Job(1), user=User(id=uuid.uuid4(), tenant_id=uuid.uuid4()))
    clock.advance(days=2)
    after = app_on([Feature("other")], clock=clock)
    assert after.purge_runs(older_than=timedelta(days=1)) == 3
    assert after.runs() == []


def test_an_age_longer_than_the_calendar_keeps_every_run(app_on: AppOn, user: User) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    app.start_workflow(done, Job(1), user=user)
    clock.advance(days=3650)
    assert app.purge_runs(older_than=timedelta.max) == 0
    assert _statuses(app) == ["completed"]


def test_a_batch_past_what_the_database_counts_is_one_batch(app_on: AppOn, user: User) -> None:
    """Before: ``OverflowError`` on SQLite, and on PostgreSQL ``DataError: bigint out of
    range`` quoting the DELETE, from each of the three purges."""
    app = app_on([f], clock=FakeClock(T0))
    _start_all(app, user)
    assert app.purge_runs(older_than=timedelta(0), batch=10**20) == 3
    assert _statuses(app) == ["suspended"]
    assert app.purge_outbox(older_than=timedelta(0), batch=10**20) == 0
    assert app.purge_idempotency_keys(batch=10**20) == 0
