"""The SQLite database file: one in a folder that does not exist, and one deleted under
a running App (an operator's ``rm
kumiko.sqlite3*``, a clean-up script, a deploy that replaces the folder).

An open SQLite connection goes on with the file it opened, deleted or not: the App's
pooled connections and its looping worker kept committing there, each dispatch ``Ok``
and each start an id, into a file no later process can open — all of it lost, none of
it reported.  A pooled connection whose file is no longer the one at the path is now
dropped as it leaves the pool, and the new one opens what is there: an empty database,
whose missing tables each write and each worker pass report.

A file in a folder that does not exist (a fresh checkout without ``data/``) failed
``create_all`` with SQLite's "unable to open database file", which names no file; so did a
file that holds no database or a damaged one ("file is not a database", "database disk
image is malformed")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from _worker_thread import Passes
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok

TESTS = Path(__file__).resolve().parents[1]
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
#: Bounds a hang only.
BOUND = 30


class FdNote(Entity):
    __tablename__ = "fd_note"
    text: Mapped[str]


@attrs.frozen
class Add:
    text: str


f = Feature("fd")
f.entity(FdNote)
add = f.write_handler(
    "add",
    f.pipeline(Add)
    .create("note", FdNote, data=lambda c: FdNote(text=c.payload.text))
    .return_(lambda c: ok(c.steps["note"].id)),
)


def _delete(url: str) -> None:
    database = url.removeprefix("sqlite:///")
    for suffix in ("", "-wal", "-shm"):
        Path(database + suffix).unlink(missing_ok=True)


def test_a_write_after_the_file_was_deleted_is_not_reported_done(make_app: Callable[..., App]) -> None:
    app = make_app([f])
    assert isinstance(app.dispatch(add, Add("before"), user=ADA), Ok)  # the pool holds a connection
    _delete(str(app.engine.url))

    result = app.dispatch(add, Add("after"), user=ADA)

    assert isinstance(result, Failure), result  # was Ok: a note in a file that is gone


def test_a_looping_worker_reports_the_deleted_file_each_pass(
    make_app: Callable[..., App], worker_passes: Passes
) -> None:
    app = make_app([f])
    worker = threading.Thread(target=app.run_worker, kwargs={"poll_interval": 0.05})
    worker.start()
    try:
        worker_passes.await_first(worker)  # a side's first pass finding no table stops the worker
        _delete(str(app.engine.url))
        deadline = time.monotonic() + BOUND
        while "no such table" not in worker_passes.caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        app.stop_worker()
        worker.join(30)
    assert not worker.is_alive()
    assert "no such table" in worker_passes.caplog.text  # was silent: its passes went on in the deleted file
    assert os.path.exists(str(app.engine.url.database))


def test_a_database_in_a_folder_that_does_not_exist_is_named_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "data" / "shop.sqlite3"
    app = App([f], database_url=f"sqlite:///{path}")
    try:
        with pytest.raises(OperationalError) as raised:
            app.create_all()
    finally:
        app.dispose()
    assert f"unable to open database file {path}: its folder {path.parent} does not exist" in str(raised.value)


@pytest.mark.parametrize(
    ("damage", "said", "fix"),
    [
        ("foreign", "file is not a database", "it holds no SQLite database"),
        ("cut short", "database disk image is malformed", "the file is damaged (cut short, or overwritten)"),
    ],
)
def test_a_damaged_database_file_is_named_with_the_fix_and_left_as_it_is(
    tmp_path: Path, damage: str, said: str, fix: str
) -> None:
    """SQLite's "file is not a database" and "database disk image is malformed" named no
    file either: a service's start-up (``create_all``) or a worker said only that."""
    path = tmp_path / "shop.sqlite3"
    made = App([f], database_url=f"sqlite:///{path}")
    made.create_all()
    made.dispatch(add, Add("kept"), user=ADA)
    made.dispose()
    if damage == "foreign":
        path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 40)  # a zip file where the database was
    else:
        path.write_bytes(path.read_bytes()[:3000])  # a copy cut short
    before = path.read_bytes()
    app = App([f], database_url=f"sqlite:///{path}")
    try:
        with pytest.raises(DatabaseError) as raised:
            app.create_all()
        assert f"{said} {path}: {fix}" in str(raised.value)
        assert "restore it from a backup" in str(raised.value)
        with pytest.raises(DatabaseError, match="restore it from a backup"):
            app.run_worker(once=True)
        failure = app.dispatch(add, Add("new"), user=ADA)
        assert isinstance(failure, Failure) and failure.code == "internal_error"
        assert str(path) not in failure.message and said not in failure.message  # the log has it
    finally:
        app.dispose()
    assert path.read_bytes() == before  # nothing written into it


_AS_NOBODY = """
import os, sys
from sqlalchemy.exc import OperationalError
import kumiko_typed._app, sqlalchemy.dialects.sqlite, sqlite3  # imported while the files are readable
from test_sqlite_database_file import App, f
os.setgid(65534)
os.setuid(65534)
app = App([f], database_url="sqlite:///" + sys.argv[1])
try:
    app.create_all()
except OperationalError as exc:
    print(exc)
"""


def test_a_database_whose_folder_this_process_cannot_write_is_named_with_the_fix(tmp_path: Path) -> None:
    """Its -wal and -shm files cannot be made: SQLite says "attempt to write a readonly
    database" as the first connection opens it, naming no file.  (Root writes anyway: as
    root, the App runs in a child process of user nobody.)"""
    folder = Path(tempfile.mkdtemp(prefix="kumiko-ro-"))  # nobody cannot enter pytest's own folders
    path = folder / "shop.sqlite3"
    try:
        made = App([f], database_url=f"sqlite:///{path}")
        made.create_all()
        made.dispose()
        folder.chmod(0o555)
        if os.geteuid() == 0:
            paths = [str(Path(__file__).parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
            child = [sys.executable, "-c", _AS_NOBODY, str(path)]
            said = subprocess.run(child, capture_output=True, text=True, env=env, timeout=60, check=True).stdout
        else:
            app = App([f], database_url=f"sqlite:///{path}")
            with pytest.raises(OperationalError) as raised:
                app.create_all()
            app.dispose()
            said = str(raised.value)
        assert f"attempt to write a readonly database {path}: this process cannot write the file" in said
        assert "give the service's user write access to both" in said
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)
