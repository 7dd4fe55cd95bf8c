"""The data steps, one by one, on SQLite and PostgreSQL (DESIGN §3.3, §5, §6): reads, the
aggregate writes through the event store, the unsafe projection writes, and call_feature."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import located
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Failure, Feature, Ok, Saved, User, fail, ok
from kumiko_typed._rules import msg_optimistic_lock
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
MakeUser = Callable[..., User]


class T3sWidget(Entity):
    __tablename__ = "t3s_widget"
    sku: Mapped[str] = mapped_column(sa.String(40), unique=True)
    name: Mapped[str] = mapped_column(sa.String(200))
    stock: Mapped[int] = mapped_column(default=0)


#: A non-aggregate projection table (Core), declared in Feature(projections=[...]).
_projection_metadata = sa.MetaData()
TALLY = sa.Table(
    "t3s_tally",
    _projection_metadata,
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("count", sa.Integer, nullable=False),
    sa.Column("label", sa.String(100), nullable=True),
)
WIDGETS: sa.Table = T3sWidget.__table__  # type: ignore[assignment]


@attrs.frozen
class Restocked:
    delta: int
    reason: str


@attrs.frozen
class NeverRegistered:
    n: int


@attrs.frozen
class NewWidget:
    sku: str
    name: str = "widget"
    stock: int = 0


@attrs.frozen
class Ref:
    id: uuid.UUID
    version: int = 1


@attrs.frozen
class Key:
    key: str
    count: int = 0


def _feature(name: str = "t3s") -> Feature[Any]:
    """A fresh feature owning T3sWidget, the Restocked event and the tally projection."""
    f: Feature[Any] = Feature(name, requires=["call_feature"], projections=[TALLY])
    f.entity(T3sWidget)  # aggregate type "t3s-widget"
    f.event(Restocked, name="t3s-widget-restocked")

    @f.projector(T3sWidget, Restocked)
    def apply(row: T3sWidget, event: Restocked) -> None:
        row.stock += event.delta

    return f


def _seed_handler(f: Feature[Any]) -> Any:
    return f.write_handler(
        "seed",
        f.pipeline(NewWidget)
        .create("w", T3sWidget, data=lambda c: T3sWidget(sku=c.payload.sku, name=c.payload.name, stock=c.payload.stock))
        .return_(lambda c: ok(c.steps["w"])),
    )


def _rows(app: App, table: sa.Table) -> list[dict[str, Any]]:
    order = [events.c.position] if table is events else list(table.primary_key.columns)
    with app.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(table).order_by(*order))]


def _widgets(app: App) -> list[dict[str, Any]]:
    return sorted(_rows(app, WIDGETS), key=lambda r: r["sku"])


def _utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored in UTC)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _snapshot(app: App) -> tuple[list[dict[str, Any]], ...]:
    return (_rows(app, events), _widgets(app), _rows(app, TALLY))


# --- find_one -----------------------------------------------------------------------------


def test_find_one_gives_the_matching_row(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .find_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.sku == c.payload.sku))
        .return_(lambda c: ok(None if (w := c.steps["w"]) is None else (w.id, w.name, w.version))),
    )
    app = app_on([f])
    saved = ok_data(app.dispatch(seed, NewWidget("a", "Anvil"), user=admin))
    ok_data(app.dispatch(seed, NewWidget("b", "Bolt"), user=admin))
    assert app.dispatch(h, NewWidget("a"), user=admin) == Ok((saved.id, "Anvil", 1))


def test_find_one_gives_none_without_a_row_and_the_pipeline_goes_on(app_on: AppOn, admin: User) -> None:
    f = _feature()
    ran: list[object] = []
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .find_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.sku == c.payload.sku))
        .compute("after", lambda c: ran.append(c.steps["w"]))
        .return_(lambda c: ok(c.steps["w"])),
    )
    app = app_on([f])
    assert app.dispatch(h, NewWidget("missing"), user=admin) == Ok(None)
    assert ran == [None]


# --- get_one ------------------------------------------------------------------------------


def test_get_one_gives_the_row(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.sku == c.payload.sku))
        .return_(lambda c: ok((c.steps["w"].sku, c.steps["w"].stock))),
    )
    app = app_on([f])
    ok_data(app.dispatch(seed, NewWidget("a", stock=7), user=admin))
    assert app.dispatch(h, NewWidget("a"), user=admin) == Ok(("a", 7))


def test_get_one_without_a_row_ends_the_pipeline_with_not_found(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    ran: list[str] = []

    def later(c: Any) -> None:
        ran.append("compute")

    def returned(c: Any) -> Ok[str]:
        ran.append("return_")
        return ok("reached")

    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.sku == c.payload.sku))
        .compute("later", later)
        .return_(returned),
    )
    app = app_on([f])
    ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    result = failure_of(app.dispatch(h, NewWidget("zzz"), user=admin))
    assert result.code == "not_found"
    assert result.http_status == 404
    assert result.message == 'step "w": no row matched'
    assert result.details == {"step": "w"}
    assert ran == []


def test_get_one_not_found_rolls_back_earlier_writes(app_on: AppOn, admin: User) -> None:
    f = _feature()
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .create("made", T3sWidget, data=lambda c: T3sWidget(sku=c.payload.sku, name="x"))
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.sku == "nope"))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    assert failure_of(app.dispatch(h, NewWidget("a"), user=admin)).code == "not_found"
    assert _rows(app, events) == []
    assert _widgets(app) == []


# --- find_many ----------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "expected"), [(None, ["a", "b", "c"]), (2, ["a", "b"]), (1, ["a"])])
def test_find_many_gives_a_list_cut_at_limit(
    app_on: AppOn, admin: User, limit: int | None, expected: list[str]
) -> None:
    f = _feature()
    seed = _seed_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .find_many("ws", lambda c: sa.select(T3sWidget).order_by(T3sWidget.sku), limit=limit)
        .return_(lambda c: ok([type(c.steps["ws"]).__name__, *[w.sku for w in c.steps["ws"]]])),
    )
    app = app_on([f])
    for sku in ["c", "a", "b"]:
        ok_data(app.dispatch(seed, NewWidget(sku), user=admin))
    assert app.dispatch(h, NewWidget(""), user=admin) == Ok(["list", *expected])


def test_find_many_without_rows_gives_an_empty_list(app_on: AppOn, admin: User) -> None:
    f = _feature()
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .find_many("ws", lambda c: sa.select(T3sWidget), limit=5)
        .return_(lambda c: ok(c.steps["ws"])),
    )
    app = app_on([f])
    assert app.dispatch(h, NewWidget(""), user=admin) == Ok([])


# --- create -------------------------------------------------------------------------------


def test_create_returns_saved_and_appends_the_created_event(app_on: AppOn, admin: User, now: datetime) -> None:
    f = _feature()
    seed = _seed_handler(f)
    app = app_on([f])
    correlation = uuid.uuid4()
    saved = ok_data(app.dispatch(seed, NewWidget("a", "Anvil", 3), user=admin, correlation_id=correlation))

    assert isinstance(saved, Saved)
    assert isinstance(saved.id, uuid.UUID)
    assert isinstance(saved.entity, T3sWidget)
    assert saved.entity.id == saved.id
    assert (saved.entity.sku, saved.entity.name, saved.entity.stock) == ("a", "Anvil", 3)
    assert saved.entity.tenant_id == admin.tenant_id
    assert saved.version == 1
    assert saved.entity.version == 1
    assert saved.is_new is True
    assert saved.changes == {"sku": "a", "name": "Anvil", "stock": 3}
    assert saved.previous == {}
    assert saved.event == "t3s-widget.created"

    [row] = _widgets(app)
    assert row["id"] == saved.id
    assert row["tenant_id"] == admin.tenant_id
    assert row["version"] == 1
    assert (row["sku"], row["name"], row["stock"]) == ("a", "Anvil", 3)
    assert _utc(row["created_at"]) == now
    assert _utc(row["updated_at"]) == now

    [event] = _rows(app, events)
    assert event["stream_id"] == saved.id
    assert event["aggregate_type"] == "t3s-widget"
    assert event["stream_version"] == 1
    assert event["type"] == "t3s-widget.created"
    assert event["tenant_id"] == admin.tenant_id
    assert event["user_id"] == admin.id
    assert event["correlation_id"] == correlation
    assert _utc(event["occurred_at"]) == now
    assert event["headers"] == {}
    assert event["payload"] == {
        "id": str(saved.id),
        "tenant_id": str(admin.tenant_id),
        "version": 1,
        "created_at": now.isoformat(),
        "updated_at": now.isoformat(),
        "sku": "a",
        "name": "Anvil",
        "stock": 3,
    }
    assert isinstance(event["event_id"], uuid.UUID)


def test_each_create_starts_its_own_stream_at_version_1(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    app = app_on([f])
    ids = [ok_data(app.dispatch(seed, NewWidget(sku), user=admin)).id for sku in ["a", "b"]]
    stored = _rows(app, events)
    assert [(e["stream_id"], e["stream_version"]) for e in stored] == [(ids[0], 1), (ids[1], 1)]
    assert stored[0]["position"] < stored[1]["position"]


def test_create_without_a_correlation_id_gets_a_fresh_one_per_dispatch(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    app = app_on([f])
    ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    ok_data(app.dispatch(seed, NewWidget("b"), user=admin))
    first, second = (e["correlation_id"] for e in _rows(app, events))
    assert isinstance(first, uuid.UUID)
    assert isinstance(second, uuid.UUID)
    assert first != second


def test_create_clashing_on_a_unique_column_is_unique_violation_and_writes_nothing(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "before", "count": 1})
        .create("w", T3sWidget, data=lambda c: T3sWidget(sku=c.payload.sku, name="dup"))
        .return_(lambda c: ok(c.steps["w"].id)),
    )
    app = app_on([f])
    ok_data(app.dispatch(seed, NewWidget("a", "first"), user=admin))
    before = _snapshot(app)

    result = failure_of(app.dispatch(h, NewWidget("a"), user=admin))
    assert result.code == "unique_violation"
    assert result.http_status == 409
    # The same on both databases: the clashing column and the payload field it came from,
    # not the database's own text (which named a constraint on PostgreSQL).
    assert result.details == {"entity": "T3sWidget", "columns": ["sku"], "path": "$.sku"}
    # The step, what to do and the field; never the value.
    assert result.message == (
        'step aggregate.create "w": T3sWidget violates a unique constraint on sku: another row holds that value; '
        "pass another value at $.sku, or update that row instead"
    )
    assert _snapshot(app) == before
    assert [w["name"] for w in _widgets(app)] == ["first"]
    # The failed create left the App usable.
    assert ok_data(app.dispatch(h, NewWidget("b"), user=admin))


def test_create_data_must_build_the_declared_entity(app_on: AppOn, admin: User) -> None:
    f = _feature()
    h = f.write_handler(
        "h",
        f.pipeline(NewWidget)
        .create("w", T3sWidget, data=lambda c: {"sku": c.payload.sku})  # type: ignore[arg-type,return-value]
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(h, NewWidget("a"), user=admin))
    assert result.code == "internal_error"
    assert 'aggregate.create "w"' in result.message
    assert "data= must build a T3sWidget, not dict" in result.message
    assert _snapshot(app) == ([], [], [])


# --- update -------------------------------------------------------------------------------


def _update_handler(f: Feature[Any], *, changes: Callable[[Any], dict[str, object]], **kwargs: Any) -> Any:
    return f.write_handler(
        "upd",
        f.pipeline(Ref)
        .update("upd", T3sWidget, id=lambda c: c.payload.id, changes=changes, **kwargs)
        .return_(lambda c: ok(c.steps["upd"])),
    )


def test_update_bumps_the_version_and_reports_only_changed_fields(app_on: AppOn, admin: User, now: datetime) -> None:
    f = _feature()
    seed = _seed_handler(f)
    upd = _update_handler(f, changes=lambda c: {"name": "new", "stock": 5}, version=lambda c: c.payload.version)
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a", "old", 5), user=admin))
    correlation = uuid.uuid4()

    saved = ok_data(app.dispatch(upd, Ref(created.id, 1), user=admin, correlation_id=correlation))
    assert isinstance(saved, Saved)
    assert saved.id == created.id
    assert saved.version == 2
    assert saved.entity.version == 2
    assert saved.entity.name == "new"
    assert saved.is_new is False
    assert saved.changes == {"name": "new"}
    assert saved.previous == {"name": "old"}
    assert saved.event == "t3s-widget.updated"

    [row] = _widgets(app)
    assert (row["name"], row["stock"], row["version"]) == ("new", 5, 2)
    assert _utc(row["updated_at"]) == now

    first, second = _rows(app, events)
    assert first["stream_version"] == 1
    assert second["stream_id"] == created.id
    assert second["stream_version"] == 2
    assert second["type"] == "t3s-widget.updated"
    assert second["aggregate_type"] == "t3s-widget"
    assert second["payload"] == {"changes": {"name": "new"}}
    assert second["correlation_id"] == correlation
    assert second["user_id"] == admin.id
    assert second["tenant_id"] == admin.tenant_id

    # And again, from version 2: nothing changes now, so nothing is stored (below).
    again = ok_data(app.dispatch(upd, Ref(created.id, 2), user=admin))
    assert (again.version, again.changes, again.previous, again.event) == (2, {}, {}, "")


@pytest.mark.parametrize("changes", [{}, {"name": "old", "stock": 5}], ids=["no-changes", "same-values"])
def test_update_that_changes_nothing_stores_no_event_and_keeps_the_version(
    app_on: AppOn, admin: User, now: datetime, changes: dict[str, object]
) -> None:
    """An update whose ``changes=`` changes no column (none given, or each equal to the
    row's) stores nothing: no ``<aggregate>.updated`` event, the version and ``updated_at``
    as they were; its ``Saved`` is the entity as read, at its version, with no changes and
    no event.  Before, it appended an event of ``{"changes": {}}`` and bumped the version,
    so a client holding the version it had read got a ``version_conflict`` after a write
    that changed nothing.  The version is still checked: a stale one is a conflict."""
    f = _feature()
    seed = _seed_handler(f)
    upd = _update_handler(f, changes=lambda c: changes, version=lambda c: c.payload.version)
    rename = f.write_handler(
        "rename",
        f.pipeline(Ref)
        .update("r", T3sWidget, id=lambda c: c.payload.id, changes=lambda c: {"name": "new"}, version=lambda c: 1)
        .return_(lambda c: ok(c.steps["r"].version)),
    )
    clock = FakeClock(now)
    app = app_on([f], clock=clock)
    created = ok_data(app.dispatch(seed, NewWidget("a", "old", 5), user=admin))
    before = _snapshot(app)
    clock.advance(minutes=1)

    saved = ok_data(app.dispatch(upd, Ref(created.id, 1), user=admin))
    assert isinstance(saved, Saved) and saved.entity.name == "old"
    assert (saved.id, saved.version, saved.is_new) == (created.id, 1, False)
    assert (saved.changes, saved.previous, saved.event) == ({}, {}, "")
    assert _snapshot(app) == before  # no event, the row as it was (version 1, updated_at)
    stream = ok_data(app.read_stream(T3sWidget, created.id, user=admin))
    assert [e.type for e in stream] == ["t3s-widget.created"]

    stale = failure_of(app.dispatch(upd, Ref(created.id, 0), user=admin), "version_conflict")
    assert stale.details == {"entity_id": str(created.id), "expected_version": 0, "current_version": 1}
    # The version the client read is still the current one: its next real change goes through.
    assert app.dispatch(rename, Ref(created.id), user=admin) == Ok(2)


def test_update_with_a_stale_version_is_version_conflict_and_writes_nothing(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    rename = f.write_handler(
        "rename",
        f.pipeline(Ref)
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "renames", "count": c.payload.version})
        .update(
            "upd",
            T3sWidget,
            id=lambda c: c.payload.id,
            changes=lambda c: {"name": f"v{c.payload.version}"},
            version=lambda c: c.payload.version,
        )
        .return_(lambda c: ok(c.steps["upd"].version)),
    )
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a", "v0"), user=admin))
    assert app.dispatch(rename, Ref(created.id, 1), user=admin) == Ok(2)
    before = _snapshot(app)

    result = failure_of(app.dispatch(rename, Ref(created.id, 1), user=admin))
    assert result.code == "version_conflict"
    assert result.http_status == 409
    assert result.details == {"entity_id": str(created.id), "expected_version": 1, "current_version": 2}
    assert _snapshot(app) == before
    assert [(w["name"], w["version"]) for w in _widgets(app)] == [("v1", 2)]

    # A version from the future is a conflict too.
    ahead = failure_of(app.dispatch(rename, Ref(created.id, 7), user=admin))
    assert ahead.details == {"entity_id": str(created.id), "expected_version": 7, "current_version": 2}
    assert _snapshot(app) == before


@pytest.mark.parametrize("version", [99, None])
def test_update_with_skip_optimistic_lock_ignores_the_version(app_on: AppOn, admin: User, version: int | None) -> None:
    f = _feature()
    seed = _seed_handler(f)
    kwargs: dict[str, Any] = {"skip_optimistic_lock": True}
    if version is not None:
        kwargs["version"] = version
    upd = _update_handler(f, changes=lambda c: {"stock": 42}, **kwargs)
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    saved = ok_data(app.dispatch(upd, Ref(created.id), user=admin))
    assert saved.version == 2
    assert saved.changes == {"stock": 42}
    assert saved.previous == {"stock": 0}
    # The same change again changes nothing: no event, no new version.
    assert ok_data(app.dispatch(upd, Ref(created.id), user=admin)).version == 2
    assert [e["stream_version"] for e in _rows(app, events)] == [1, 2]
    assert [(w["stock"], w["version"]) for w in _widgets(app)] == [(42, 2)]


def test_update_without_version_and_without_skip_is_a_boot_problem() -> None:
    f = _feature()
    _update_handler(f, changes=lambda c: {"stock": 1})
    with pytest.raises(BootError) as info:
        App([f], database_url="sqlite://")
    assert any(msg_optimistic_lock("upd") in problem for problem in info.value.problems), info.value.problems


def test_update_whose_version_resolver_gives_none_is_validation_error(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    upd = _update_handler(f, changes=lambda c: {"stock": 1}, version=lambda c: None)
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(upd, Ref(created.id), user=admin))
    assert result.code == "validation_error"
    assert result.details == [{"path": "version", "message": "required (or skip_optimistic_lock=True)", "step": "upd"}]
    assert _snapshot(app) == before


@pytest.mark.parametrize("given", ["1", True, 1.0])
def test_update_whose_version_resolver_gives_no_integer_is_validation_error(
    app_on: AppOn, admin: User, given: object
) -> None:
    """Before: "1" was a version_conflict "at version 1, not 1", and True or 1.0 passed for 1."""
    f = _feature()
    seed = _seed_handler(f)
    upd = _update_handler(f, changes=lambda c: {"stock": 1}, version=lambda c: given)
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(upd, Ref(created.id), user=admin), "validation_error")
    name = type(given).__name__
    assert result.details == [{"path": "version", "message": f"must be an integer, not {name}", "step": "upd"}]
    assert _snapshot(app) == before


@pytest.mark.parametrize("column", ["colour", "version", "tenant_id", "id", "created_at", "updated_at"])
def test_update_refuses_unknown_and_framework_columns(app_on: AppOn, admin: User, column: str) -> None:
    f = _feature()
    seed = _seed_handler(f)
    value: object = uuid.uuid4() if column in ("id", "tenant_id") else 5
    upd = _update_handler(f, changes=lambda c: {"name": "renamed", column: value}, version=lambda c: c.payload.version)
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a", "kept"), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(upd, Ref(created.id, 1), user=admin))
    assert result.code == "validation_error"
    assert result.http_status == 400
    assert isinstance(result.details, list) and len(result.details) == 1
    assert result.details[0]["path"] == f"changes.{column}"
    assert result.details[0]["step"] == "upd"
    assert column in result.message and "upd" in result.message
    assert _snapshot(app) == before


def test_update_clashing_on_a_unique_column_is_unique_violation_and_writes_nothing(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    upd = _update_handler(f, changes=lambda c: {"sku": "taken"}, version=lambda c: c.payload.version)
    app = app_on([f])
    ok_data(app.dispatch(seed, NewWidget("taken"), user=admin))
    created = ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(upd, Ref(created.id, 1), user=admin))
    assert result.code == "unique_violation"
    # "taken" came from no payload field: the path is the payload's root.
    assert result.details == {"entity": "T3sWidget", "columns": ["sku"], "path": "$"}
    assert _snapshot(app) == before


def test_update_of_a_missing_aggregate_is_not_found(app_on: AppOn, admin: User) -> None:
    f = _feature()
    upd = _update_handler(f, changes=lambda c: {"stock": 1}, version=1)
    app = app_on([f])
    missing = uuid.uuid4()
    result = failure_of(app.dispatch(upd, Ref(missing), user=admin))
    assert result.code == "not_found"
    assert result.details == {"entity_id": str(missing)}
    assert _snapshot(app) == ([], [], [])


# --- append_event -------------------------------------------------------------------------


def test_append_event_stores_the_registered_event_and_runs_the_projector(
    app_on: AppOn, admin: User, now: datetime
) -> None:
    f = _feature()
    seed = _seed_handler(f)
    restock = f.write_handler(
        "restock",
        f.pipeline(Ref)
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: Restocked(3, "delivery"))
        # The projector ran in this transaction: a read right after sees the new row.
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.id == c.payload.id))
        .return_(lambda c: ok((c.steps["w"].stock, c.steps["w"].version))),
    )
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a", stock=5), user=admin))
    correlation = uuid.uuid4()
    assert app.dispatch(restock, Ref(created.id), user=admin, correlation_id=correlation) == Ok((8, 2))
    assert app.dispatch(restock, Ref(created.id), user=admin) == Ok((11, 3))

    [row] = _widgets(app)
    assert (row["stock"], row["version"]) == (11, 3)
    assert _utc(row["updated_at"]) == now
    stored = _rows(app, events)
    assert [(e["type"], e["stream_version"]) for e in stored] == [
        ("t3s-widget.created", 1),
        ("t3s-widget-restocked", 2),
        ("t3s-widget-restocked", 3),
    ]
    second = stored[1]
    assert second["payload"] == {"delta": 3, "reason": "delivery"}
    assert second["stream_id"] == created.id
    assert second["aggregate_type"] == "t3s-widget"
    assert second["tenant_id"] == admin.tenant_id
    assert second["user_id"] == admin.id
    assert second["correlation_id"] == correlation
    assert _utc(second["occurred_at"]) == now


def test_append_event_stores_its_headers_with_the_event_and_none_as_empty(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    tagged = f.write_handler(
        "tagged",
        f.pipeline(Ref)
        .append_event(
            T3sWidget,
            id=lambda c: c.payload.id,
            event=lambda c: Restocked(1, "import"),
            headers=lambda c: {"source": "import", "batch": str(c.payload.version)},
        )
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: Restocked(2, "plain"))
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: Restocked(3, "fixed"), headers={"a": "b"})
        .return_(lambda c: ok(None)),
    )
    bad = f.write_handler(
        "bad",
        f.pipeline(Ref)
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: Restocked(1, "x"), headers={"n": 1})  # type: ignore[dict-item]
        .return_(lambda c: ok(None)),
    )
    nul = f.write_handler(
        "nul",
        f.pipeline(Ref)
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: Restocked(1, "x"), headers={"n": "a\x00b"})
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    assert app.dispatch(tagged, Ref(created.id, version=7), user=admin) == Ok(None)
    assert [e["headers"] for e in _rows(app, events)] == [{}, {"source": "import", "batch": "7"}, {}, {"a": "b"}]

    before = _snapshot(app)
    # A header of the wrong type is the input's fault too (tests/storage/test_append_event_headers.py).
    result = failure_of(app.dispatch(bad, Ref(created.id), user=admin), "validation_error")
    assert result.details == [{"path": "headers.n", "message": "must be a str, not int", "step": None}]
    assert _snapshot(app) == before
    # A header value the JSON column cannot hold is the input's fault, on both databases.
    unfit = failure_of(app.dispatch(nul, Ref(created.id), user=admin))
    assert unfit.code == "validation_error"
    assert isinstance(unfit.details, list) and unfit.details[0]["column"] == "kumiko_events.headers"
    assert _snapshot(app) == before


def test_append_event_of_an_unregistered_event_class_is_internal_error_naming_it(app_on: AppOn, admin: User) -> None:
    f = _feature()
    seed = _seed_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(Ref)
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: NeverRegistered(1))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    created = ok_data(app.dispatch(seed, NewWidget("a"), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(h, Ref(created.id), user=admin))
    assert result.code == "internal_error"
    assert result.message.startswith("step 0 aggregate.append_event raised UnregisteredError: ")
    assert "NeverRegistered is not a registered event" in result.message
    assert located(result) == {"path": "0", "step": "aggregate.append_event"}
    assert _snapshot(app) == before


def test_append_event_to_a_missing_aggregate_is_not_found(app_on: AppOn, admin: User) -> None:
    f = _feature()
    h = f.write_handler(
        "h",
        f.pipeline(Ref)
        .append_event(T3sWidget, id=lambda c: c.payload.id, event=lambda c: Restocked(1, "x"))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    missing = uuid.uuid4()
    result = failure_of(app.dispatch(h, Ref(missing), user=admin))
    assert result.code == "not_found"
    assert result.http_status == 404
    assert result.details == {"entity_id": str(missing)}
    assert _snapshot(app) == ([], [], [])


# --- unsafe_projection_upsert -------------------------------------------------------------


def _upsert_handler(f: Feature[Any]) -> Any:
    return f.write_handler(
        "tally",
        f.pipeline(Key)
        .unsafe_projection_upsert(
            TALLY, on=["key"], row=lambda c: {"key": c.payload.key, "count": c.payload.count, "label": "l"}
        )
        .return_(lambda c: ok(None)),
    )


def test_upsert_inserts_then_updates_on_conflict(app_on: AppOn, admin: User) -> None:
    f = _feature()
    tally = _upsert_handler(f)
    app = app_on([f])
    assert app.dispatch(tally, Key("a", 1), user=admin) == Ok(None)
    assert _rows(app, TALLY) == [{"key": "a", "count": 1, "label": "l"}]
    assert app.dispatch(tally, Key("a", 5), user=admin) == Ok(None)
    assert _rows(app, TALLY) == [{"key": "a", "count": 5, "label": "l"}]
    assert app.dispatch(tally, Key("b", 2), user=admin) == Ok(None)
    assert _rows(app, TALLY) == [{"key": "a", "count": 5, "label": "l"}, {"key": "b", "count": 2, "label": "l"}]
    assert _rows(app, events) == []


def test_upsert_updates_only_the_columns_the_row_names(app_on: AppOn, admin: User) -> None:
    f = _feature()
    tally = _upsert_handler(f)
    bump = f.write_handler(
        "bump",
        f.pipeline(Key)
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": c.payload.key, "count": c.payload.count})
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    ok_data(app.dispatch(tally, Key("a", 1), user=admin))
    ok_data(app.dispatch(bump, Key("a", 9), user=admin))
    assert _rows(app, TALLY) == [{"key": "a", "count": 9, "label": "l"}]


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ({"count": 1, "label": "x"}, "row lacks the conflict column(s) ['key'] of on=['key']"),
        ({"key": "a"}, "row sets only the conflict column(s) ['key']: nothing to update"),
        ({"key": "a", "count": 1, "colour": "red"}, "row has no column(s) ['colour'] in table t3s_tally"),
    ],
    ids=["missing-conflict-column", "nothing-to-update", "unknown-column"],
)
def test_upsert_refusals_are_internal_errors_naming_the_step(
    app_on: AppOn, admin: User, row: dict[str, object], fragment: str
) -> None:
    f = _feature()
    tally = _upsert_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(Key)
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "other", "count": 1})
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: row)
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    ok_data(app.dispatch(tally, Key("a", 3), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(h, Key("a"), user=admin))
    assert result.code == "internal_error"
    assert result.message.startswith("step 1 unsafe_projection_upsert raised StepRefused: ")
    assert fragment in result.message
    assert located(result) == {"path": "1", "step": "unsafe_projection_upsert"}
    assert _snapshot(app) == before
    assert _rows(app, TALLY) == [{"key": "a", "count": 3, "label": "l"}]


# --- unsafe_projection_delete -------------------------------------------------------------


def test_delete_removes_the_matching_rows(app_on: AppOn, admin: User) -> None:
    f = _feature()
    tally = _upsert_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(Key)
        .unsafe_projection_delete(TALLY, where=lambda c: TALLY.c.count >= c.payload.count)
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    for key, count in [("a", 1), ("b", 5), ("c", 9)]:
        ok_data(app.dispatch(tally, Key(key, count), user=admin))
    assert app.dispatch(h, Key("", 5), user=admin) == Ok(None)
    assert [r["key"] for r in _rows(app, TALLY)] == ["a"]
    assert app.dispatch(h, Key("", 5), user=admin) == Ok(None)  # nothing left to match: fine
    assert [r["key"] for r in _rows(app, TALLY)] == ["a"]


@pytest.mark.parametrize(
    "where",
    [
        lambda c: sa.true(),
        lambda c: sa.literal(1) == 1,
        lambda c: sa.or_(sa.true(), TALLY.c.key == "a"),
        lambda c: T3sWidget.sku == "a",  # a condition, but not on the table being deleted from
        lambda c: None,
        lambda c: True,
    ],
    ids=["true", "literal-1-eq-1", "or-true", "other-table", "none", "python-true"],
)
def test_delete_refuses_a_where_that_does_not_bound_the_table(
    app_on: AppOn, admin: User, where: Callable[[Any], Any]
) -> None:
    f = _feature()
    tally = _upsert_handler(f)
    h = f.write_handler(
        "h",
        f.pipeline(Key).unsafe_projection_delete(TALLY, where=where).return_(lambda c: ok(None)),
    )
    app = app_on([f])
    ok_data(app.dispatch(tally, Key("a", 1), user=admin))
    ok_data(app.dispatch(tally, Key("b", 2), user=admin))
    before = _snapshot(app)
    result = failure_of(app.dispatch(h, Key(""), user=admin))
    assert result.code == "internal_error"
    assert result.message.startswith("step 0 unsafe_projection_delete raised StepRefused: ")
    assert "where= must be a condition on the columns of t3s_tally" in result.message
    assert "an unbounded delete is refused" in result.message
    assert located(result) == {"path": "0", "step": "unsafe_projection_delete"}
    assert _snapshot(app) == before


def test_a_refused_where_is_named_by_its_type_never_by_its_value(app_on: AppOn, admin: User) -> None:
    """Before: the refusal quoted the resolver's value (``got 'secret-token'``): data in a
    Failure's message, which names only the program's own words."""
    f = _feature()
    h = f.write_handler(
        "h",
        f.pipeline(Key).unsafe_projection_delete(TALLY, where=lambda c: c.payload.key).return_(lambda c: ok(None)),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(h, Key("secret-token"), user=admin), "internal_error")
    assert "secret-token" not in repr(result)
    assert "where= must be a condition on the columns of t3s_tally (got a str)" in result.message


# --- call_feature -------------------------------------------------------------------------


def _maker(f: Feature[Any], roles: list[str] | None = None) -> Any:
    """An inner handler: creates a widget and bumps a tally row; gives (widget id, user id)."""
    return f.write_handler(
        "make",
        f.pipeline(NewWidget)
        .create("w", T3sWidget, data=lambda c: T3sWidget(sku=c.payload.sku, name="inner"))
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": c.payload.sku, "count": 1})
        .return_(lambda c: ok((c.steps["w"].id, c.user.id))),
        roles=roles,
    )


def test_call_feature_gives_the_inner_result_and_commits_with_the_outer(app_on: AppOn, admin: User) -> None:
    f = _feature()
    make = _maker(f)
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .call_feature("made", make, payload=lambda c: NewWidget(c.payload.sku))
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.id == c.steps["made"][0]))
        .return_(lambda c: ok((c.steps["made"], c.steps["w"].name))),
    )
    app = app_on([f])
    (widget_id, user_id), name = ok_data(app.dispatch(outer, NewWidget("a"), user=admin))
    assert user_id == admin.id
    assert name == "inner"
    assert [w["id"] for w in _widgets(app)] == [widget_id]
    assert [r["key"] for r in _rows(app, TALLY)] == ["a"]
    assert [e["stream_id"] for e in _rows(app, events)] == [widget_id]


def test_the_called_handler_runs_in_the_callers_transaction(app_on: AppOn, admin: User) -> None:
    """The inner handler sees what the outer one wrote and has not committed yet."""
    f = _feature()
    inner = f.write_handler(
        "inner",
        f.pipeline(NewWidget)
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.sku == c.payload.sku))
        .compute("tally", lambda c: c.db.execute(sa.select(TALLY.c.count).where(TALLY.c.key == "outer")).scalar())
        .return_(lambda c: ok((c.steps["w"].name, c.steps["tally"]))),
    )
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .create("w", T3sWidget, data=lambda c: T3sWidget(sku=c.payload.sku, name="uncommitted"))
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "outer", "count": 4})
        .call_feature("seen", inner, payload=lambda c: NewWidget(c.payload.sku))
        .return_(lambda c: ok(c.steps["seen"])),
    )
    app = app_on([f])
    assert app.dispatch(outer, NewWidget("a"), user=admin) == Ok(("uncommitted", 4))


@pytest.mark.parametrize("variant", ["return-fail", "compute-raises"])
def test_an_outer_failure_after_a_successful_call_rolls_back_the_inner_writes(
    app_on: AppOn, admin: User, variant: str
) -> None:
    f = _feature()
    make = _maker(f)
    seen: list[int] = []

    def inside(c: Any) -> int:
        # Inside the transaction the inner writes are visible...
        count = len(c.db.execute(sa.select(T3sWidget)).scalars().all())
        seen.append(count)
        if variant == "compute-raises":
            raise RuntimeError("outer broke")
        return count

    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .call_feature("made", make, payload=lambda c: NewWidget(c.payload.sku))
        .compute("inside", inside)
        .return_(lambda c: fail("unprocessable", "outer says no")),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(outer, NewWidget("a"), user=admin))
    assert result.code == ("unprocessable" if variant == "return-fail" else "internal_error")
    assert seen == [1]
    # ...and after the outer failure they are gone.
    assert _snapshot(app) == ([], [], [])


def test_an_inner_failure_ends_the_outer_pipeline_with_the_inner_code(app_on: AppOn, admin: User) -> None:
    f = _feature()
    inner = f.write_handler(
        "inner",
        f.pipeline(NewWidget)
        .create("w", T3sWidget, data=lambda c: T3sWidget(sku=c.payload.sku, name="inner"))
        .return_(lambda c: fail("unprocessable", "inner says no", {"sku": c.payload.sku})),
    )
    ran: list[str] = []
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "outer", "count": 1})
        .call_feature("res", inner, payload=lambda c: NewWidget(c.payload.sku))
        .compute("after", lambda c: ran.append("after"))
        .return_(lambda c: ok("outer finished")),
    )
    app = app_on([f])
    result = app.dispatch(outer, NewWidget("a"), user=admin)
    assert result == Failure("unprocessable", "inner says no", {"sku": "a"})
    assert ran == []
    assert _snapshot(app) == ([], [], [])


def test_an_inner_not_found_keeps_its_code(app_on: AppOn, admin: User) -> None:
    f = _feature()
    inner = f.write_handler(
        "inner",
        f.pipeline(Ref)
        .get_one("w", lambda c: sa.select(T3sWidget).where(T3sWidget.id == c.payload.id))
        .return_(lambda c: ok(c.steps["w"].id)),
    )
    outer = f.write_handler(
        "outer",
        f.pipeline(Ref).call_feature("res", inner, payload=lambda c: c.payload).return_(lambda c: ok(c.steps["res"])),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(outer, Ref(uuid.uuid4()), user=admin))
    assert result.code == "not_found"
    assert result.details == {"step": "w"}


def test_call_feature_checks_the_roles_of_the_called_handler(app_on: AppOn, make_user: MakeUser) -> None:
    f = _feature()
    make = _maker(f, roles=["Admin"])
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .call_feature("made", make, payload=lambda c: NewWidget(c.payload.sku))
        .return_(lambda c: ok(c.steps["made"][0])),
        roles=None,
    )
    app = app_on([f])
    clerk = make_user("Clerk")
    result = failure_of(app.dispatch(outer, NewWidget("a"), user=clerk))
    assert result.code == "access_denied"
    assert result.message == "handler t3s:make needs one of the roles ['Admin']"
    assert _snapshot(app) == ([], [], [])
    assert isinstance(ok_data(app.dispatch(outer, NewWidget("a"), user=make_user("Admin"))), uuid.UUID)


def test_call_feature_with_a_payload_of_the_wrong_type_is_validation_error(app_on: AppOn, admin: User) -> None:
    f = _feature()
    make = _maker(f)
    outer = f.write_handler(
        "outer",
        f.pipeline(Ref)
        .call_feature("made", make, payload=lambda c: c.payload)  # type: ignore[arg-type]
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(outer, Ref(uuid.uuid4()), user=admin))
    assert result.code == "validation_error"
    assert "takes a NewWidget, not a Ref" in result.message
    assert _snapshot(app) == ([], [], [])


def test_call_feature_as_user_needs_the_sysadmin_role(app_on: AppOn, make_user: MakeUser) -> None:
    f = _feature()
    make = _maker(f)
    target = make_user("Admin")
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .call_feature("made", make, payload=lambda c: NewWidget(c.payload.sku), as_user=lambda c: target)
        .return_(lambda c: ok(c.steps["made"])),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(outer, NewWidget("a"), user=make_user("Admin")))
    assert result.code == "access_denied"
    assert result.message == 'step "made": as_user needs the sysadmin role'
    assert _snapshot(app) == ([], [], [])


def test_call_feature_as_user_with_sysadmin_runs_the_inner_handler_as_that_user(
    app_on: AppOn, make_user: MakeUser
) -> None:
    f = _feature()
    make = _maker(f, roles=["Clerk"])
    target = make_user("Clerk")  # another tenant
    sysadmin = make_user("sysadmin")
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .call_feature("made", make, payload=lambda c: NewWidget(c.payload.sku), as_user=target)
        .compute("me", lambda c: c.user.id)
        .return_(lambda c: ok((c.steps["made"], c.steps["me"]))),
    )
    app = app_on([f])
    correlation = uuid.uuid4()
    (widget_id, inner_user), outer_user = ok_data(
        app.dispatch(outer, NewWidget("a"), user=sysadmin, correlation_id=correlation)
    )
    assert inner_user == target.id
    assert outer_user == sysadmin.id
    [row] = _widgets(app)
    assert row["id"] == widget_id
    assert row["tenant_id"] == target.tenant_id
    [event] = _rows(app, events)
    assert event["user_id"] == target.id
    assert event["tenant_id"] == target.tenant_id
    assert event["correlation_id"] == correlation


def test_call_feature_as_user_checks_the_roles_of_that_user(app_on: AppOn, make_user: MakeUser) -> None:
    f = _feature()
    make = _maker(f, roles=["Admin"])
    outer = f.write_handler(
        "outer",
        f.pipeline(NewWidget)
        .call_feature("made", make, payload=lambda c: NewWidget(c.payload.sku), as_user=lambda c: make_user("Clerk"))
        .return_(lambda c: ok(c.steps["made"])),
    )
    app = app_on([f])
    result = failure_of(app.dispatch(outer, NewWidget("a"), user=make_user("sysadmin", "Admin")))
    assert result.code == "access_denied"
    assert result.message == "handler t3s:make needs one of the roles ['Admin']"
    assert _snapshot(app) == ([], [], [])
