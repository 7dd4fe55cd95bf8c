"""A SQLite App run under a file size limit (``RLIMIT_FSIZE``, as ``ulimit -f``, systemd's
``LimitFSIZE=`` or a disk quota leave it): a write past the limit fails with ``EFBIG``,
which SQLite reports as ``disk I/O error`` (``SQLITE_IOERR_WRITE``), not as a full disk.

``python tests/_file_size_limit.py DB LIMIT ACTION`` applies the limit to this process
only (the test runner's own files stay writable), runs ACTION and prints its answers as
JSON lines.  ACTION ``dispatch``: one note of 10 MB, then a small one.  ``worker``: one
worker pass over the runs the parent suspended (a small note, then a 10 MB one), with the
clock past their wait."""

from __future__ import annotations

import json
import resource
import signal
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, User, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=0xA))
BIG = 10_000_000  # more than SQLite's page cache holds: written to the log mid-transaction


class FsNote(Entity):
    __tablename__ = "fs_note"
    text: Mapped[str] = mapped_column(sa.Text)


@attrs.frozen
class Say:
    text: str


def _noted(c: Any) -> FsNote:
    return FsNote(text="y" * BIG if c.payload.text == "big" else c.payload.text)


f = Feature("fs")
f.entity(FsNote)
note = f.write_handler(
    "note", f.pipeline(Say).create("n", FsNote, data=_noted).return_(lambda c: ok(c.steps["n"].version))
)
later = f.workflow(
    "later", trigger=manual(Say), pipeline=f.workflow_pipeline(Say).wait("PT1M").create("n", FsNote, data=_noted)
)


def make_app(url: str, clock: FakeClock) -> App:
    return App([f], database_url=url, clock=clock)


def _answer(result: object) -> dict[str, object]:
    if isinstance(result, Failure):
        return {"code": result.code, "message": result.message}
    return {"ok": repr(result)}


def main(database: str, limit: int, action: str) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the write past the limit kills the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    app = make_app(f"sqlite:///{database}", FakeClock(T0 + timedelta(minutes=2)))
    if action == "dispatch":
        for text in ("big", "small"):
            print(json.dumps(_answer(app.dispatch(note, Say(text), user=USER))), flush=True)
    else:
        try:
            print(json.dumps({"worker": app.run_worker(once=True)}), flush=True)
        except Exception as exc:
            print(json.dumps({"raised": type(exc).__name__}), flush=True)
    app.engine.dispose()  # its checkpoint fails under the limit; the log stays for the parent


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
