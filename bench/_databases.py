"""The databases a bench measures on: a fresh SQLite file per set-up, and a fresh database
of the tests' throw-away PostgreSQL server (``KUMIKO_TEST_POSTGRES_URL`` to use a running
one), unless ``--sqlite`` or PostgreSQL is not installed (then said, and left out)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kumiko_typed.testing.postgres import start_test_postgres, unavailable_reason

#: A function giving the URL of a new, empty database at each call.
Fresh = Callable[[], str]


@contextmanager
def databases(stem: str, *, sqlite_only: bool) -> Iterator[dict[str, Fresh]]:
    """``{"sqlite": fresh, "postgresql": fresh}`` (the figures' keys) while the block runs;
    the PostgreSQL server is stopped after it."""
    folder = tempfile.mkdtemp()
    counter = iter(range(1_000_000))
    urls: dict[str, Fresh] = {"sqlite": lambda: f"sqlite:///{folder}/{stem}{next(counter)}.sqlite3"}
    server = None if sqlite_only else start_test_postgres()
    if server is None and not sqlite_only:
        print(f"PostgreSQL skipped: {unavailable_reason()}")
    if server is not None:
        urls["postgresql"] = lambda: server.create_database(f"{stem}_{uuid.uuid4().hex[:12]}")
    try:
        yield urls
    finally:
        if server is not None:
            server.stop()
