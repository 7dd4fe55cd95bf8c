"""A SQLite write the disk does not take for want of room, though SQLite does not call it
full: a disk quota or a file size limit reached (``EDQUOT``, ``EFBIG``) is SQLite's
``disk I/O error`` (``SQLITE_IOERR_WRITE``), not "database or disk is full".

It was an ``internal_error`` (500, "a bug") naming the step, and a worker's pass raised
``no such savepoint``: SQLite rolls the whole transaction back on such an error, as on a
full disk, and the savepoint's rollback found nothing to roll back — a looping worker
stopped with it.  Now it is answered as a full disk is: ``unavailable``, the connection
dropped, nothing written, and the work done once the write fits.

The limit is set on a child process (tests/_file_size_limit.py): the runner's files stay
writable."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from _file_size_limit import T0, USER, Say, later, make_app, note

from kumiko_typed.testing import FakeClock

TESTS = Path(__file__).resolve().parents[1]
#: The log may grow by about this much: a small note fits, a 10 MB one does not.
LIMIT = 1_000_000


def _limited(database: Path, action: str) -> list[dict[str, object]]:
    """Run ``action`` on the database under the file size limit: its answers."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p))
    child = "import sys, _file_size_limit as m; m.main(sys.argv[1], int(sys.argv[2]), sys.argv[3])"
    done = subprocess.run(
        [sys.executable, "-c", child, str(database), str(LIMIT), action],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def _stored(database: Path) -> tuple[list[str], list[str]]:
    """The notes (their first five characters) and the runs' statuses, after an integrity check."""
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        texts = [t[:5] for (t,) in conn.execute("SELECT text FROM fs_note ORDER BY text")]
        runs = [s for (s,) in conn.execute("SELECT status FROM kumiko_workflow_runs ORDER BY status")]
        events = conn.execute("SELECT count(*) FROM kumiko_events").fetchone()[0]
    assert events == len(texts)  # every note with its event, none without
    return texts, runs


def test_a_dispatch_past_a_file_size_limit_is_unavailable_and_writes_nothing(tmp_path: Path) -> None:
    database = tmp_path / "fs.sqlite3"
    app = make_app(f"sqlite:///{database}", FakeClock(T0))
    app.create_all()
    app.dispatch(note, Say("first"), user=USER)
    app.dispose()
    big, small = _limited(database, "dispatch")
    assert big["code"] == "unavailable", big
    assert "out of disk, memory or connections, try again" in str(big["message"])
    assert "SQL" not in str(big["message"]) and "I/O" not in str(big["message"])
    assert small == {"ok": "Ok(data=1)"}  # what fits is still written
    assert _stored(database) == (["first", "small"], [])


def test_a_worker_pass_past_a_file_size_limit_is_cut_short_and_done_again(tmp_path: Path) -> None:
    database = tmp_path / "fs.sqlite3"
    clock = FakeClock(T0)
    app = make_app(f"sqlite:///{database}", clock)
    app.create_all()
    app.start_workflow(later, Say("big"), user=USER)
    app.start_workflow(later, Say("small"), user=USER)
    app.dispose()
    # One transaction resumes both runs; the big note meets the limit mid-transaction.
    idle = dict.fromkeys(("started", "resumed", "sent", "retried", "dead"), 0)
    assert _limited(database, "worker") == [{"worker": idle}]
    assert _stored(database) == ([], ["suspended", "suspended"])
    clock.advance(minutes=2)
    app = make_app(f"sqlite:///{database}", clock)
    try:
        assert app.run_worker(once=True)["resumed"] == 2
    finally:
        app.dispose()
    assert _stored(database) == (["small", "yyyyy"], ["completed", "completed"])
