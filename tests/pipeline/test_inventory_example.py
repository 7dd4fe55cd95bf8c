"""The flagship example end to end, on SQLite and on PostgreSQL: every inventory handler,
checked on its result AND on what is stored (event rows, product rows, low-stock alerts)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from examples.inventory.handlers import (
    adjust_stock,
    archive_low_stock,
    archive_product,
    bulk_adjust,
    create_product,
    low_stock_report,
    rename_product,
)
from examples.inventory.model import (
    Adjustment,
    AdjustStock,
    AlertView,
    ArchiveLowStock,
    ArchiveProduct,
    BulkAdjust,
    CreateProduct,
    LowStockAlert,
    LowStockReport,
    Product,
    ProductRef,
    Renamed,
    RenameProduct,
)
from kumiko_typed import App, Failure, Ok, User
from kumiko_typed._tables import events

REPO = Path(__file__).resolve().parents[2]
PRODUCTS = Product.__table__
ALERTS = LowStockAlert.__table__

MakeUser = Callable[..., User]


# --- reading what is stored --------------------------------------------------------------


def event_rows(app: App) -> list[dict[str, Any]]:
    with app.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(events).order_by(events.c.position))]


def product_row(app: App, pid: uuid.UUID) -> dict[str, Any]:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.select(PRODUCTS).where(PRODUCTS.c.id == pid)).one()._mapping)


def alert_rows(app: App) -> list[dict[str, Any]]:
    with app.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(ALERTS).order_by(ALERTS.c.sku))]


def snapshot(app: App) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the example's tables (to show that a failure wrote nothing)."""
    tables = {"kumiko_events": events, "inventory_product": PRODUCTS, "inventory_low_stock_alert": ALERTS}
    with app.engine.connect() as conn:
        return {name: sorted((tuple(r) for r in conn.execute(sa.select(t))), key=repr) for name, t in tables.items()}


def at(value: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite gives it back naive)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def stream(app: App, pid: uuid.UUID) -> list[dict[str, Any]]:
    return [e for e in event_rows(app) if e["stream_id"] == pid]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def admin(make_user: MakeUser) -> User:
    return make_user("Admin")


def create(app: App, user: User, sku: str, stock: int = 0, name: str | None = None) -> uuid.UUID:
    result = app.dispatch(create_product, CreateProduct(sku, name or sku.title(), stock), user=user)
    assert isinstance(result, Ok), result
    return result.data.id


def failed(result: Ok[Any] | Failure, code: str) -> Failure:
    assert isinstance(result, Failure), result
    assert result.code == code, result
    return result


# --- product:create ------------------------------------------------------------------------------


def test_create_appends_the_created_event_and_inserts_the_row(inventory_app: App, admin: User, now: datetime) -> None:
    correlation = uuid.uuid4()
    result = inventory_app.dispatch(
        create_product, CreateProduct("tea", "Green tea", 8), user=admin, correlation_id=correlation
    )
    assert isinstance(result, Ok)
    assert isinstance(result.data, ProductRef) and result.data.version == 1
    pid = result.data.id

    row = product_row(inventory_app, pid)
    assert {k: row[k] for k in ("sku", "name", "stock", "archived", "version", "tenant_id")} == {
        "sku": "tea",
        "name": "Green tea",
        "stock": 8,
        "archived": False,
        "version": 1,
        "tenant_id": admin.tenant_id,
    }
    assert at(row["created_at"]) == at(row["updated_at"]) == now

    [event] = event_rows(inventory_app)
    assert event["stream_id"] == pid
    assert event["aggregate_type"] == "product"
    assert event["type"] == "product.created"
    assert event["stream_version"] == 1
    assert event["tenant_id"] == admin.tenant_id
    assert event["user_id"] == admin.id
    assert event["correlation_id"] == correlation
    assert event["headers"] == {}
    assert at(event["occurred_at"]) == now
    assert event["payload"] == {
        "id": str(pid),
        "sku": "tea",
        "name": "Green tea",
        "stock": 8,
        "archived": False,
        "tenant_id": str(admin.tenant_id),
        "version": 1,
        "created_at": now.isoformat(),
        "updated_at": now.isoformat(),
    }
    assert alert_rows(inventory_app) == []  # alerts come from stock adjustments only


def test_a_retried_create_gets_the_first_answer(inventory_app: App, admin: User) -> None:
    """With an ``idempotency_key`` the repeat gets the stored ``ProductRef`` and creates
    nothing: the feature names its result class (``Feature(value_types=...)``), so every
    App using it can store it.  Before, the first call failed with unstorable_state."""
    order = CreateProduct("tea", "Green tea", 8)
    first = inventory_app.dispatch(create_product, order, user=admin, idempotency_key="create-tea")
    assert isinstance(first, Ok) and isinstance(first.data, ProductRef), first
    before = snapshot(inventory_app)
    again = inventory_app.dispatch(create_product, order, user=admin, idempotency_key="create-tea")
    assert again == first
    assert snapshot(inventory_app) == before


@pytest.mark.parametrize("sku", ["tea", "kumiko_events"])
def test_create_with_a_taken_sku_is_a_unique_violation(inventory_app: App, admin: User, sku: str) -> None:
    """Also for a sku that names the event table: PostgreSQL quotes the clashing value in its
    message, and that must not turn the failure into a version_conflict."""
    create(inventory_app, admin, sku, 3)
    before = snapshot(inventory_app)
    result = failed(
        inventory_app.dispatch(create_product, CreateProduct(sku, "again", 1), user=admin), "unique_violation"
    )
    assert isinstance(result.details, dict) and result.details["entity"] == "Product"
    assert snapshot(inventory_app) == before


def test_a_value_the_columns_cannot_hold_is_a_validation_error(inventory_app: App, admin: User) -> None:
    """The payload types admit it, the columns cannot hold it: the input's fault, a 400
    naming the field, the same on both databases (SQLite would store any of these), and
    nothing written."""
    create(inventory_app, admin, "tea", 3)
    before = snapshot(inventory_app)
    refused = {
        CreateProduct("big", "Big", 2**70): ("$.stock", "stock", "must be between -2147483648 and 2147483647"),
        CreateProduct("x" * 41, "Long", 1): ("$.sku", "sku", "must be at most 40 characters long, not 41"),
        CreateProduct("nul\x00", "NUL", 1): ("$.sku", "sku", "must not contain NUL characters (U+0000)"),
    }
    step = '0 aggregate.create "product"'
    for payload, (path, column, message) in refused.items():
        result = failed(inventory_app.dispatch(create_product, payload, user=admin), "validation_error")
        named = f"inventory_product.{column}, from {path}"
        assert result.message == f"step {step}: a value does not fit its column: {message} ({named})"
        assert result.details == [
            {"path": path, "message": message, "column": f"inventory_product.{column}", "step": step}
        ]
        assert snapshot(inventory_app) == before


def test_create_checks_roles_and_payload(inventory_app: App, make_user: MakeUser) -> None:
    before = snapshot(inventory_app)
    failed(inventory_app.dispatch(create_product, CreateProduct("x", "X"), user=make_user("User")), "access_denied")
    failed(inventory_app.dispatch_json(create_product.name, {"sku": "x"}, user=make_user("Admin")), "validation_error")
    failed(
        inventory_app.dispatch_json(
            create_product.name, {"sku": "x", "name": "X", "stock": "3"}, user=make_user("Admin")
        ),
        "validation_error",
    )
    assert snapshot(inventory_app) == before


# --- product:rename ------------------------------------------------------------------------------


def test_rename_writes_only_when_the_name_changes(
    inventory_app: App, admin: User, make_user: MakeUser, now: datetime
) -> None:
    pid = create(inventory_app, admin, "tea", 8, "Green tea")
    clerk = User(id=uuid.uuid4(), tenant_id=admin.tenant_id, roles={"User"})

    renamed = inventory_app.dispatch(rename_product, RenameProduct(pid, "Sencha", 1), user=clerk)
    assert renamed == Ok(Renamed(True, 2))
    row = product_row(inventory_app, pid)
    assert (row["name"], row["version"], row["sku"], row["stock"]) == ("Sencha", 2, "tea", 8)
    assert at(row["updated_at"]) == now
    last = stream(inventory_app, pid)[-1]
    assert (last["type"], last["stream_version"], last["payload"]) == (
        "product.updated",
        2,
        {"changes": {"name": "Sencha"}},
    )
    assert last["user_id"] == clerk.id

    # the same name again: nothing to do, nothing written, the current version reported
    before = snapshot(inventory_app)
    assert inventory_app.dispatch(rename_product, RenameProduct(pid, "Sencha", 1), user=admin) == Ok(Renamed(False, 2))
    assert snapshot(inventory_app) == before

    # a new name on a stale version: conflict, nothing written
    stale = failed(
        inventory_app.dispatch(rename_product, RenameProduct(pid, "Matcha", 1), user=admin), "version_conflict"
    )
    assert stale.details == {"entity_id": str(pid), "expected_version": 1, "current_version": 2}
    assert stale.http_status == 409
    assert snapshot(inventory_app) == before

    # unknown product, or a product of another tenant: not found
    failed(inventory_app.dispatch(rename_product, RenameProduct(uuid.uuid4(), "X", 1), user=admin), "not_found")
    failed(inventory_app.dispatch(rename_product, RenameProduct(pid, "X", 2), user=make_user("Admin")), "not_found")
    assert snapshot(inventory_app) == before
    assert len(stream(inventory_app, pid)) == 2


# --- product:adjust-stock ------------------------------------------------------------------------


def test_adjust_stock_appends_the_event_and_maintains_the_alert(inventory_app: App, admin: User) -> None:
    pid = create(inventory_app, admin, "tea", 8)

    assert inventory_app.dispatch(adjust_stock, AdjustStock(pid, -5, "sold"), user=admin) == Ok(3)
    row = product_row(inventory_app, pid)
    assert (row["stock"], row["version"]) == (3, 2)
    last = stream(inventory_app, pid)[-1]
    assert (last["type"], last["aggregate_type"], last["stream_version"]) == ("product-stock-adjusted", "product", 2)
    assert last["payload"] == {"delta": -5, "reason": "sold"}
    assert alert_rows(inventory_app) == [{"product_id": pid, "tenant_id": admin.tenant_id, "sku": "tea", "stock": 3}]

    # still low: the alert row is updated in place (upsert)
    assert inventory_app.dispatch(adjust_stock, AdjustStock(pid, 1, "found one"), user=admin) == Ok(4)
    assert alert_rows(inventory_app) == [{"product_id": pid, "tenant_id": admin.tenant_id, "sku": "tea", "stock": 4}]

    # back above the threshold: the alert row is deleted
    assert inventory_app.dispatch(adjust_stock, AdjustStock(pid, 10, "delivery"), user=admin) == Ok(14)
    assert alert_rows(inventory_app) == []

    # the row is the replay of its stream (the projector applied every delta)
    events_ = stream(inventory_app, pid)
    assert [e["stream_version"] for e in events_] == [1, 2, 3, 4]
    assert product_row(inventory_app, pid)["stock"] == events_[0]["payload"]["stock"] + sum(
        e["payload"]["delta"] for e in events_[1:]
    )
    assert product_row(inventory_app, pid)["version"] == 4


def test_adjust_stock_below_zero_is_unprocessable_and_writes_nothing(inventory_app: App, admin: User) -> None:
    pid = create(inventory_app, admin, "tea", 8)
    assert inventory_app.dispatch(adjust_stock, AdjustStock(pid, -5, "sold"), user=admin) == Ok(3)
    before = snapshot(inventory_app)

    result = failed(inventory_app.dispatch(adjust_stock, AdjustStock(pid, -9, "oops"), user=admin), "unprocessable")
    assert result.details == {"stock": -6}
    assert result.http_status == 422
    # the event was appended and the alert upserted inside the transaction: all rolled back
    assert snapshot(inventory_app) == before
    assert product_row(inventory_app, pid)["stock"] == 3


def test_adjust_stock_of_unknown_archived_or_foreign_products_is_not_found(
    inventory_app: App, admin: User, make_user: MakeUser
) -> None:
    pid = create(inventory_app, admin, "tea", 8)
    archived = create(inventory_app, admin, "old", 8)
    assert isinstance(inventory_app.dispatch(archive_product, ArchiveProduct(archived, 1), user=admin), Ok)
    before = snapshot(inventory_app)
    failed(inventory_app.dispatch(adjust_stock, AdjustStock(uuid.uuid4(), 1, "x"), user=admin), "not_found")
    failed(inventory_app.dispatch(adjust_stock, AdjustStock(archived, 1, "x"), user=admin), "not_found")
    failed(inventory_app.dispatch(adjust_stock, AdjustStock(pid, 1, "x"), user=make_user("Admin")), "not_found")
    failed(inventory_app.dispatch(adjust_stock, AdjustStock(pid, 1, "x"), user=make_user()), "access_denied")
    assert snapshot(inventory_app) == before


def test_a_stream_out_of_step_with_its_row_is_a_version_conflict(inventory_app: App, admin: User) -> None:
    """The (stream, version) constraint of kumiko_events is the last line of defence: an
    event already stored at the version being appended is a version_conflict, not an error."""
    pid = create(inventory_app, admin, "tea", 8)
    with inventory_app.engine.begin() as conn:
        conn.execute(
            sa.insert(events).values(
                event_id=uuid.uuid4(),
                stream_id=pid,
                aggregate_type="product",
                stream_version=2,
                type="product-stock-adjusted",
                payload={"delta": 1, "reason": "written behind the row's back"},
                headers={},
                tenant_id=admin.tenant_id,
                user_id=None,
                correlation_id=None,
                occurred_at=datetime(2024, 1, 1, tzinfo=UTC),
            )
        )
    before = snapshot(inventory_app)
    result = failed(inventory_app.dispatch(adjust_stock, AdjustStock(pid, 1, "x"), user=admin), "version_conflict")
    assert result.details == {"entity_id": str(pid), "expected_version": 1, "current_version": 2}
    assert snapshot(inventory_app) == before


# --- product:bulk-adjust -------------------------------------------------------------------------


def test_bulk_adjust_is_all_or_nothing(inventory_app: App, admin: User, make_user: MakeUser) -> None:
    a = create(inventory_app, admin, "a", 10)
    b = create(inventory_app, admin, "b", 6)

    assert inventory_app.dispatch(
        bulk_adjust, BulkAdjust([Adjustment(a, -1), Adjustment(b, -2)], "count"), user=admin
    ) == Ok(2)
    assert (product_row(inventory_app, a)["stock"], product_row(inventory_app, b)["stock"]) == (9, 4)
    assert [(e["stream_id"], e["type"], e["stream_version"], e["payload"]) for e in event_rows(inventory_app)[2:]] == [
        (a, "product-stock-adjusted", 2, {"delta": -1, "reason": "count"}),
        (b, "product-stock-adjusted", 2, {"delta": -2, "reason": "count"}),
    ]
    # one correlation id for the whole bulk
    assert len({e["correlation_id"] for e in event_rows(inventory_app)[2:]}) == 1
    assert [(r["sku"], r["stock"]) for r in alert_rows(inventory_app)] == [("b", 4)]
    before = snapshot(inventory_app)

    # the second item fails: the first item's event, row change and alert delete roll back too
    result = failed(
        inventory_app.dispatch(bulk_adjust, BulkAdjust([Adjustment(b, 5), Adjustment(a, -100)], "x"), user=admin),
        "unprocessable",
    )
    assert result.details == {"stock": -91}
    assert snapshot(inventory_app) == before
    failed(
        inventory_app.dispatch(
            bulk_adjust, BulkAdjust([Adjustment(a, 1), Adjustment(uuid.uuid4(), 1)], "x"), user=admin
        ),
        "not_found",
    )
    failed(
        inventory_app.dispatch(bulk_adjust, BulkAdjust([Adjustment(a, 1)], "x"), user=make_user("User")),
        "access_denied",
    )
    assert snapshot(inventory_app) == before
    assert inventory_app.dispatch(bulk_adjust, BulkAdjust([], "nothing"), user=admin) == Ok(0)
    assert snapshot(inventory_app) == before


# --- product:archive ---------------------------------------------------------------------------


def test_archive_checks_the_version(inventory_app: App, admin: User) -> None:
    pid = create(inventory_app, admin, "tea", 8)
    assert inventory_app.dispatch(adjust_stock, AdjustStock(pid, 1, "x"), user=admin) == Ok(9)
    before = snapshot(inventory_app)
    stale = failed(inventory_app.dispatch(archive_product, ArchiveProduct(pid, 1), user=admin), "version_conflict")
    assert stale.details == {"entity_id": str(pid), "expected_version": 1, "current_version": 2}
    failed(inventory_app.dispatch(archive_product, ArchiveProduct(uuid.uuid4(), 1), user=admin), "not_found")
    assert snapshot(inventory_app) == before

    assert inventory_app.dispatch(archive_product, ArchiveProduct(pid, 2), user=admin) == Ok(ProductRef(pid, 3))
    row = product_row(inventory_app, pid)
    assert (row["archived"], row["version"], row["stock"]) == (True, 3, 9)
    last = stream(inventory_app, pid)[-1]
    assert (last["type"], last["stream_version"], last["payload"]) == (
        "product.updated",
        3,
        {"changes": {"archived": True}},
    )


# --- product:archive-low-stock -----------------------------------------------------------------


def test_archive_low_stock_archives_this_tenants_low_products(
    inventory_app: App, admin: User, make_user: MakeUser
) -> None:
    other = make_user("Admin")
    low1 = create(inventory_app, admin, "low1", 1)
    low3 = create(inventory_app, admin, "low3", 3)
    high = create(inventory_app, admin, "high", 7)
    gone = create(inventory_app, admin, "gone", 0)
    assert isinstance(inventory_app.dispatch(archive_product, ArchiveProduct(gone, 1), user=admin), Ok)
    foreign = create(inventory_app, other, "foreign", 0)
    versions_before = {pid: product_row(inventory_app, pid)["version"] for pid in (high, gone, foreign)}
    events_before = len(event_rows(inventory_app))

    assert inventory_app.dispatch(archive_low_stock, ArchiveLowStock(), user=admin) == Ok(["low1", "low3"])
    for pid in (low1, low3):
        row = product_row(inventory_app, pid)
        assert (row["archived"], row["version"]) == (True, 2)
        assert stream(inventory_app, pid)[-1]["payload"] == {"changes": {"archived": True}}
    for pid, version in versions_before.items():
        assert product_row(inventory_app, pid)["version"] == version
    assert not product_row(inventory_app, high)["archived"]
    assert not product_row(inventory_app, foreign)["archived"]
    assert len(event_rows(inventory_app)) == events_before + 2

    # nothing left below the threshold: nothing written; a higher threshold takes "high"
    before = snapshot(inventory_app)
    assert inventory_app.dispatch(archive_low_stock, ArchiveLowStock(), user=admin) == Ok([])
    assert snapshot(inventory_app) == before
    assert inventory_app.dispatch(archive_low_stock, ArchiveLowStock(threshold=8), user=admin) == Ok(["high"])
    failed(inventory_app.dispatch(archive_low_stock, ArchiveLowStock(), user=make_user("User")), "access_denied")


# --- report:low-stock --------------------------------------------------------------------------


def test_low_stock_report_is_tenant_scoped_and_ordered(inventory_app: App, admin: User, make_user: MakeUser) -> None:
    other = make_user("Admin")
    for sku, stock, delta in (("b", 5, -1), ("a", 5, -1), ("c", 9, -8), ("d", 9, -1)):
        pid = create(inventory_app, admin, sku, stock)
        assert isinstance(inventory_app.dispatch(adjust_stock, AdjustStock(pid, delta, "x"), user=admin), Ok)
    foreign = create(inventory_app, other, "z", 2)
    assert inventory_app.dispatch(adjust_stock, AdjustStock(foreign, -2, "x"), user=other) == Ok(0)
    assert len(alert_rows(inventory_app)) == 4
    before = snapshot(inventory_app)

    reader = User(id=uuid.uuid4(), tenant_id=admin.tenant_id)  # no role: the report admits anyone
    report = inventory_app.query(low_stock_report, LowStockReport(), user=reader)
    assert report == Ok([AlertView("c", 1), AlertView("a", 4), AlertView("b", 4)])
    assert inventory_app.query(low_stock_report, LowStockReport(limit=2), user=reader) == Ok(
        [AlertView("c", 1), AlertView("a", 4)]
    )
    assert inventory_app.query(low_stock_report, LowStockReport(), user=other) == Ok([AlertView("z", 0)])
    assert inventory_app.query(low_stock_report, LowStockReport(), user=make_user()) == Ok([])
    assert inventory_app.query_json(low_stock_report.name, {}, user=reader) == report
    assert snapshot(inventory_app) == before


# --- the example's tour ------------------------------------------------------------------------


def test_the_example_runs_as_a_module(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "examples.inventory.app"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 9, proc.stdout
    assert lines[0].startswith("create       -> Ok(data=ProductRef(id=UUID(")
    assert lines[0].endswith("version=1))")
    assert lines[1] == "rename       -> Ok(data=Renamed(changed=True, version=2))"
    assert lines[2] == "rename again -> Ok(data=Renamed(changed=False, version=2))"
    assert lines[3].startswith("stale rename -> Failure(code='version_conflict'")
    assert "'expected_version': 1, 'current_version': 2" in lines[3]
    assert lines[4] == "adjust -5    -> Ok(data=3)"
    assert lines[5].startswith("adjust -9    -> Failure(code='unprocessable'")
    assert "details={'stock': -6}" in lines[5]
    assert lines[6] == "report       -> Ok(data=[AlertView(sku='tea', stock=3)])"
    assert lines[7] == "retried sale -> Ok(data=3)"  # not a second sale (-2: refused)
    assert lines[8] == "reminders    -> 1"
    assert list(tmp_path.glob("kumiko-inventory-*/inventory.sqlite3")), "the tour's database is in TMPDIR"
