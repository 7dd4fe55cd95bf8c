"""Shared fixtures for the runtime tests: users, a fixed clock, an App factory on SQLite,
and a ``test_notes`` table that steps write through ``c.db`` to observe commits."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings

from kumiko_typed import App, Feature, User
from kumiko_typed.testing.postgres import PostgresServer

NOW = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)

# Hypothesis's defaults time each example (a 200 ms deadline) and its data generation (the
# too_slow health check): on a loaded CI machine either fails a correct test.  A test's own
# @settings still sets what it names; these are what it leaves out.
settings.register_profile("kumiko", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kumiko")

_metadata = sa.MetaData()
_NOTES = sa.Table(
    "test_notes",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("text", sa.String(200), nullable=False),
)


def _user(*roles: str) -> User:
    return User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset(roles))


@pytest.fixture
def racers() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts (``racers.append(Popen(...))``), killed if still running at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture
def now() -> datetime:
    """What the test Apps' clock returns."""
    return NOW


@pytest.fixture
def make_user() -> Callable[..., User]:
    return _user


@pytest.fixture
def user() -> User:
    """An authenticated user without any role."""
    return _user()


@pytest.fixture
def admin() -> User:
    return _user("Admin")


@pytest.fixture
def notes() -> sa.Table:
    """A plain Core table (id, text) created in every test App's database."""
    return _NOTES


@pytest.fixture
def note_texts() -> Callable[[App], list[str]]:
    """The committed ``test_notes`` rows, read on a fresh connection."""

    def read(app: App) -> list[str]:
        with app.engine.connect() as conn:
            return list(conn.scalars(sa.select(_NOTES.c.text).order_by(_NOTES.c.id)))

    return read


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., App]]:
    """Build an App on a fresh SQLite file (fixed clock, ``test_notes`` created); disposed afterwards."""
    apps: list[App] = []

    def build(features: Sequence[Feature[str]], **kwargs: object) -> App:
        kwargs.setdefault("clock", lambda: NOW)
        url = f"sqlite:///{tmp_path / f'app{len(apps)}.sqlite3'}"
        app = App(features, database_url=url, **kwargs)  # type: ignore[arg-type]
        apps.append(app)
        app.create_all()
        _metadata.create_all(app.engine)
        return app

    yield build
    for app in apps:
        app.dispose()


# --- PostgreSQL: the kit's throw-away server per test session (per xdist worker) ---
# ``kumiko_postgres`` comes from the kumiko_typed.testing pytest plugin; it skips when the
# binaries are missing outside CI (under CI or KUMIKO_REQUIRE_POSTGRES=1 that is an error).


@pytest.fixture(scope="session")
def postgres_url(kumiko_postgres: PostgresServer) -> str:
    """SQLAlchemy URL of the session server's ``kumiko_test`` database (shared by all tests)."""
    return kumiko_postgres.url


@pytest.fixture
def fresh_postgres_url(kumiko_postgres: PostgresServer) -> Iterator[str]:
    """SQLAlchemy URL of a new, empty database on the session server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex}"
    url = kumiko_postgres.create_database(name)
    try:
        yield url
    finally:
        kumiko_postgres.drop_database(name)


# --- A real HTTP peer on 127.0.0.1 (tests/_receiver.py) ---

from _proxy import Proxy  # noqa: E402
from _receiver import Receiver  # noqa: E402
from _support import loopback_tls  # noqa: E402
from _worker_thread import Passes  # noqa: E402

#: What the App's own client reads for its proxies (as httpx's default client).
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def _no_proxy_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The App's own client sends through the environment's proxies: the tests' peers on
    127.0.0.1 are reached directly whatever the shell running the suite sets."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def tls_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """An HTTPS receiver with a self-signed certificate for 127.0.0.1, which the App's own
    client trusts through ``SSL_CERT_FILE`` (read when the client is made)."""
    context, cert = loopback_tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    receiver = Receiver(tls=context)
    yield receiver
    receiver.close()


@pytest.fixture
def worker_passes(caplog: pytest.LogCaptureFixture) -> Passes:
    """The looping workers' passes, logged from the start of the test (tests/_worker_thread.py)."""
    return Passes(caplog)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """A forward HTTP proxy on 127.0.0.1 that counts what it carries (tests/_proxy.py)."""
    p = Proxy()
    yield p
    p.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An HTTP server on 127.0.0.1 answering 200 unless the test sets ``receiver.respond``."""
    r = Receiver()
    yield r
    r.close()


# --- Both databases: the runtime suite's storage tests run on SQLite AND PostgreSQL ---


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, or a new database on the test PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kumiko.sqlite3'}"
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.fixture
def app_on(db_url: str) -> Iterator[Callable[..., App]]:
    """``app_on(features, **kwargs)``: an App on ``db_url`` with its tables created.  An
    ``http=`` client is closed after its App is disposed: an App leaves a client it was
    given open, as httpx's users expect, and an open one warned in whichever later test
    the garbage collector found it."""
    apps: list[App] = []
    clients: list[object] = []

    def build(features: Sequence[Feature[str]], **kwargs: object) -> App:
        kwargs.setdefault("clock", lambda: NOW)
        if "http" in kwargs:
            clients.append(kwargs["http"])
        app = App(features, database_url=db_url, **kwargs)  # type: ignore[arg-type]
        apps.append(app)
        app.create_all()
        return app

    yield build
    for app in apps:
        app.dispose()
    for client in clients:
        close = getattr(client, "close", None)
        if close is not None:
            close()


@pytest.fixture
def inventory_app(app_on: Callable[..., App]) -> App:
    """The flagship example's App on ``db_url`` (both databases)."""
    from examples.inventory.handlers import inventory

    return app_on([inventory])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Chaos rounds run on request only (``./dev chaos``, ``pytest -m chaos``): each draws
    its faults and their timing at random, so one round is no pass/fail a commit can be
    held to; the defects they found have deterministic tests that always run."""
    if "chaos" in (config.getoption("markexpr") or ""):
        return
    chosen = [item for item in items if item.get_closest_marker("chaos") is None]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("chaos")])
        items[:] = chosen
