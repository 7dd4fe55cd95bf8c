"""Listing runs as an operator asks (``app.runs(workflow, status=, stranded=, limit=,
before=, tenant_id=, key=, event_id=)``), on SQLite and PostgreSQL: filtered and limited in the database, newest
first (ties by run id), paged on by the last run id of a page so that runs started
between pages neither repeat nor shift a page; bad arguments are a sentence, not an
empty list."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _deploy_app import T0 as DEPLOY_T0
from _deploy_app import USER as DEPLOY_USER
from _deploy_app import Order, make_app
from _sql_log import statements
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, RunInfo, User, manual, ok, on_event
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
STATUSES = ("running", "suspended", "completed", "failed", "cancelled")


@attrs.frozen
class Job:
    n: int


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("ls")
    flows = {
        "done": f.workflow("done", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).compute("n", lambda c: 1)),
        "wait": f.workflow("wait", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).wait("PT1H")),
        "boom": f.workflow(
            "boom", trigger=manual(Job), pipeline=f.workflow_pipeline(Job).compute("n", lambda c: 1 // c.payload.n)
        ),
    }
    return f, flows


def _ids(found: list[RunInfo]) -> list[uuid.UUID]:
    return [r.run_id for r in found]


def _mixed(app_on: AppOn, clock: Callable[[], datetime]) -> tuple[App, dict[str, Any], dict[str, set[uuid.UUID]]]:
    """Runs in every status: two of each, the workflows interleaved; what each status holds."""
    f, w = _feature()
    app = app_on([f], clock=clock)
    by: dict[str, set[uuid.UUID]] = {s: set() for s in STATUSES}
    for n in range(2):
        for name, status in (("done", "completed"), ("wait", "suspended"), ("boom", "failed")):
            by[status].add(app.start_workflow(w[name], Job(0), user=USER))
            if isinstance(clock, FakeClock):
                clock.advance(seconds=1)
        cancelled = app.start_workflow(w["wait"], Job(1), user=USER)
        assert isinstance(app.cancel_run(cancelled, user=USER), Ok)
        by["cancelled"].add(cancelled)
    # A run's row is "running" only inside its segment's transaction: one is written so by
    # hand, so that the filter by that status is held to as well.
    running = app.start_workflow(w["wait"], Job(1), user=USER)
    with app.engine.begin() as conn:
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == running).values(status="running"))
    by["running"].add(running)
    return app, w, by


@pytest.mark.parametrize("still", [False, True], ids=["moving-clock", "still-clock"])
def test_each_status_and_sets_of_them_filter_in_the_listed_order(app_on: AppOn, still: bool) -> None:
    app, w, by = _mixed(app_on, (lambda: T0) if still else FakeClock(T0))
    everything = app.runs()
    assert len(everything) == 9
    assert [r.run_id for r in everything if r.status not in STATUSES] == []
    for status in STATUSES:
        found = app.runs(status=status)
        assert set(_ids(found)) == by[status], status
        assert _ids(found) == [r.run_id for r in everything if r.status == status]
    for chosen in (["failed", "cancelled"], ("suspended", "running"), {"completed"}, frozenset(STATUSES)):
        wanted = set().union(*(by[s] for s in chosen))
        assert _ids(app.runs(status=chosen)) == [r.run_id for r in everything if r.run_id in wanted]

    suspended_waits = app.runs(w["wait"], status="suspended")
    assert set(_ids(suspended_waits)) == by["suspended"]
    assert app.runs("ls:done", status="failed") == []
    assert set(_ids(app.runs(w["wait"], status=["cancelled", "running"]))) == by["cancelled"] | by["running"]


def test_a_limit_is_the_head_of_the_list(app_on: AppOn) -> None:
    app, w, _ = _mixed(app_on, FakeClock(T0))
    everything = app.runs()
    for limit in (1, 2, 8, 9, 50):
        assert _ids(app.runs(limit=limit)) == _ids(everything)[:limit]
    waits = app.runs(w["wait"])
    assert _ids(app.runs(w["wait"], limit=3)) == _ids(waits)[:3]
    failed = [r.run_id for r in everything if r.status == "failed"]
    assert _ids(app.runs(status="failed", limit=1)) == failed[:1]


def test_a_limit_past_what_the_database_counts_lists_everything(app_on: AppOn) -> None:
    """Before: ``OverflowError`` on SQLite, and on PostgreSQL ``DataError: bigint out of
    range`` quoting the SQL (``runs --limit 99999999999999999999`` too)."""
    app, _w, _ = _mixed(app_on, FakeClock(T0))
    assert _ids(app.runs(limit=10**20)) == _ids(app.runs())
    assert app.outbox(limit=10**20) == app.outbox()


def _pages(app: App, limit: int, **filters: Any) -> list[list[uuid.UUID]]:
    pages: list[list[uuid.UUID]] = []
    before = None
    while True:
        page = _ids(app.runs(limit=limit, before=before, **filters))
        if not page:
            return pages
        assert len(page) <= limit
        pages.append(page)
        before = page[-1]


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 10])
def test_paging_returns_every_run_once_in_order_even_started_at_one_instant(app_on: AppOn, limit: int) -> None:
    """A clock that does not move: every run has the same created_at, the run id orders them."""
    f, w = _feature()
    app = app_on([f], clock=lambda: T0)
    for n in range(7):
        app.start_workflow(w["done" if n % 2 else "wait"], Job(n), user=USER)
    everything = _ids(app.runs())
    assert everything == sorted(everything)  # same instant: by run id
    pages = _pages(app, limit)
    assert [run_id for page in pages for run_id in page] == everything
    assert [len(p) for p in pages[:-1]] == [limit] * (len(pages) - 1)

    waits = _ids(app.runs(w["wait"], status="suspended"))
    assert [r for page in _pages(app, limit, workflow=w["wait"], status="suspended") for r in page] == waits


def test_paging_across_instants_and_ties(app_on: AppOn) -> None:
    f, w = _feature()
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    for n in range(9):
        app.start_workflow(w["done"], Job(n), user=USER)
        if n % 3 == 2:  # three runs at each of three instants
            clock.advance(seconds=1)
    everything = app.runs()
    created = [r.created_at for r in everything]
    assert created == sorted(created, reverse=True) and len(set(created)) == 3
    for limit in (2, 4):
        assert [r for page in _pages(app, limit) for r in page] == _ids(everything)


def test_runs_started_between_pages_neither_repeat_nor_shift_the_next_page(app_on: AppOn) -> None:
    """Why the page goes on from a run id, not an offset: new runs come first in the list."""
    f, w = _feature()
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    for n in range(6):
        app.start_workflow(w["done"], Job(n), user=USER)
        clock.advance(seconds=1)
    everything = _ids(app.runs())
    first = _ids(app.runs(limit=3))
    for n in range(4):
        app.start_workflow(w["done"], Job(n), user=USER)  # newer than every listed one
    assert _ids(app.runs(limit=3, before=first[-1])) == everything[3:]


def test_a_cursor_run_that_left_the_filter_still_pages_on(app_on: AppOn) -> None:
    """The last run of a page was cancelled since: the next page of suspended runs goes on."""
    f, w = _feature()
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    for n in range(4):
        app.start_workflow(w["wait"], Job(n), user=USER)
        clock.advance(seconds=1)
    everything = _ids(app.runs(status="suspended"))
    first = _ids(app.runs(status="suspended", limit=2))
    assert isinstance(app.cancel_run(first[-1], user=USER), Ok)
    assert _ids(app.runs(status="suspended", limit=2, before=first[-1])) == everything[2:]


def test_an_empty_database_and_an_unknown_workflow_list_nothing(app_on: AppOn) -> None:
    """A workflow name the App does not register is no error: its runs may outlive it
    (a retired workflow's runs stay in the table)."""
    f, w = _feature()
    app = app_on([f], clock=FakeClock(T0))
    assert app.runs() == []
    assert app.runs(status="failed", limit=5) == []
    assert app.runs(w["done"], status=STATUSES, limit=1) == []
    app.start_workflow(w["done"], Job(1), user=USER)
    assert app.runs("ls:retired") == []
    assert app.runs("ls:retired", status="completed", limit=3) == []


def test_a_name_or_key_no_database_holds_lists_nothing_alike_on_both_databases(app_on: AppOn) -> None:
    """A NUL or a lone surrogate names no run.  Before: on PostgreSQL a NUL was
    ``DataError`` quoting the SELECT (SQLite listed nothing), and a lone surrogate (what
    a non-UTF-8 byte in ``runs --key`` becomes) was ``UnicodeEncodeError`` on both."""
    f, w = _feature()
    app = app_on([f], clock=FakeClock(T0))
    run_id = app.start_workflow(w["wait"], Job(1), user=USER)
    tenant = USER.tenant_id
    for odd in ("wait\x00", "\udcff"):
        assert app.runs(odd) == []
        assert app.runs(w["wait"], tenant_id=tenant, key=odd) == []
        assert app.runs(odd, limit=1, before=run_id) == []
    assert _ids(app.runs(w["wait"])) == [run_id]


def test_stranded_runs_are_suspended_and_listed_alone_on_request(db_url: str) -> None:
    """A run its deployed definition cannot resume is ``suspended`` with the error code
    ``stranded``; ``stranded=True`` lists only those (in the database, with the limit)."""
    v1 = make_app(db_url, "v1", FakeClock(DEPLOY_T0))
    v1.create_all()
    renamed = make_app(db_url, "renamed", FakeClock(DEPLOY_T0 + timedelta(hours=1)))
    try:
        jobs = [v1.start_workflow(v1.workflows["dep:job"], Order(n), user=DEPLOY_USER) for n in range(3)]
        loop = v1.start_workflow(v1.workflows["dep:loop"], Order(1, [1, 2, 3]), user=DEPLOY_USER)
        assert renamed.run_worker(once=True)["resumed"] == 1  # the loop's: the jobs' step is gone
        stranded = renamed.runs(stranded=True)
        assert set(_ids(stranded)) == set(jobs)
        assert {(r.status, (r.error or {}).get("code")) for r in stranded} == {("suspended", "stranded")}
        assert loop in _ids(renamed.runs(status="suspended")) and loop not in _ids(stranded)
        assert _ids(renamed.runs(stranded=True, limit=2)) == _ids(stranded)[:2]
        assert _ids(renamed.runs("dep:job", stranded=True, status="suspended")) == _ids(stranded)
        assert renamed.runs("dep:loop", stranded=True) == []
        assert renamed.runs(stranded=True, status="failed") == []
    finally:
        renamed.dispose()
        v1.dispose()


def test_the_filter_and_the_limit_are_sent_to_the_database(app_on: AppOn) -> None:
    app, w, _ = _mixed(app_on, FakeClock(T0))
    with statements(app.engine) as seen:
        found = app.runs(w["wait"], status=["suspended", "cancelled"], limit=2)
    assert len(found) == 2
    (listing,) = [s for s in seen if s.upper().startswith("SELECT")]
    assert "LIMIT" in listing.upper() and "STATUS IN" in listing.upper(), listing


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"status": "faild"}, ValueError, r"status 'faild' is not a run status; one of: running, suspended, "),
    ({"status": ["failed", "Completed"]}, ValueError, r"status 'Completed' is not a run status; one of"),
    ({"status": "stranded"}, ValueError, r"stranded=True"),
    ({"status": []}, ValueError, r"status is empty: give one status or more, or None for every status"),
    ({"status": 5}, TypeError, r"^status must be a run status or a collection of them, not int$"),
    ({"status": [None]}, TypeError, r"^status must be a run status or a collection of them, not NoneType in it$"),
    ({"limit": 0}, ValueError, r"^limit must be a positive int, not 0$"),
    ({"limit": -1}, ValueError, r"^limit must be a positive int, not -1$"),
    ({"limit": True}, TypeError, r"^limit must be an int or None, not bool$"),
    ({"limit": "5"}, TypeError, r"^limit must be an int or None, not str$"),
    ({"limit": 2.0}, TypeError, r"^limit must be an int or None, not float$"),
    ({"before": "0f6c2c86-9f53-4a8e-9d61-1e3b4c5d6e7f"}, TypeError, r"^before must be a uuid\.UUID .*, not str$"),
    ({"before": 7}, TypeError, r"^before must be a uuid\.UUID \(a run_id\), not int$"),
    ({"stranded": "yes"}, TypeError, r"^stranded must be a bool, not str$"),
    ({"tenant_id": "0f6c2c86-9f53-4a8e-9d61-1e3b4c5d6e7f"}, TypeError, r"^tenant_id must be a UUID, not str$"),
    ({"key": "order-1"}, ValueError, r"^key needs tenant_id: a key is its tenant's"),
    ({"key": 7, "tenant_id": uuid.UUID(int=1)}, TypeError, r"^key must be a str, not int$"),
    ({"event_id": str(uuid.UUID(int=1))}, TypeError, r"^event_id must be a UUID, not str$"),
]


@pytest.mark.parametrize(("arguments", "error", "message"), BAD, ids=[repr(b[0]) for b in BAD])
def test_bad_arguments_are_a_sentence_naming_the_fix(
    app_on: AppOn, arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    f, w = _feature()
    app = app_on([f], clock=FakeClock(T0))
    app.start_workflow(w["done"], Job(1), user=USER)
    with pytest.raises(error, match=message):
        app.runs(**arguments)


def test_paging_on_from_a_run_that_does_not_exist_is_an_error(app_on: AppOn) -> None:
    f, w = _feature()
    app = app_on([f], clock=FakeClock(T0))
    app.start_workflow(w["done"], Job(1), user=USER)
    unknown = uuid.uuid4()
    with pytest.raises(LookupError, match=rf"^before: no run {unknown}; page on with the run_id of a listed run$"):
        app.runs(before=unknown)


def test_each_run_shows_who_started_it_and_a_tenant_lists_its_own(app_on: AppOn) -> None:
    """``RunInfo.user`` is the user a run acts as, and ``tenant_id=`` lists the runs of
    that tenant's users (with the other filters and pages): none of another tenant's,
    nothing for a tenant with no runs."""
    f, w = _feature()
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    other = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset({"clerk", "admin"}))
    mine, theirs = [], []
    for n in range(3):
        mine.append(app.start_workflow(w["wait"], Job(n), user=USER))
        theirs.append(app.start_workflow(w["done" if n else "wait"], Job(n), user=other))
        clock.advance(seconds=1)
    listed = app.runs()
    assert {r.run_id: r.user for r in listed} == {**dict.fromkeys(mine, USER), **dict.fromkeys(theirs, other)}
    assert _ids(app.runs(tenant_id=USER.tenant_id)) == mine[::-1]
    assert _ids(app.runs(tenant_id=other.tenant_id)) == theirs[::-1]
    assert _ids(app.runs(w["wait"], tenant_id=other.tenant_id)) == theirs[:1]
    assert _ids(app.runs(tenant_id=other.tenant_id, status="completed", limit=1)) == theirs[2:]
    page = app.runs(tenant_id=USER.tenant_id, limit=2)
    assert _ids(page) + _ids(app.runs(tenant_id=USER.tenant_id, before=page[-1].run_id)) == mine[::-1]
    assert app.runs(tenant_id=uuid.uuid4()) == []
    assert app.get_run(theirs[0]) == next(r for r in listed if r.run_id == theirs[0])


def test_a_key_finds_the_run_its_tenant_started_with_it(app_on: AppOn) -> None:
    """``runs(workflow, tenant_id=, key=)``: the run ``start_workflow(..., key=)`` started
    for that tenant, or none; another tenant's run of the same key is its own."""
    f, w = _feature()
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    other = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    mine = app.start_workflow(w["wait"], Job(1), user=USER, key="order-1")
    theirs = app.start_workflow(w["wait"], Job(1), user=other, key="order-1")
    app.start_workflow(w["wait"], Job(2), user=USER, key="order-2")
    app.start_workflow(w["wait"], Job(3), user=USER)
    assert mine != theirs
    assert _ids(app.runs(w["wait"], tenant_id=USER.tenant_id, key="order-1")) == [mine]
    assert _ids(app.runs(tenant_id=other.tenant_id, key="order-1")) == [theirs]
    assert app.runs(w["done"], tenant_id=USER.tenant_id, key="order-1") == []
    assert app.runs(w["wait"], tenant_id=USER.tenant_id, key="order-3") == []
    assert app.runs(w["wait"], tenant_id=uuid.uuid4(), key="order-1") == []
    assert _ids(app.runs(w["wait"], tenant_id=USER.tenant_id, key="order-1", status="suspended")) == [mine]
    assert app.runs(w["wait"], tenant_id=USER.tenant_id, key="order-1", status="completed") == []


@attrs.frozen
class Signed:
    n: int


class LsAccount(Entity):
    __tablename__ = "ls_account"
    n: Mapped[int]


def test_an_event_id_finds_the_runs_that_event_started(app_on: AppOn) -> None:
    """``runs(event_id=)``: the runs an event started, one per workflow ``on_event`` of its
    type (``StoredEvent.event_id`` from ``read_stream``); none for an event that started
    none, or for a workflow it did not start; another tenant's event starts its own."""
    f: Feature[Any] = Feature("lse")
    f.entity(LsAccount)
    f.event(Signed)
    welcome = f.workflow("welcome", trigger=on_event(Signed), pipeline=f.workflow_pipeline(Signed).wait("PT1H"))
    audit = f.workflow(
        "audit", trigger=on_event(Signed), pipeline=f.workflow_pipeline(Signed).compute("n", lambda c: 1)
    )
    sign = f.write_handler(
        "sign",
        f.pipeline(Job)
        .create("account", LsAccount, data=lambda c: LsAccount(n=c.payload.n), event=lambda c: Signed(c.payload.n))
        .return_(lambda c: ok(c.steps["account"].id)),
    )
    app = app_on([f], clock=FakeClock(T0))
    other = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())

    def signed(user: User, n: int) -> uuid.UUID:
        account = app.dispatch(sign, Job(n), user=user)
        assert isinstance(account, Ok)
        stream = app.read_stream(LsAccount, account.data, user=user)
        assert isinstance(stream, Ok)
        return stream.data[0].event_id

    first, second, theirs = signed(USER, 1), signed(USER, 2), signed(other, 3)
    assert app.runs(event_id=first) == []  # still in the feed's backlog: no run yet
    app.run_worker(once=True)
    runs = {(r.workflow, r.user): r for r in app.runs(event_id=first)}
    assert set(runs) == {("lse:welcome", USER), ("lse:audit", USER)}
    assert runs["lse:welcome", USER].status == "suspended" and runs["lse:audit", USER].status == "completed"
    assert _ids(app.runs(welcome, event_id=first)) == [runs["lse:welcome", USER].run_id]
    assert _ids(app.runs("lse:audit", event_id=first, status="completed")) == [runs["lse:audit", USER].run_id]
    assert app.runs(audit, event_id=first, status="suspended") == []
    assert {r.workflow for r in app.runs(event_id=second)} == {"lse:welcome", "lse:audit"}
    assert {r.run_id for r in app.runs(event_id=second)}.isdisjoint(runs[k].run_id for k in runs)
    assert [r.user for r in app.runs(welcome, event_id=theirs)] == [other]
    assert app.runs(event_id=uuid.uuid4()) == []
    assert len(app.runs()) == 6


DAMAGED: dict[str, Any] = {
    "state-a-list": {"state": ["values"]},
    "values-untagged": {"state": {"values": {"v": {}}}},
    "values-a-list": {"state": {"values": [1, 2]}},
    "error-a-number": {"error": 7},
    "error-with-marks": {"error": {"code": "stranded", "message": "why", "stranded_by": " abc "}},
    "user-a-list": {"user": ["x"]},
    "user-no-tenant": {"user": {"id": str(uuid.uuid4()), "roles": []}},
}


def test_a_listed_run_is_the_run_get_run_reads_damaged_or_not(app_on: AppOn) -> None:
    """A listing reads its rows by position, ``get_run`` by column name: every run, in
    every status and with a damaged column, is the same ``RunInfo`` both ways."""
    app, _w, by = _mixed(app_on, FakeClock(T0))
    runs = sorted(set().union(*by.values()))
    intact = min(by["completed"])
    targets = [run_id for run_id in runs if run_id != intact][: len(DAMAGED)]
    for run_id, columns in zip(targets, DAMAGED.values(), strict=True):
        with app.engine.begin() as conn:
            conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(**columns))
    listed = {r.run_id: r for r in app.runs()}
    assert sorted(listed) == runs
    for run_id in runs:
        assert listed[run_id] == app.get_run(run_id)
    damaged = [listed[run_id] for run_id in targets]
    assert [r.steps for r in damaged[:3]] == [{}, {}, {}]
    assert damaged[3].error == {"code": "unreadable", "message": "the stored error is a JSON number, not an object"}
    assert damaged[4].error == {"code": "stranded", "message": "why"}
    assert [r.user for r in damaged[5:]] == [None, None]
    assert listed[intact].user == USER
    assert listed[intact].steps == {"n": 1}  # a completed run's values are shown
