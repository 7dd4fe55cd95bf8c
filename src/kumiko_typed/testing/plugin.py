"""The kit's pytest plugin, loaded by the ``pytest11`` entry point.

Fixtures (each App has its tables created and is disposed after the test):

- ``kumiko_sqlite_app``: a factory of Apps on a fresh SQLite file under ``tmp_path``;
- ``kumiko_postgres_app``: the same on a fresh database of a throw-away PostgreSQL server
  (one per test session, see :mod:`kumiko_typed.testing.postgres`); skipped when no server
  binaries or no psycopg are found, an error instead under ``CI`` or ``KUMIKO_REQUIRE_POSTGRES=1``;
- ``kumiko_app``: parametrized over both, so one test runs on each database;
- ``kumiko_postgres``: the session's server itself.

pytest loads the plugin in every run of an environment the library is installed in, so
loading it imports no more than pytest and this module need: ``kumiko_typed`` and
``kumiko_typed.testing`` import their public names when first read (PEP 562), and the
App, SQLAlchemy and psycopg are imported when a fixture is first used.  A suite can still
turn the plugin off with ``-p no:kumiko_typed.testing.plugin``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._app import App, AppSettings
    from .._feature import Feature
    from ._settings import AppFactory
    from .postgres import PostgresServer


def _factory(url: Callable[[], str], apps: list[App]) -> AppFactory:
    from .._app import App

    def build(features: Sequence[Feature[Any]], /, **settings: Unpack[AppSettings]) -> App:
        app = App(features, database_url=url(), **settings)
        apps.append(app)
        app.create_all()
        return app

    return build


@pytest.fixture(scope="session")
def kumiko_postgres() -> Iterator[PostgresServer]:
    """The session's throw-away PostgreSQL server (skips when there are no binaries)."""
    from .postgres import start_test_postgres, unavailable_reason

    server = start_test_postgres()
    if server is None:
        pytest.skip(unavailable_reason())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kumiko_sqlite_app(tmp_path: Path) -> Iterator[AppFactory]:
    """``kumiko_sqlite_app([feature], clock=...)``: an App on a new SQLite file."""
    apps: list[App] = []
    yield _factory(lambda: f"sqlite:///{tmp_path / f'kumiko-{len(apps)}.sqlite3'}", apps)
    for app in apps:
        app.dispose()


@pytest.fixture
def kumiko_postgres_app(kumiko_postgres: PostgresServer) -> Iterator[AppFactory]:
    """``kumiko_postgres_app([feature], clock=...)``: an App on a new, empty PostgreSQL
    database, dropped after the test."""
    apps: list[App] = []
    names: list[str] = []

    def url() -> str:
        names.append(f"kumiko_{uuid.uuid4().hex}")
        return kumiko_postgres.create_database(names[-1])

    yield _factory(url, apps)
    for app in apps:
        app.dispose()
    for name in names:
        kumiko_postgres.drop_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
def kumiko_app(request: pytest.FixtureRequest) -> AppFactory:
    """The SQLite factory, then the PostgreSQL one: a test using it runs on both databases."""
    factory: AppFactory = request.getfixturevalue(f"kumiko_{request.param}_app")
    return factory
