"""A worker's transaction claims due runs a few at a time when its segments are slow
(``_claim_size``).  On PostgreSQL another worker's claim skips a locked run: a worker that
claimed ten runs of a slow peer at once held nine of them unstarted, the last for nine
segments, while another worker found nothing to do.  Both databases: however the claims
are cut, a pass resumes every due run once, in the due order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from kumiko_typed import App, Feature, User, manual
from kumiko_typed._claim_size import HOLD
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
#: A segment's call to a slow peer: longer than a claimed run may wait for one.
SLOW = 2 * HOLD


@attrs.frozen
class Job:
    n: int


class _Gate:
    """Holds the segment of job 0 until let go (inert unless armed)."""

    armed = False
    inside = threading.Event()
    go = threading.Event()


#: The jobs whose segment ran, in the order they ran.
ran: list[int] = []


def _peer(c: Any) -> int:
    if _Gate.armed and c.payload.n == 0:
        _Gate.inside.set()
        assert _Gate.go.wait(60)
    else:
        time.sleep(SLOW)
    ran.append(c.payload.n)
    return int(c.payload.n)


f: Feature[Any] = Feature("claims")
flow = f.workflow("slow", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).wait("PT1M").compute("peer", _peer))
twice = f.workflow(
    "twice",
    trigger=manual(Job),
    pipeline=f.workflow_pipeline(Job).wait("PT1M").compute("peer", _peer).wait("PT0S").compute("again", _peer),
)


@pytest.fixture(autouse=True)
def _reset() -> None:
    _Gate.armed = False
    _Gate.inside.clear()
    _Gate.go.clear()
    ran.clear()


def _slow_history(app: App, clock: FakeClock, user: User) -> None:
    """One run resumed, its segment slow: the worker's next claims are small."""
    app.start_workflow(flow, Job(-1), user=user)
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 1
    ran.clear()


def _jobs(app: App, clock: FakeClock, user: User, workflow: Any, count: int) -> list[Any]:
    """``count`` runs, job ``n`` due ``n`` seconds after job 0 (the due order is theirs)."""
    runs = []
    for n in range(count):
        runs.append(app.start_workflow(workflow, Job(n), user=user))
        clock.advance(seconds=1)
    clock.advance(minutes=2)
    return runs


@pytest.mark.postgres
def test_a_worker_with_slow_segments_leaves_the_runs_it_has_not_started_to_another_worker(
    fresh_postgres_url: str, user: User
) -> None:
    clock = FakeClock(T0)
    busy = App([f], database_url=fresh_postgres_url, clock=clock)
    other = App([f], database_url=fresh_postgres_url, clock=clock)
    try:
        busy.create_all()
        _slow_history(busy, clock, user)
        runs = _jobs(busy, clock, user, flow, 5)
        _Gate.armed = True
        passes: list[dict[str, int]] = []
        worker = threading.Thread(target=lambda: passes.append(busy.run_worker(once=True)))
        worker.start()
        try:
            assert _Gate.inside.wait(60)  # the busy worker is in job 0's segment
            # Before, it had claimed all five: this pass found none of them.
            assert other.run_worker(once=True)["resumed"] == 4
        finally:
            _Gate.go.set()
            worker.join(60)
        assert passes[0]["resumed"] == 1
        assert sorted(ran) == [0, 1, 2, 3, 4]  # each once
        assert {info.status for info in map(busy.get_run, runs) if info is not None} == {"completed"}
    finally:
        busy.dispose()
        other.dispose()


def test_cut_claims_resume_every_due_run_once_in_the_due_order(app_on: Callable[..., App], user: User) -> None:
    """Each run is left due again by its first segment (a zero wait, the clock standing
    still): the pass goes on past it, claim after claim, and the next pass resumes it."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    _slow_history(app, clock, user)
    runs = _jobs(app, clock, user, twice, 12)

    assert app.run_worker(once=True)["resumed"] == 12
    assert ran == list(range(12))
    assert app.run_worker(once=True)["resumed"] == 12
    assert sorted(ran[12:]) == list(range(12))  # due at one time: ties in the tie order
    assert {info.status for info in map(app.get_run, runs) if info is not None} == {"completed"}
