"""Deploying a changed workflow while runs of it are suspended (docs/workflows.md,
"Changing a workflow that has suspended runs"): the worker that resumes them runs in
another process with the new code (tests/_deploy_app.py), on SQLite and PostgreSQL.

A run resumes when its step is still there and every key before it was stored; else it
stays suspended, stranded with the exact reason, until a compatible deploy resumes it
or an operator cancels it.  ``check --against`` says so before the deploy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _deploy_app import OTHER, T0, TEXT_ORDER, USER, WORKER_BOOT, Order, Signal, make_app
from _support import run_info

from kumiko_typed import App, BootError, Failure, Feature, Ok, manual
from kumiko_typed._cli import MIGRATE_FIRST, OTHERS_FIX, RUNS_FIX
from kumiko_typed._schema_check import SCHEMA_FIX
from kumiko_typed._tables import events, workflow_runs, workflow_waits
from kumiko_typed.testing import FakeClock

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def worker(url: str, version: str, at: datetime, seconds: float = 0.0) -> dict[str, int]:
    """One worker process of ``version``: its passes at ``at`` for ``seconds``."""
    done = subprocess.run(
        [sys.executable, "-c", WORKER_BOOT, str(TESTS), url, version, at.isoformat(), str(seconds)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    counts: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    exe = Path(sys.executable).with_name("kumiko-typed")
    run = [str(exe), *args]
    return subprocess.run(run, check=False, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


@pytest.fixture
def v1(db_url: str) -> Iterator[App]:
    app = make_app(db_url, "v1", FakeClock(T0))
    app.create_all()
    yield app
    app.dispose()


def _start(app: App, workflow: str, n: int, user: Any = USER, items: list[int] | None = None) -> uuid.UUID:
    return app.start_workflow(app.workflows[f"dep:{workflow}"], Order(n, items or []), user=user)


def _result(app: App, workflow: str, run_id: uuid.UUID, user: Any = USER) -> object:
    result = app.result(app.workflows[f"dep:{workflow}"], run_id, user=user)
    assert isinstance(result, Ok), result
    return result.data


def _pass(url: str, version: str, at: datetime) -> int:
    """One worker pass of ``version`` at ``at``, in this process: what it resumed."""
    app = make_app(url, version, FakeClock(at))
    try:
        return app.run_worker(once=True)["resumed"]
    finally:
        app.dispose()


def test_check_prints_a_stored_paths_control_characters_as_escapes(db_url: str, v1: App) -> None:
    """A path edited by hand in the run's row reaches the operator's terminal as escapes."""
    run_id = _start(v1, "job", 4)
    with v1.engine.begin() as conn:
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(path="cool\x1b[2J-off"))
    checked = cli("check", "_deploy_app:app_v1", "--against", db_url)
    assert checked.returncode == 1, checked.stderr
    assert "\x1b" not in checked.stderr
    assert "  dep:job at cool\\x1b[2J-off: " in checked.stderr


def test_check_against_never_writes_though_the_factory_creates_tables(db_url: str, v1: App) -> None:
    """The pre-deploy check promises to read only.  It built the App with the target's
    factory on that database, so the next release's ``create_all()`` created its new tables
    in production before the deploy; now the database refuses the write and the check says
    why.  A factory whose create_all() finds every table still checks."""
    run_id = _start(v1, "job", 4)
    tables = set(sa.inspect(v1.engine).get_table_names())
    checked = cli("check", "_deploy_app:app_v1_creating", "--against", db_url)
    assert checked.returncode == 0 and "every running and suspended run resumes" in checked.stdout, checked.stderr
    refused = cli("check", "_deploy_app:app_adding_a_table", "--against", db_url)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "The check only reads this database, and building MODULE:APP wrote to it" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert set(sa.inspect(v1.engine).get_table_names()) == tables  # no dep_ledger
    assert run_info(v1, run_id).status == "suspended"


def _no_after_snapshot(db_url: str) -> str:
    """The line naming the column a database made before it lacks, with the statement the
    App's engine writes for it (on PostgreSQL, its text columns are COLLATE "C")."""
    collated = ' COLLATE "C"' if db_url.startswith("postgresql") else ""
    return (
        "  - table kumiko_workflow_waits has no column after_snapshot: the database was made by an older"
        f" kumiko-typed; add it: ALTER TABLE kumiko_workflow_waits ADD COLUMN after_snapshot TEXT{collated}"
        " (docs/operations.md, Tables and migrations)"
    )


def test_check_against_names_the_tables_and_columns_an_older_release_lacks(db_url: str, v1: App) -> None:
    """A database last migrated by an older release (no ``after_snapshot``, no idempotency
    table, no parts table) was 'ok' for the pre-deploy check, whose runs it could read; the deploy then
    failed at create_all or, migrating with Alembic, at the first wait or keyed dispatch.
    The check names each one and says to migrate first, with no traceback."""
    _start(v1, "job", 4)
    with v1.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE kumiko_workflow_waits DROP COLUMN after_snapshot"))
        conn.execute(sa.text("DROP TABLE kumiko_idempotency_keys"))
        conn.execute(sa.text("DROP TABLE kumiko_workflow_parts"))
    checked = cli("check", "_deploy_app:app_v1", "--against", db_url)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stderr.splitlines()[1:] == [
        "  - table kumiko_workflow_parts does not exist: this release adds it; create it (app.create_all()"
        " or a migration)",
        _no_after_snapshot(db_url),
        "  - table kumiko_idempotency_keys does not exist: this release adds it; create it (app.create_all()"
        " or a migration)",
        SCHEMA_FIX,
    ]
    assert "3 schema problem(s) in this database:" in checked.stderr and checked.stdout == ""


def test_a_worker_on_a_database_an_older_release_made_names_what_to_migrate(db_url: str, v1: App) -> None:
    """Workers do not check the tables at start; the pass that meets a missing column ended
    with the driver's message and 'Is the server reachable?'.  Now it says what is missing."""
    _start(v1, "job", 4)
    with v1.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE kumiko_workflow_waits DROP COLUMN after_snapshot"))
    ran = cli("worker", "_deploy_app:app_v1", "--once", "--database-url", db_url)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stderr.splitlines()[-2:] == [_no_after_snapshot(db_url), MIGRATE_FIRST]
    assert "Traceback" not in ran.stderr and "reachable" not in ran.stderr


def test_cancel_and_requeue_on_a_database_an_older_release_made_name_what_to_migrate(db_url: str, v1: App) -> None:
    """``runs cancel`` and ``outbox requeue`` answered such a database with
    ``internal_error: ... raised OperationalError`` alone, where the listings and the
    worker name every column it lacks and say to migrate first."""
    run_id = _start(v1, "job", 4)
    with v1.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE kumiko_workflow_runs DROP COLUMN fingerprint"))
        conn.execute(sa.text("ALTER TABLE kumiko_outbox DROP COLUMN correlation_id"))
    lacks = [
        "  - table kumiko_outbox has no column correlation_id: the database was made by an older kumiko-typed;",
        "  - table kumiko_workflow_runs has no column fingerprint: the database was made by an older kumiko-typed;",
    ]
    for command in (["runs", "cancel"], ["outbox", "requeue"]):
        ran = cli(*command, "_deploy_app:app_v1", str(run_id), "--database-url", db_url)
        assert ran.returncode == 1, ran.stdout + ran.stderr
        *_, error, first, second, last = ran.stderr.splitlines()
        assert error.startswith("Error: internal_error: ") and last == MIGRATE_FIRST, ran.stderr
        assert sorted(line.partition(" add it")[0] for line in (first, second)) == lacks, ran.stderr
    with v1.engine.connect() as conn:
        status = conn.execute(sa.text("SELECT status FROM kumiko_workflow_runs")).scalar_one()
    assert status == "suspended"


def test_check_against_a_sqlite_file_that_is_not_there_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "typo.sqlite3"
    checked = cli("check", "_deploy_app:app_v1", "--against", f"sqlite:///{missing}")
    assert checked.returncode == 2 and f"there is no SQLite database '{missing}'" in checked.stderr, checked.stderr
    assert not missing.exists()  # was created, empty, and the check then failed on its missing tables


@pytest.mark.parametrize("version", ["code", "insert", "append", "branch"])
def test_a_run_waiting_in_cool_off_resumes_under_a_compatible_change(db_url: str, v1: App, version: str) -> None:
    run_id = _start(v1, "job", 4)
    assert (run_info(v1, run_id).status, run_info(v1, run_id).path) == ("suspended", "cool-off")
    assert v1.check_runs() == []  # the code that stored it resumes it, of course
    assert worker(db_url, version, T0 + HOUR)["resumed"] == 1
    info = run_info(v1, run_id)
    assert (info.status, info.error) == ("completed", None)
    assert _result(v1, "job", run_id) == "v2:40"  # the new resolver ran, on the stored quote
    assert info.steps.get("extra") == ("appended" if version == "append" else None)
    assert info.steps.get("arm") == ("taken" if version == "branch" else None)


@pytest.mark.parametrize(
    ("version", "reason", "target", "across"),
    [
        ("renamed", 'step "cool-off" at cool-off no longer exists', "app_renamed", "across"),
        ("needs", 'key "price" needed at cool-off was not stored', "app_needs", "fill"),
    ],
)
@pytest.mark.parametrize("back", ["v1", "across"])
def test_an_incompatible_deploy_is_reported_strands_the_runs_and_a_later_deploy_resumes_them(
    db_url: str, v1: App, version: str, reason: str, target: str, across: str, back: str
) -> None:
    mine, theirs, dropped = _start(v1, "job", 4), _start(v1, "job", 5, OTHER), _start(v1, "job", 6)
    looping = _start(v1, "loop", 1, items=[1, 2])  # untouched by this change: resumable

    checked = cli("check", f"_deploy_app:{target}", "--against", db_url)
    assert checked.returncode == 1, checked.stderr
    assert f"3 run(s) this code cannot resume:\n  dep:job at cool-off: {reason} (3 run(s))" in checked.stderr
    assert {str(mine), str(theirs), str(dropped)} <= set(checked.stderr.split()) and str(looping) not in checked.stderr
    in_process = make_app(db_url, version, FakeClock(T0))
    try:
        (group,) = in_process.check_runs()
        assert (group.workflow, group.path, group.reason) == ("dep:job", "cool-off", reason)
        assert set(group.run_ids) == {mine, theirs, dropped}
    finally:
        in_process.dispose()

    assert worker(db_url, version, T0 + HOUR)["resumed"] == 1  # the loop's run only
    for run_id in (mine, theirs, dropped):
        info = run_info(v1, run_id)
        assert (info.status, info.path, info.error) == (
            "suspended",
            "cool-off",
            {"code": "stranded", "message": reason},
        )
        assert info.steps["quote"] in (40, 50, 60)  # the state is intact
    listed = cli("runs", f"_deploy_app:{target}", "--stranded", "--database-url", db_url)
    assert listed.returncode == 0 and listed.stdout.count(reason) == 3 and str(looping) not in listed.stdout
    two = cli("runs", f"_deploy_app:{target}", "--stranded", "--limit", "2", "--database-url", db_url)
    assert two.returncode == 0 and two.stdout.count(reason) == 2, two.stderr  # filtered before the limit
    assert worker(db_url, version, T0 + HOUR)["resumed"] == 0  # passed by, not re-marked
    cancelled = v1.cancel_run(dropped, user=USER, reason="not worth it")
    assert isinstance(cancelled, Ok) and cancelled.data.status == "cancelled"

    redeploy = "v1" if back == "v1" else across
    assert worker(db_url, redeploy, T0 + 2 * HOUR)["resumed"] == 3  # and the loop's next item
    assert _result(v1, "job", mine) == ("v1:40" if back == "v1" else "v2:40")
    assert _result(v1, "job", theirs, OTHER) == ("v1:50" if back == "v1" else "v2:50")
    assert (run_info(v1, mine).error, run_info(v1, dropped).status) == (None, "cancelled")
    if redeploy == "fill":
        assert run_info(v1, mine).steps["price"] == 41  # filled from the stored quote


def test_a_run_suspended_in_a_loop_at_item_3_resumes_at_item_3_after_the_body_changed(db_url: str, v1: App) -> None:
    clock: Any = v1.clock
    run_id = _start(v1, "loop", 1, items=[0, 1, 2, 3])
    for _ in range(3):
        clock.advance(hours=1)
        v1.run_worker(once=True)
    assert run_info(v1, run_id).path == "item/do/#3/tick"
    assert worker(db_url, "code", T0 + 4 * HOUR)["resumed"] == 1
    info = run_info(v1, run_id)
    # Item 3 only, under the new body: a loop started over would wait at item 0 again.
    assert (info.status, info.steps["more"]) == ("completed", "changed body")
    assert _result(v1, "loop", run_id) == "v2:3"


def test_a_wait_in_a_named_branch_resumes_after_a_step_inserted_before_the_branch(db_url: str, v1: App) -> None:
    run_id = _start(v1, "nested", 1)
    assert run_info(v1, run_id).path == "vip/on_true/cool-off"
    assert worker(db_url, "insert", T0 + HOUR)["resumed"] == 1
    assert _result(v1, "nested", run_id) == "v2:vip"


def test_check_against_an_empty_database_finds_nothing(db_url: str, v1: App) -> None:
    assert v1.check_runs() == []
    checked = cli("check", "_deploy_app:app_renamed", "--against", db_url)
    assert checked.returncode == 0, checked.stderr
    assert "every running and suspended run resumes" in checked.stdout


def test_two_workers_of_different_versions_resume_only_their_own_runs(db_url: str, v1: App) -> None:
    """A rolling deploy: v1 and v2 (the wait renamed) workers at once.  Neither resumes
    a run of the other's definition, and every run completes under its own."""
    old = [_start(v1, "job", n) for n in range(8)]
    v2 = make_app(db_url, "renamed", FakeClock(T0))
    try:
        new = [_start(v2, "job", n) for n in range(8)]
    finally:
        v2.dispose()
    resumed = _workers_at_once(db_url, ("v1", "renamed"), T0 + HOUR, 4)
    assert resumed == [8, 8]
    for n, run_id in enumerate(old):
        assert _result(v1, "job", run_id) == f"v1:{n * 10}"
    for n, run_id in enumerate(new):
        assert _result(v1, "job", run_id) == f"v2:{n * 10}"
    assert not [r for r in v1.runs() if r.status == "failed"]


def test_workers_of_two_releases_that_retyped_a_payload_field_resume_only_the_runs_they_read(
    db_url: str, v1: App
) -> None:
    """A rolling deploy that makes ``Order.n`` text (``n-text``): a worker process of each
    release at once, then one more pass of each.  Each strands the other's runs, naming
    the field and both types, never the value, and leaves them to the other, which resumes
    them: before the codec checked the fields, the old worker resumed the new release's
    runs with ``n="4"`` (``quote`` came out ``"4444444444"``) and the new one the old
    release's with an integer.  Each release's check lists the other's runs."""
    old = [_start(v1, "job", n) for n in range(3)]
    v2 = make_app(db_url, "n-text", FakeClock(T0))
    try:
        new = [v2.start_workflow(v2.workflows["dep:job"], TEXT_ORDER(str(n)), user=USER) for n in range(3)]
    finally:
        v2.dispose()
    v2 = make_app(db_url, "n-text", FakeClock(T0))
    try:
        (theirs,) = v2.check_runs()
    finally:
        v2.dispose()
    (mine,) = v1.check_runs()
    for group, ids, stored, now in ((theirs, old, "an int", "str"), (mine, new, "a str", "int")):
        assert (group.path, set(group.run_ids)) == ("cool-off", set(ids))
        assert group.reason == (
            f"at step cool-off: the stored state cannot be read: stored _deploy_app.Order cannot be rebuilt: "
            f"its 'n' holds {stored}, and Order now says {now}; a deploy with the class as the run stored it "
            "resumes the run"
        )

    _workers_at_once(db_url, ("v1", "n-text"), T0 + HOUR, 2)
    for version in ("v1", "n-text"):  # whatever the other stranded meanwhile
        _pass(db_url, version, T0 + HOUR)
    for n, run_id in enumerate(old):
        assert _result(v1, "job", run_id) == f"v1:{n * 10}"
    for n, run_id in enumerate(new):
        assert _result(v1, "job", run_id) == f"v2:{str(n) * 10}"
    assert not [r for r in v1.runs() if r.status == "failed"]
    assert v1.check_runs() == []


def _workers_at_once(url: str, versions: tuple[str, ...], at: datetime, seconds: float) -> list[int]:
    """Worker processes of ``versions`` running their passes at the same time: what each resumed."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER_BOOT, str(TESTS), url, version, at.isoformat(), str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for version in versions
    ]
    resumed = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        resumed.append(json.loads(out.strip().splitlines()[-1])["resumed"])
    return resumed


@pytest.mark.parametrize("back", ["v1", "across", "rolling"])
def test_an_event_that_came_while_a_run_was_stranded_resumes_it_under_a_compatible_deploy(
    db_url: str, v1: App, back: str
) -> None:
    """The wait ``got`` is renamed ``heard`` (incompatible); that worker's feed reads the
    event first.  The event is not lost: a compatible worker later resumes the run with
    it (not with ``None`` at the timeout), one after the other or both at once."""
    run_id, unheard = _start(v1, "signal", 7), _start(v1, "signal", 8)
    assert worker(db_url, "v1", T0 + MINUTE)["resumed"] == 0  # arms the waits
    assert v1.dispatch(v1.handlers["dep:emit"], Signal(7, "hello"), user=USER) == Ok(None)
    if back == "rolling":
        assert sum(_workers_at_once(db_url, ("renamed", "v1"), T0 + 2 * MINUTE, 3)) == 1
    else:
        assert worker(db_url, "renamed", T0 + 2 * MINUTE)["resumed"] == 0
        info = run_info(v1, run_id)
        assert (info.status, info.path, info.error) == (
            "suspended",
            "got",
            {"code": "stranded", "message": 'step "got" at got no longer exists'},
        )
        assert worker(db_url, back, T0 + 3 * MINUTE)["resumed"] == 1
    assert _result(v1, "signal", run_id) == ("v2:hello" if back == "across" else "v1:hello")
    assert run_info(v1, unheard).status == "suspended"  # no event of its key came


def test_the_look_back_of_a_deploy_that_arms_a_stranded_wait_again_stays_in_the_runs_tenant(
    db_url: str, v1: App
) -> None:
    """Two tenants' runs wait for ``Signal`` with the same key 7.  The tenant's event comes
    while a worker of the deploy that renamed the wait runs: it strands that tenant's run
    and disarms its wait.  The compatible worker that arms it again looks back over the
    events since: the tenant's run resumes with its event, and the other tenant's run,
    same key, is not answered by it (it times out with ``None``).  Behaviour that held."""
    mine, theirs = _start(v1, "signal", 7), _start(v1, "signal", 7, OTHER)
    assert _pass(db_url, "v1", T0 + MINUTE) == 0  # arms the waits
    assert v1.dispatch(v1.handlers["dep:emit"], Signal(7, "hello"), user=USER) == Ok(None)
    assert _pass(db_url, "renamed", T0 + 2 * MINUTE) == 0
    assert (run_info(v1, mine).error or {}).get("code") == "stranded"
    assert (run_info(v1, theirs).status, run_info(v1, theirs).error) == ("suspended", None)
    assert _pass(db_url, "v1", T0 + 3 * MINUTE) == 1
    assert _result(v1, "signal", mine) == "v1:hello"
    assert (run_info(v1, theirs).status, run_info(v1, theirs).error) == ("suspended", None)
    assert _pass(db_url, "v1", T0 + 3 * HOUR) == 1  # its timeout
    assert _result(v1, "signal", theirs, OTHER) == "v1:timed out"


REMOVED = (
    "workflow dep:{} is not registered in this App: its runs wait, untouched, until a deploy registers it "
    "again (or cancel them: app.cancel_run, kumiko-typed runs cancel)"
)


@pytest.mark.parametrize("back", ["v1", "rolling"])
def test_runs_of_a_removed_workflow_wait_untouched_and_get_the_event_that_came_meanwhile(
    db_url: str, v1: App, back: str
) -> None:
    """A deploy without the workflows: the check lists their runs with the way out, its
    worker changes none of them, and its feed reading the awaited event does not lose it
    (the cursor moves on): registered again, the run resumes with the event, not with
    ``None`` at its timeout; also with both versions' workers at once."""
    heard, job = _start(v1, "signal", 7), _start(v1, "job", 4)
    assert worker(db_url, "v1", T0 + MINUTE)["resumed"] == 0  # arms the wait
    checked = cli("check", "_deploy_app:app_gone", "--against", db_url)
    assert checked.returncode == 1, checked.stderr
    assert f"dep:job at cool-off: {REMOVED.format('job')} (1 run(s))" in checked.stderr, checked.stderr
    assert f"dep:signal at got: {REMOVED.format('signal')} (1 run(s))" in checked.stderr, checked.stderr
    assert checked.stderr.endswith(f"{RUNS_FIX}\n"), checked.stderr  # and what to do about them
    assert v1.dispatch(v1.handlers["dep:emit"], Signal(7, "hello"), user=USER) == Ok(None)
    before = {run_id: run_info(v1, run_id) for run_id in (heard, job)}
    if back == "rolling":
        assert sum(_workers_at_once(db_url, ("gone", "v1"), T0 + 2 * MINUTE, 3)) == 1
    else:
        assert worker(db_url, "gone", T0 + 2 * HOUR)["resumed"] == 0  # past both wake times
        assert {run_id: run_info(v1, run_id) for run_id in (heard, job)} == before
        assert worker(db_url, "v1", T0 + 2 * MINUTE)["resumed"] == 1
    assert _result(v1, "signal", heard) == "v1:hello"
    assert run_info(v1, job).status == "suspended"
    assert worker(db_url, "v1", T0 + HOUR)["resumed"] == 1
    assert _result(v1, "job", job) == "v1:40"


def test_a_run_neither_version_of_a_rolling_deploy_resumes_is_marked_once_per_version(db_url: str, v1: App) -> None:
    """``renamed`` and ``needs`` both strand a v1 run waiting in ``cool-off``: each marks
    it once, and later passes of either write nothing (the row's ``updated_at`` stays)."""
    run_ids = [_start(v1, "job", n) for n in range(3)]

    def stamps() -> dict[uuid.UUID, Any]:
        with v1.engine.connect() as conn:
            rows = conn.execute(sa.select(workflow_runs.c.run_id, workflow_runs.c.updated_at, workflow_runs.c.error))
            return {r.run_id: (r.updated_at, r.error) for r in rows if r.run_id in run_ids}

    for minute, version in enumerate(("renamed", "needs"), start=1):
        assert worker(db_url, version, T0 + HOUR + minute * MINUTE)["resumed"] == 0
    marked = stamps()
    assert {error["message"] for _at, error in marked.values()} == {'key "price" needed at cool-off was not stored'}
    for minute, version in enumerate(("renamed", "needs", "renamed", "needs"), start=3):
        assert worker(db_url, version, T0 + HOUR + minute * MINUTE)["resumed"] == 0
    assert stamps() == marked
    assert worker(db_url, "fill", T0 + 2 * HOUR)["resumed"] == 3  # and a compatible one resumes them


def test_failure_is_never_the_answer_to_a_changed_definition(db_url: str, v1: App) -> None:
    """Stranding is not failing: ``app.result`` of a stranded run says it is suspended."""
    run_id = _start(v1, "job", 4)
    worker(db_url, "renamed", T0 + HOUR)
    result = v1.result(v1.workflows["dep:job"], run_id, user=USER)
    assert isinstance(result, Failure) and result.details == {
        "status": "suspended",
        "error": {"code": "stranded", "message": 'step "cool-off" at cool-off no longer exists'},
    }


def test_renamed_and_fill_are_checked_at_boot() -> None:
    f: Feature[Any] = Feature("bad")
    pipeline = f.workflow_pipeline(Order).compute("quote", lambda c: 1).wait("PT1H", name="pause")
    f.workflow(
        "job",
        trigger=manual(Order),
        pipeline=pipeline,
        renamed={"cool-off": "nowhere", "quote": "pause"},
        fill={"price": lambda stored: 1, "quote": "not a function"},  # type: ignore[dict-item]
    )
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        'workflow bad:job: renamed= maps "cool-off" to "nowhere", which is no step of this workflow; '
        "map it to the name of the step that replaces it",
        'workflow bad:job: renamed= maps "quote", which is still a step of this workflow (a stored path is ambiguous); '
        "map only names the workflow no longer has",
        'workflow bad:job: fill= fills "price", which no step of this workflow sets; fill a key one of its steps sets',
        'workflow bad:job: fill= for "quote" must be a function of the stored values, not str',
    ]


def test_sibling_steps_with_the_same_name_are_refused_at_boot() -> None:
    """A stored path names its step; two siblings of one name would make it ambiguous
    (``cool-off~2`` is the first ``cool-off`` once the other is removed).  Unnamed
    siblings of one method, and one name in two arms, are fine."""
    f: Feature[Any] = Feature("dup")
    pipeline = (
        f.workflow_pipeline(Order)
        .compute("quote", lambda c: 1)
        .wait("PT1H", name="cool-off")
        .wait("PT1H")
        .wait("PT1H")
        .wait("PT2H", name="cool-off")
        .wait("PT1H", name="quote")
        .branch(
            name="vip",
            when=lambda c: True,
            on_true=lambda b: b.wait("PT1H", name="hold").retry(times=2, name="hold", do=lambda r: r),
            on_false=lambda b: b.wait("PT1H", name="hold"),
        )
    )
    f.workflow("job", trigger=manual(Order), pipeline=pipeline)
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    same = "a stored run's path would be ambiguous"
    assert raised.value.problems == [
        f'workflow dup:job: steps 1 (workflow.wait "cool-off") and 4 (workflow.wait "cool-off") have the same name '
        f'"cool-off": {same}; give the workflow.wait another name=, e.g. "cool-off-2"',
        f'workflow dup:job: steps 0 (compute "quote") and 5 (workflow.wait "quote") have the same name "quote": '
        f'{same}; give the workflow.wait another name=, e.g. "quote-2"',
        f'workflow dup:job: steps 6/on_true/0 (workflow.wait "hold") and 6/on_true/1 (workflow.retry "hold") have '
        f'the same name "hold": {same}; give the workflow.retry another name=, e.g. "hold-2"',
    ]


def test_a_name_clash_with_a_key_says_to_rename_the_step_with_name() -> None:
    """A key has no ``name=``: the advice names the sibling whose ``name=`` to change, also
    when it comes first (as the plugin's kumiko-duplicate-step does)."""
    f: Feature[Any] = Feature("dup")
    f.workflow(
        "job",
        trigger=manual(Order),
        pipeline=f.workflow_pipeline(Order).wait("PT1H", name="total").compute("total", lambda c: 1),
    )
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    assert raised.value.problems == [
        'workflow dup:job: steps 0 (workflow.wait "total") and 1 (compute "total") have the same name "total": '
        'a stored run\'s path would be ambiguous; give the workflow.wait another name=, e.g. "total-2"'
    ]


def test_an_empty_or_non_text_name_is_refused_at_boot() -> None:
    """Before, ``wait(..., name="")`` booted, and its run, stored at the empty path, was
    stranded ("an empty step path") by the very definition that stored it, for good."""
    f: Feature[Any] = Feature("noname")
    number: Any = 5
    pipeline = (
        f.workflow_pipeline(Order)
        .wait("PT1H", name="")
        .branch(name="", when=lambda c: True, on_true=lambda b: b.retry(times=2, name="", do=lambda r: r))
        .wait("PT1H", name=number)
    )
    f.workflow("job", trigger=manual(Order), pipeline=pipeline)
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    empty = 'is empty; give it a name such as "cool-off", or leave name= out'
    assert raised.value.problems == [
        f'workflow noname:job, step 0 (workflow.wait): name= of step "wait" {empty}',
        f'workflow noname:job, step 1 (branch): name= of step "branch" {empty}',
        f'workflow noname:job, step 1/on_true/0 (workflow.retry): name= of step "retry" {empty}',
        'workflow noname:job, step 2 (workflow.wait): name= of step "wait" must be a string, not int',
    ]


def test_a_suspending_step_whose_stored_path_cannot_fit_is_refused_at_boot() -> None:
    """A run stores the path of the step it waits at by the names leading to it, at most
    400 characters.  Before, a definition whose path could never fit booted, and every run
    reaching the step failed there (``unstorable_state``); a loop's first iteration counts
    (``#0``), and a path that fits just does boots."""
    f: Feature[Any] = Feature("far")
    f.event(Signal)
    fits = "n" * (400 - len("@branch/on_true/"))
    pipeline = (
        f.workflow_pipeline(Order)
        .branch(when=lambda c: True, on_true=lambda b: b.wait("PT1H", name=fits))
        .for_each("line", over=lambda c: [1], do=lambda b: b.wait("PT1H", name="w" * 390))
        .retry(times=2, name="r" * 398, do=lambda r: r)
        .wait_for_event("e" * 401, Signal, key=lambda c: 1, event_key=lambda e: 1, timeout="PT1H")
    )
    f.workflow("job", trigger=manual(Order), pipeline=pipeline)
    with pytest.raises(BootError) as raised:
        App([f], database_url="sqlite://")
    fix = "shorten those names (a key, or name= of a wait, branch or retry)"
    assert [p.split("): ", 1)[1] for p in raised.value.problems] == [
        f"a run suspended here stores its path by the names of the steps leading to it, at least {n} characters, "
        f"and at most 400 fit; {fix}"
        for n in (401, 401, 401)
    ]
    assert [p.split(" (", 1)[0] for p in raised.value.problems] == [
        f"workflow far:job, step line/do/{'w' * 32}...{'w' * 37}",
        f"workflow far:job, step {'r' * 40}...{'r' * 37}",
        f"workflow far:job, step {'e' * 40}...{'e' * 37}",
    ]


def test_a_run_stored_by_index_before_paths_named_steps_resumes_if_its_step_is_there(db_url: str, v1: App) -> None:
    """Runs stored by an earlier release count steps by index (``1``: the wait); they are
    read under the deployed definition by index and checked by the same rule."""
    kept, moved = _start(v1, "job", 4), _start(v1, "job", 5)
    with v1.engine.begin() as conn:
        for run_id, path in ((kept, "1"), (moved, "0")):  # ``0`` is the compute now: no wait there
            state = dict(conn.scalar(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)))
            del state["addressing"], state["kind"]
            update = workflow_runs.update().where(workflow_runs.c.run_id == run_id)
            conn.execute(update.values(path=path, state=state))
    assert [(g.path, g.reason) for g in v1.check_runs()] == [("0", 'compute "quote" at 0 is not a step a run waits in')]
    assert worker(db_url, "code", T0 + HOUR)["resumed"] == 1
    assert _result(v1, "job", kept) == "v2:40"
    assert (run_info(v1, moved).status, run_info(v1, moved).error["code"]) == ("suspended", "stranded")


def test_check_names_why_this_code_cannot_read_the_event_a_run_noted_never_its_values(db_url: str, v1: App) -> None:
    """A run whose segment lost a race after its ``Signal`` woke it notes the event
    (tests/workflows/test_workflow_deploy_edits.py); under code whose ``Signal`` reads it
    no more, ``check --against`` gives the reason ``read_stream`` would (docs/event-store.md):
    which event, stored how, the field by path — was "(ClassValidationError)" — and no
    stored value; the worker strands the run with that very reason."""
    run_id = _start(v1, "signal", 4)
    v1.run_worker(once=True)  # arms the wait
    assert v1.dispatch(v1.handlers["dep:emit"], Signal(4, "SECRET"), user=USER) == Ok(None)
    with v1.engine.begin() as conn:  # what a segment that lost its race after the event leaves
        event_id = conn.scalar(sa.select(events.c.event_id).where(events.c.type == "signal"))
        state = conn.scalar(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id))
        noted = {**state, "woken_by": str(event_id)}
        conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(state=noted, wake_at=T0))
        conn.execute(workflow_waits.delete().where(workflow_waits.c.run_id == run_id))
    reason = (
        f"at step got: the stored state cannot be read: the event {event_id} that woke the run ('signal', stored at "
        "schema version 1) does not load as Signal: expected an integer at $.note; a deploy with the class as the "
        "run stored it resumes the run"
    )

    checked = cli("check", "_deploy_app:app_retyped", "--against", db_url)
    assert checked.returncode == 1, checked.stderr
    assert f"  dep:signal at got: {reason} (1 run(s))" in checked.stderr, checked.stderr
    assert "SECRET" not in checked.stderr
    assert worker(db_url, "retyped", T0 + MINUTE)["resumed"] == 0
    info = run_info(v1, run_id)
    assert (info.status, info.path, info.error) == ("suspended", "got", {"code": "stranded", "message": reason})
    # As the reason says, code whose Signal reads the event resumes the run: only a field's
    # type differs, and the run was once marked with the same mark as this code's, so
    # v1's workers passed it by for good.
    assert worker(db_url, "v1", T0 + 2 * MINUTE)["resumed"] == 1
    assert run_info(v1, run_id).status == "completed"


def test_check_against_says_a_reasons_own_fix_once(db_url: str, v1: App) -> None:
    """A retry replaced by a wait of its name: the run's reason says what to do (deploy
    the retry back, or cancel the run), and the check printed the general fix after it
    too — the same advice twice.  A list whose every reason says its fix ends with them."""
    run_id = _start(v1, "retrier", 4)
    assert run_info(v1, run_id).path == "again/#2"
    checked = cli("check", "_deploy_app:app_retry_as_wait", "--against", db_url)
    assert checked.returncode == 1, checked.stderr
    assert checked.stderr.splitlines() == [
        "1 run(s) this code cannot resume:",
        '  dep:retrier at again/#2: the step at again is now workflow.wait "again", not a workflow.retry: attempt'
        " #2, which the run is suspended to make, does not exist; deploy the workflow with the retry back, or"
        " cancel the run (1 run(s))",
        f"    {run_id}",
    ]


def test_check_against_says_the_general_fix_for_the_reasons_without_their_own(db_url: str, v1: App) -> None:
    """Beside a reason with its own fix, the general one is said for the others only;
    with none, as before."""
    retrying, job = _start(v1, "retrier", 4), _start(v1, "job", 4)
    with v1.engine.begin() as conn:  # a step no release has: a reason without a fix of its own
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == job).values(path="gone"))
    mixed = cli("check", "_deploy_app:app_retry_as_wait", "--against", db_url)
    assert mixed.returncode == 1, mixed.stderr
    assert {str(retrying), str(job)} <= set(mixed.stderr.split())
    assert mixed.stderr.endswith(f"{OTHERS_FIX}\n") and mixed.stderr.count("cancel") == 2, mixed.stderr
    alone = cli("check", "_deploy_app:app_v1", "--against", db_url)
    assert alone.returncode == 1 and str(retrying) not in alone.stderr, alone.stderr
    assert alone.stderr.endswith(f"{RUNS_FIX}\n"), alone.stderr


def test_a_run_in_the_first_of_two_unnamed_waits_is_stranded_by_workers_without_it_and_resumed_by_those_with_it(
    db_url: str, v1: App
) -> None:
    """Worker processes of two releases over one database: ``first-removed`` lacks the
    first of ``twice``'s unnamed waits.  Its workers moved a run waiting there to the
    other wait (``@wait`` names it now), which it then passed as done: the run completed
    an hour in, without its two hours' wait.  Now they strand it, and the workers of
    ``v1`` resume it where it stopped; a run of either release in ``@wait~2`` is stranded
    by the new workers too (that step is gone), and resumed by the old ones."""
    early, late = _start(v1, "twice", 4), _start(v1, "twice", 5)
    assert worker(db_url, "v1", T0 + HOUR)["resumed"] == 2  # both now in @wait~2
    first = _start(v1, "twice", 6)  # in @wait
    assert worker(db_url, "first-removed", T0 + 4 * HOUR)["resumed"] == 0
    for run_id, path in ((early, "@wait~2"), (late, "@wait~2"), (first, "@wait")):
        info = run_info(v1, run_id)
        assert (info.status, info.path, (info.error or {}).get("code")) == ("suspended", path, "stranded"), info
    assert "was one of 2 unnamed wait steps there, and 1 are there now" in run_info(v1, first).error["message"]
    assert worker(db_url, "v1", T0 + 4 * HOUR)["resumed"] == 3
    assert [run_info(v1, r).status for r in (early, late)] == ["completed", "completed"]
    assert run_info(v1, first).path == "@wait~2"  # waited its first hour; now the second wait
    assert worker(db_url, "v1", T0 + 7 * HOUR)["resumed"] == 1
    assert _result(v1, "twice", first) == "v1:done"
