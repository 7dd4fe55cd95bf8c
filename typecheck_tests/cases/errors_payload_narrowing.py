"""when= narrows the keys it tests, not a payload field (docs/plugin.md, "Narrowing by
when="): no type says "a Draft whose note is a str".  Copied into a key, the field is
narrowed in the arm with the plugin; pyright narrows neither across the lambdas."""

from __future__ import annotations

import attrs

from kumiko_typed import Feature, ok

desk = Feature("desk")


@attrs.frozen
class Draft:
    note: str | None


by_field = (
    desk.pipeline(Draft)
    .branch(
        when=lambda c: c.payload.note is not None,
        on_true=lambda b: b.compute("loud", lambda c: c.payload.note.upper()),  # E: union-attr # PE: reportOptionalMemberAccess
    )
    .return_(lambda c: ok(1))
)
by_key = (
    desk.pipeline(Draft)
    .compute("note", lambda c: c.payload.note)
    .branch(
        when=lambda c: c.steps["note"] is not None,
        on_true=lambda b: b.compute("loud", lambda c: reveal_type(c.steps["note"])),  # R: str # PR: str | None
    )
    .return_(lambda c: ok(1))
)
