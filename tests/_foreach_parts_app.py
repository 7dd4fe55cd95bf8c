"""A workflow suspended inside a ``for_each`` over long items, and the run it stores in
the form of a release before parts (``kumiko_workflow_parts``):
tests/workflows/foreach_before_parts.json, which tests/workflows/test_foreach_parts.py
resumes with this release.

The file was written by the code of the release before (commit f6cd87e, the main branch
then) with::

    PYTHONPATH=<that release's src> python tests/_foreach_parts_app.py tests/workflows/foreach_before_parts.json

and tests/workflows/foreach_parts_form2.json, a run of the release that stored parts in
stored form 2 (the long values and a loop's items whole, one part each; commit df3ab5e),
the same way, its parts written beside its row; tests/workflows/foreach_parts_form4.json,
of the release of stored form 4 (the value the loop runs over a part, the loop's items
pages of their own; commit 36524ec), likewise.

It imports this module as ``_foreach_parts_app`` (stored payloads name their class by
module and name), starts a run of :data:`ledger` on a SQLite file, resumes it until it
waits in iteration 3, and writes its row.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from kumiko_typed import App, Feature, User, manual

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=2), roles=frozenset())
#: Long enough that this release keeps them as parts (``PART_MIN``).
LINES = 40
#: What each iteration saw of its item, as ``repr`` shows it (types included).
SEEN: list[str] = []


@attrs.frozen
class Begin:
    n: int


@attrs.frozen
class Line:
    id: uuid.UUID
    price: Decimal
    at: datetime
    name: str


def lines(n: int) -> list[Line]:
    return [Line(uuid.UUID(int=i + 1), Decimal(f"{i}.10"), T0 + timedelta(minutes=i), f"line {i:03}") for i in range(n)]


def _see(c: Any) -> int:
    SEEN.append(repr(c.scope["line"]))
    return len(c.steps["lines"])


feature = Feature("feparts")
ledger = feature.workflow(
    "ledger",
    trigger=manual(Begin),
    pipeline=feature.workflow_pipeline(Begin)
    .compute("lines", lambda c: lines(c.payload.n))
    .compute("meta", lambda c: {"total": sum(line.price for line in c.steps["lines"]), "by": uuid.UUID(int=7)})
    .for_each("line", over=lambda c: c.steps["lines"], do=lambda b: b.compute("seen", _see).wait("PT0S"))
    .compute("after", lambda c: [c.steps["meta"]["total"], len(c.steps["lines"])]),
)


def app(url: str) -> App:
    built = App([feature], database_url=url, clock=lambda: T0, value_types=[Line])
    built.create_all()
    return built


def write_fixture(out: Path) -> None:
    folder = out.parent / "fixture.sqlite3"
    folder.unlink(missing_ok=True)
    stored = app(f"sqlite:///{folder}")
    run_id = stored.start_workflow(ledger, Begin(LINES), user=USER)
    for _ in range(3):
        stored.run_worker(once=True)
    with stored.engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT workflow, trigger_key, status, path, payload, state, user, fingerprint FROM kumiko_workflow_runs"
            " WHERE run_id = ?",
            (run_id.hex,),
        ).one()
        # A release with parts (stored form 2) stored the long values and items beside it.
        has_parts = conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kumiko_workflow_parts'"
        ).first()
        parts = (
            dict(
                conn.exec_driver_sql(
                    "SELECT name, value FROM kumiko_workflow_parts WHERE run_id = ?", (run_id.hex,)
                ).all()
            )
            if has_parts
            else {}
        )
    stored.dispose()
    folder.unlink()
    columns = ("workflow", "trigger_key", "status", "path", "payload", "state", "user", "fingerprint")
    record = {
        name: json.loads(value) if name in ("payload", "state", "user") else value
        for name, value in zip(columns, row, strict=True)
    }
    written: dict[str, Any] = {"run_id": str(run_id), "seen": SEEN, "row": record}
    if parts:
        written["parts"] = {name: json.loads(value) for name, value in sorted(parts.items())}
    out.write_text(json.dumps(written, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _foreach_parts_app

    _foreach_parts_app.write_fixture(Path(sys.argv[1]))
