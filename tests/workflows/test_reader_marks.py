"""The mark a deploy leaves on a run it cannot read (``WorkflowEngine._reader``) differs
for code that reads other values: a field's type, an event's schema version.  A deploy
with the same mark passes a marked run by for good, so code that could read it never
did (tests/workflows/test_workflow_deploys.py shows it end to end).  And the mark is the
same in every process of one deploy: one that held an address would have each worker
take the others' marked runs for another deploy's."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import attrs

from kumiko_typed import App, Feature, manual
from kumiko_typed._serialization import Codec, _type_text


def _signal(note: type[Any], tag: object = None) -> type[Any]:
    annotation: Any = Annotated[note, tag] if tag else note
    fields = {"n": attrs.field(type=int), "note": attrs.field(type=annotation)}
    cls = attrs.make_class("Signal", fields, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Signal"
    return cls


def test_a_field_whose_type_changed_changes_the_digest() -> None:
    assert Codec([_signal(str)], {}).digest != Codec([_signal(int)], {}).digest
    assert Codec([_signal(str)], {}).digest == Codec([_signal(str)], {}).digest


def test_the_digest_holds_no_address() -> None:
    """Two objects in an ``Annotated`` (what another process would make anew): one digest."""
    assert Codec([_signal(str, object())], {}).digest == Codec([_signal(str, object())], {}).digest
    assert "0x" not in _type_text(Annotated[int, object()])
    assert _type_text(list[uuid.UUID] | None) == "types.UnionType[builtins.list[uuid.UUID], builtins.NoneType]"


@attrs.frozen
class Go:
    n: int


@attrs.frozen
class Paid:
    amount: int


def _mark(version: int) -> str:
    f: Feature[Any] = Feature("marks")
    f.event(Paid, version=version, upcasters={n: (lambda p: p) for n in range(1, version)})
    f.workflow("flow", trigger=manual(Go), pipeline=f.workflow_pipeline(Go).wait("PT1H"))
    app = App([f], database_url="sqlite://")
    engine = app._workflow_engine
    return engine._reader(engine.defs["marks:flow"])


def test_an_events_schema_version_changes_the_mark() -> None:
    assert _mark(1) == _mark(1)
    assert _mark(2) != _mark(1)
