"""``app.runs``' filters are typed: a status that is no run status (a typo, "stranded",
which is a flag) and a limit or a cursor of the wrong type are refused where they are passed."""

from __future__ import annotations

import uuid

from kumiko_typed import App, Feature

app = App([Feature("ops")])
page = app.runs("ops:job", status={"failed", "cancelled"}, limit=50, before=uuid.uuid4())
app.runs(status="suspended", stranded=True, before=page[-1].run_id)
app.runs(status="faild")  # E: arg-type
app.runs(status=["failed", "stranded"])  # E: list-item
app.runs(limit="50")  # E: arg-type
app.runs(before="0f6c2c86-9f53-4a8e-9d61-1e3b4c5d6e7f")  # E: arg-type
app.runs("ops:job", "failed")  # E: call-arg
