"""The throw-away PostgreSQL server of kumiko_typed.testing.postgres: starts, isolates databases per test,
listens on loopback only, never runs as root, and leaves nothing running after a killed test run."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from kumiko_typed.testing import postgres
from kumiko_typed.testing.postgres import PostgresServer

pytestmark = pytest.mark.postgres

_metadata = sa.MetaData()
_ITEMS = sa.Table(
    "harness_items",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(50), nullable=False),
)


@pytest.fixture
def engine(fresh_postgres_url: str) -> Iterator[sa.Engine]:
    eng = sa.create_engine(fresh_postgres_url)
    yield eng
    eng.dispose()


def test_session_database_accepts_connections(postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql+psycopg://")
    eng = sa.create_engine(postgres_url)
    try:
        with eng.connect() as conn:
            assert conn.scalar(sa.text("SELECT current_database()")) == "kumiko_test"
            assert conn.scalar(sa.text("SHOW server_encoding")) == "UTF8"
    finally:
        eng.dispose()


def test_create_insert_read_back_in_a_transaction(engine: sa.Engine) -> None:
    _metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(_ITEMS), [{"name": "a"}, {"name": "b"}])
        # Visible inside the transaction ...
        assert list(conn.scalars(sa.select(_ITEMS.c.name).order_by(_ITEMS.c.id))) == ["a", "b"]
    # ... and committed.
    with engine.connect() as conn:
        assert list(conn.scalars(sa.select(_ITEMS.c.name).order_by(_ITEMS.c.id))) == ["a", "b"]

    # A rolled-back transaction leaves nothing behind.
    with engine.connect() as conn:
        trans = conn.begin()
        conn.execute(sa.insert(_ITEMS).values(name="c"))
        trans.rollback()
        assert conn.scalar(sa.select(sa.func.count()).select_from(_ITEMS)) == 2


def test_fresh_databases_are_independent(kumiko_postgres: PostgresServer, engine: sa.Engine) -> None:
    other_name = "t_harness_other_" + os.urandom(4).hex()
    other_url = kumiko_postgres.create_database(other_name)
    other = sa.create_engine(other_url)
    try:
        assert sa.make_url(other_url).database != engine.url.database
        _metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(sa.insert(_ITEMS).values(name="only here"))
        # The table does not exist in the other fresh database.
        assert not sa.inspect(other).has_table("harness_items")
        _metadata.create_all(other)
        with other.connect() as conn:
            assert conn.scalar(sa.select(sa.func.count()).select_from(_ITEMS)) == 0
        # A connection still open at teardown does not block the DROP.
        lingering = other.connect()
        lingering.execute(sa.text("SELECT 1"))
    finally:
        kumiko_postgres.drop_database(other_name)
        other.dispose()
    with engine.connect() as conn:
        names = set(conn.scalars(sa.text("SELECT datname FROM pg_database")))
    assert other_name not in names
    assert engine.url.database in names


def test_fresh_database_starts_empty(engine: sa.Engine) -> None:
    # Other tests create harness_items in their own fresh databases; none of it shows up here.
    assert sa.inspect(engine).get_table_names() == []


def test_listens_on_loopback_only(kumiko_postgres: PostgresServer, engine: sa.Engine) -> None:
    if kumiko_postgres.external:
        pytest.skip("KUMIKO_TEST_POSTGRES_URL: an external server is configured as its owner chose")
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SHOW listen_addresses")) == "127.0.0.1"
        assert conn.scalar(sa.text("SHOW fsync")) == "off"
        assert int(conn.scalar(sa.text("SHOW max_connections"))) >= 200


def test_server_does_not_run_as_root(kumiko_postgres: PostgresServer, engine: sa.Engine) -> None:
    if kumiko_postgres.external:
        pytest.skip("KUMIKO_TEST_POSTGRES_URL: the external server's data directory is not ours")
    with engine.connect() as conn:
        data_dir = conn.scalar(sa.text("SELECT current_setting('data_directory')"))
    assert data_dir is not None
    assert os.path.samefile(data_dir, str(kumiko_postgres.data_dir))
    owner = os.stat(data_dir).st_uid
    assert owner != 0
    if os.geteuid() == 0:
        assert kumiko_postgres.run_as is not None
        assert owner == kumiko_postgres.run_as.pw_uid
    # The postmaster process itself runs as that owner.
    if not os.path.isdir("/proc"):
        return
    pid = int((kumiko_postgres.data_dir / "postmaster.pid").read_text().split()[0])  # type: ignore[operator]
    assert os.stat(f"/proc/{pid}").st_uid == owner


#: A test process of its own: starts a server, says where, and waits to be killed.
_CHILD = """
import time
from kumiko_typed.testing.postgres import start_test_postgres

server = start_test_postgres()
print(server.base_dir, flush=True)
time.sleep(600)
"""


def _child_with_a_server() -> tuple[subprocess.Popen[str], Path, int]:
    """The child process, its server's directory and the postmaster's pid."""
    env = {k: v for k, v in os.environ.items() if k != "KUMIKO_TEST_POSTGRES_URL"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    base = Path(child.stdout.readline().strip())
    postmaster = int((base / "data" / "postmaster.pid").read_text().split()[0])
    return child, base, postmaster


def _running(pid: int) -> bool:
    try:
        return b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.fixture
def local(kumiko_postgres: PostgresServer) -> PostgresServer:
    if kumiko_postgres.external:
        pytest.skip("KUMIKO_TEST_POSTGRES_URL: no server of ours to kill")
    return kumiko_postgres


def test_a_run_killed_with_sigterm_stops_its_server_and_removes_its_directory(local: PostgresServer) -> None:
    """A CI timeout or ``timeout pytest`` ends the run with SIGTERM, whose default action
    skips atexit: the server went on running, its directory left, until some later run of
    the same user swept it (never, on a runner that does not run the suite again)."""
    child, base, postmaster = _child_with_a_server()
    try:
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=120) == -signal.SIGTERM  # it still dies of the signal
        assert not base.exists()
        assert not _running(postmaster)
    finally:
        child.kill()
        if base.exists():
            postgres._stop_dir(base, local.bin_dir, local.run_as)


def test_the_server_of_a_run_killed_with_sigkill_is_swept_by_the_next_start(local: PostgresServer) -> None:
    """Nothing runs on SIGKILL: the next start stops the dead run's server and deletes its
    directory (docs/testing-handlers.md)."""
    child, base, postmaster = _child_with_a_server()
    child.kill()
    child.wait(timeout=60)
    assert base.exists() and _running(postmaster)
    server = postgres.start_test_postgres()
    assert server is not None
    server.stop()
    assert not base.exists()
    assert not _running(postmaster)


@pytest.mark.parametrize("end", ["sigterm", "exit"])
def test_a_forked_child_that_ends_leaves_the_server_running(local: PostgresServer, engine: sa.Engine, end: str) -> None:
    """A child forked by the test (a multiprocessing pool's worker, which ``terminate()``
    ends with SIGTERM; a child of ``os.fork`` that exits, running atexit) inherits the hooks
    that stop the servers, but not the servers: it stopped its parent's at its end."""
    ready, tell = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only ends
        try:
            if end == "exit":
                atexit._run_exitfuncs()  # what the interpreter's exit runs
            else:
                os.write(tell, b".")  # a signal that came before this, the fork's end discarded
                signal.pause()
        finally:
            os._exit(0)
    os.close(tell)
    if end == "sigterm":
        assert os.read(ready, 1) == b"."
        os.kill(child, signal.SIGTERM)
    os.close(ready)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) == (end == "sigterm")
    with engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT 1")) == 1
