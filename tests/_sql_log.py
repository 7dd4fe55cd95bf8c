"""The SQL an engine sends, for tests that pin down which statements a feature costs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[str]]:
    """The statements ``engine`` sends while the block runs, whitespace collapsed."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
