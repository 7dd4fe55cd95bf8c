"""Inline projections probed as a port of a real application would use them: a
projector that raises, an upsert keyed on a NULL.  On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, User, ok
from kumiko_typed._tables import events

AppOn = Callable[..., App]


class RsBin(Entity):
    __tablename__ = "rs_bin"
    label: Mapped[str] = mapped_column(sa.String(40))
    count: Mapped[int] = mapped_column(default=0)


@attrs.frozen
class Filled:
    by: int
    note: str


@attrs.frozen
class NewBin:
    label: str


@attrs.frozen
class Fill:
    id: uuid.UUID
    by: int
    note: str


@attrs.frozen
class Key:
    key: str | None
    n: int


_meta = sa.MetaData()
#: A read model whose key is unique but nullable, as a lookup by an optional code is.
CODES = sa.Table(
    "rs_codes",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("code", sa.String(40), unique=True, nullable=True),
    sa.Column("n", sa.Integer, nullable=False),
)
#: The same, holding each tenant's codes (the upsert then updates only its tenant's row).
TENANT_CODES = sa.Table(
    "rs_tenant_codes",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.Uuid, nullable=False),
    sa.Column("code", sa.String(40), unique=True, nullable=True),
    sa.Column("n", sa.Integer, nullable=False),
)
#: The read model the fill handler keeps beside the bin's own row.
FILLS = sa.Table(
    "rs_fills",
    _meta,
    sa.Column("bin_id", sa.Uuid, primary_key=True),
    sa.Column("total", sa.Integer, nullable=False),
)

bins = Feature("rs", projections=[CODES, TENANT_CODES, FILLS])
bins.entity(RsBin)
bins.event(Filled, name="bin-filled")


@bins.projector(RsBin, Filled)
def count_fill(row: RsBin, event: Filled) -> None:
    if event.by < 0:
        raise ValueError(f"cannot take {event.by} out: {event.note}")
    row.count += event.by


new_bin = bins.write_handler(
    "new",
    bins.pipeline(NewBin)
    .create("bin", RsBin, data=lambda c: RsBin(label=c.payload.label))
    .return_(lambda c: ok(c.steps["bin"].id)),
)
# The read model first, then the event whose projector raises: neither may be kept.
fill = bins.write_handler(
    "fill",
    bins.pipeline(Fill)
    .unsafe_projection_upsert(FILLS, on=["bin_id"], row=lambda c: {"bin_id": c.payload.id, "total": c.payload.by})
    .append_event(RsBin, id=lambda c: c.payload.id, event=lambda c: Filled(c.payload.by, c.payload.note))
    .return_(lambda c: ok(None)),
)
put_code = bins.write_handler(
    "put-code",
    bins.pipeline(Key)
    .unsafe_projection_upsert(CODES, on=["code"], row=lambda c: {"code": c.payload.key, "n": c.payload.n})
    .return_(lambda c: ok(None)),
)

put_tenant_code = bins.write_handler(
    "put-tenant-code",
    bins.pipeline(Key)
    .unsafe_projection_upsert(
        TENANT_CODES, on=["code"], row=lambda c: {"code": c.payload.key, "n": c.payload.n, "tenant_id": c.tenant_id}
    )
    .return_(lambda c: ok(None)),
)


def _app(app_on: AppOn) -> App:
    app = app_on([bins])
    _meta.create_all(app.engine)
    return app


def _rows(app: App, table: sa.Table) -> list[tuple[Any, ...]]:
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(table))]


def test_a_projector_that_raises_is_named_and_nothing_of_the_command_is_kept(
    app_on: AppOn, admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    """Was ``internal_error`` "step 1 aggregate.append_event raised ValueError": the
    Failure named neither the projector nor that one had raised.  Now it names the
    projector (message and details), its entity and event, never the exception's text
    (which quotes the event's data); the read model row written before it and the event
    are both rolled back, and the log has the traceback under the error id."""
    app = _app(app_on)
    bin_id = ok_data(app.dispatch(new_bin, NewBin("a"), user=admin))
    assert ok_data(app.dispatch(fill, Fill(bin_id, 2, "ok"), user=admin)) is None

    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        refused = failure_of(app.dispatch(fill, Fill(bin_id, -1, "T0PSECRET"), user=admin), "internal_error")

    name = f"{count_fill.__module__}.count_fill"
    assert f"the projector {name} of RsBin for Filled raised ValueError" in refused.message
    assert "fix the projector" in refused.message
    assert "T0PSECRET" not in refused.message and "SELECT" not in refused.message.upper()
    assert isinstance(refused.details, dict) and refused.details["projector"] == name
    [record] = [r for r in caplog.records if refused.details["error_id"] in r.getMessage()]
    assert "T0PSECRET" in logging.Formatter().format(record)  # the cause, for the operator
    assert _rows(app, FILLS) == [(bin_id, 2)]
    with app.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(events)) == 2
        assert conn.scalar(sa.select(RsBin.__table__.c.count)) == 2


def test_a_projector_that_raises_in_a_rebuild_is_named(app_on: AppOn, admin: User) -> None:
    """The same projector bug met by a replay: the rebuild's Failure names it too."""
    app = _app(app_on)
    bin_id = ok_data(app.dispatch(new_bin, NewBin("a"), user=admin))
    ok_data(app.dispatch(fill, Fill(bin_id, 3, "ok"), user=admin))
    changed: Feature[Any] = Feature("rs", projections=[CODES, TENANT_CODES, FILLS])
    changed.entity(RsBin)
    changed.event(Filled, name="bin-filled")

    @changed.projector(RsBin, Filled)
    def strict_fill(row: RsBin, event: Filled) -> None:
        raise KeyError(event.note)  # the new release's bug

    refused = failure_of(app_on([changed]).rebuild_projection(RsBin, user=admin), "internal_error")
    assert "the projector" in refused.message and "strict_fill of RsBin for Filled raised KeyError" in refused.message


def test_an_upsert_keyed_on_null_is_refused_instead_of_inserting_a_row_each_time(app_on: AppOn, admin: User) -> None:
    """NULL equals nothing, so ``ON CONFLICT (code)`` never fired for a NULL code: every
    call inserted one more row, on both databases, where an upsert keeps one per key."""
    app = _app(app_on)
    for _ in range(2):
        refused = failure_of(app.dispatch(put_code, Key(None, 1), user=admin), "validation_error")
        assert refused.details == [
            {
                "path": "$.key",
                "message": "must not be null: it is a conflict column (on=) of an upsert, and NULL matches no row",
                "column": "rs_codes.code",
                "step": "0 unsafe_projection_upsert",
            }
        ]
    assert _rows(app, CODES) == []


def test_an_upsert_into_a_table_with_a_generated_key_inserts_then_updates(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """On PostgreSQL every first upsert into a read model with a generated integer key
    (a plain ``id`` column, the commonest shape) was ``unique_violation``: the insert's
    implicit ``RETURNING id`` was read as the tenant guard's empty answer."""
    app = _app(app_on)
    alice, bob = make_user(), make_user()
    ok_data(app.dispatch(put_code, Key("a", 1), user=alice))
    ok_data(app.dispatch(put_code, Key("a", 2), user=alice))
    ok_data(app.dispatch(put_code, Key("b", 3), user=alice))
    assert sorted(r[1:] for r in _rows(app, CODES)) == [("a", 2), ("b", 3)]

    ok_data(app.dispatch(put_tenant_code, Key("a", 1), user=alice))
    ok_data(app.dispatch(put_tenant_code, Key("a", 2), user=alice))
    failure_of(app.dispatch(put_tenant_code, Key("a", 9), user=bob), "unique_violation")
    assert [r[1:] for r in _rows(app, TENANT_CODES)] == [(alice.tenant_id, "a", 2)]


@attrs.frozen
class Topped:
    """``Filled`` renamed in a refactoring, registered without ``name=``."""

    by: int
    note: str


def test_events_of_a_renamed_event_class_name_the_fix(app_on: AppOn, admin: User) -> None:
    """The stored type is the class's name in kebab case unless ``name=`` says another:
    after a rename the rebuild said only "has the type 'bin-filled', which no feature
    registers"; it now says how to keep the stored type.  The rows are left as they are."""
    app = _app(app_on)
    bin_id = ok_data(app.dispatch(new_bin, NewBin("a"), user=admin))
    ok_data(app.dispatch(fill, Fill(bin_id, 3, "ok"), user=admin))
    renamed: Feature[Any] = Feature("rs", projections=[CODES, TENANT_CODES, FILLS])
    renamed.entity(RsBin)
    renamed.event(Topped)

    @renamed.projector(RsBin, Topped)
    def count_top(row: RsBin, event: Topped) -> None:
        row.count += event.by

    again = app_on([renamed])
    refused = failure_of(again.rebuild_projection(RsBin, user=admin), "internal_error")
    assert "has the type 'bin-filled', which no feature registers" in refused.message
    assert "feature.event(<the class>, name='bin-filled')" in refused.message
    with again.engine.connect() as conn:
        assert conn.scalar(sa.select(RsBin.__table__.c.count)) == 3

    kept: Feature[Any] = Feature("rs", projections=[CODES, TENANT_CODES, FILLS])
    kept.entity(RsBin)
    kept.event(Topped, name="bin-filled")
    kept.projector(RsBin, Topped)(count_top)
    report = ok_data(app_on([kept]).rebuild_projection(RsBin, user=admin, verify=True))
    assert report.matches
