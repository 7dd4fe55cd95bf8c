"""Racing processes for tests/pipeline/test_idempotency.py: a handler and a workflow whose first
segment writes a row and then holds its transaction open, so that racers overlap.

As a script::

    python tests/_idem_race.py DATABASE_URL dispatch|start KEY RUN_LOG

builds its own App, prints ``ready``, waits for a line on stdin (the start signal, so that
every racer calls at the same moment), then makes one keyed call and prints
``result <json>``: ``{"ok": n}`` / ``{"failure": code}`` for a dispatch, ``{"run": id}``
for a start.  Each run of the handler or workflow step also appends a line to the file
RUN_LOG, outside any transaction: what ran, not only what committed.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import attrs
import sqlalchemy as sa

from kumiko_typed import App, Feature, Ok, User, manual, ok

feature = Feature("idem_race")
USER = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=7))
HOLD_S = 0.4
#: Set by :func:`main`: the file each run appends a line to.
RUN_LOG: list[str] = []

_metadata = sa.MetaData()
effects = sa.Table(
    "idem_race_effects",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("text", sa.String(100), nullable=False),
)


@attrs.frozen
class Order:
    text: str


def _write_and_hold(c: Any) -> int:
    for path in RUN_LOG:
        with open(path, "a", encoding="utf-8") as log:
            log.write("ran\n")
    c.db.execute(sa.insert(effects).values(text=c.payload.text))
    time.sleep(HOLD_S)
    return int(c.db.scalar(sa.select(sa.func.count()).select_from(effects)))


place = feature.write_handler(
    "place", feature.pipeline(Order).compute("n", _write_and_hold).return_(lambda c: ok(c.steps["n"]))
)
book = feature.workflow(
    "book", trigger=manual(Order), pipeline=feature.workflow_pipeline(Order).compute("n", _write_and_hold)
)


def make_app(url: str) -> App:
    return App([feature], database_url=url)


def create_tables(app: App) -> None:
    app.create_all()
    _metadata.create_all(app.engine)


def effect_count(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(effects)) or 0)


def main(url: str, mode: str, key: str, run_log: str) -> None:
    RUN_LOG.append(run_log)
    app = make_app(url)
    print("ready", flush=True)
    sys.stdin.readline()
    if mode == "dispatch":
        result = app.dispatch(place, Order("raced"), user=USER, idempotency_key=key)
        print("result", json.dumps({"ok": result.data} if isinstance(result, Ok) else {"failure": result.code}))
    else:
        print("result", json.dumps({"run": str(app.start_workflow(book, Order("raced"), user=USER, key=key))}))
    app.dispose()


if __name__ == "__main__":
    main(*sys.argv[1:5])
