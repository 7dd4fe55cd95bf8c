"""``c.steps`` used as a whole, as a read-only mapping of the keys so far: passed where a
``Mapping[str, object]`` is expected (a logging helper), copied, iterated.  (pyright refuses
``dict(c.steps)`` and ``{**c.steps}``, see docs/plugin.md; ``.items()`` is the way.)"""

from __future__ import annotations

import json
from collections.abc import Mapping

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")


def logged(values: Mapping[str, object]) -> str:
    return json.dumps({k: str(v) for k, v in values.items()})


whole = (
    shop.pipeline(Order)
    .compute("count", lambda c: len(c.payload.lines))
    .compute("copied", lambda c: dict(c.steps.items()))
    .compute("values", lambda c: [str(v) for v in c.steps.values()])
    .compute("log", lambda c: logged(c.steps))
    .compute("names", lambda c: sorted(c.steps.keys()))
    .compute("size", lambda c: len(c.steps) if "count" in c.steps else 0)
    .return_(lambda c: ok((c.steps["log"], reveal_type(c.steps["names"]), reveal_type(c.steps["size"]))))  # R: list[str] # R: int # PR: list[str] # PR: int
)
