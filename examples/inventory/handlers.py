"""The inventory feature: every handler a pipeline that mypy types end to end."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from kumiko_typed import Feature, fail, manual, ok

from .model import (
    LOW_STOCK,
    AdjustStock,
    AlertView,
    ArchiveLowStock,
    ArchiveProduct,
    BulkAdjust,
    CreateProduct,
    LowStockAlert,
    LowStockFollowUp,
    LowStockReport,
    Product,
    ProductRef,
    Renamed,
    RenameProduct,
    StockAdjusted,
)

inventory = Feature(
    "inventory",
    requires=["call_feature", "mail.send"],
    projections=[LowStockAlert],
    value_types=[ProductRef],  # a result stored for an idempotency_key
)
inventory.entity(Product)
inventory.event(StockAdjusted, name="product-stock-adjusted")


@inventory.projector(Product, StockAdjusted)
def apply_stock(row: Product, event: StockAdjusted) -> None:
    row.stock += event.delta


create_product = inventory.write_handler(
    "product:create",
    inventory.pipeline(CreateProduct)
    .create("product", Product, data=lambda c: Product(sku=c.payload.sku, name=c.payload.name, stock=c.payload.stock))
    .return_(lambda c: ok(ProductRef(c.steps["product"].id, c.steps["product"].version))),
    roles=["Admin"],
)

rename_product = inventory.write_handler(
    "product:rename",
    inventory.pipeline(RenameProduct)
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))
    .branch(
        when=lambda c: c.steps["product"].name != c.payload.name,
        on_true=lambda b: b.update(
            "renamed",
            Product,
            id=lambda c: c.payload.id,
            changes=lambda c: {"name": c.payload.name},
            version=lambda c: c.payload.version,
        ),
    )
    .return_(
        lambda c: ok(
            Renamed(True, renamed.version)
            if (renamed := c.steps["renamed"]) is not None
            else Renamed(False, c.steps["product"].version)
        )
    ),
    roles=["Admin", "User"],
)

adjust_stock = inventory.write_handler(
    "product:adjust-stock",
    inventory.pipeline(AdjustStock)
    .get_one("product", lambda c: select(Product).where(Product.id == c.payload.id, Product.archived.is_(False)))
    # The event appends the version after the one read here: if another adjust got there
    # first, this one is a version_conflict.  The projector updates this same object: the
    # stock read after it is the one read plus this delta, committed only if still current.
    .append_event(Product, id=lambda c: c.payload.id, event=lambda c: StockAdjusted(c.payload.delta, c.payload.reason))
    .compute("new_stock", lambda c: c.steps["product"].stock)
    .guard(
        lambda c: c.steps["new_stock"] >= 0,
        otherwise=lambda c: fail("unprocessable", "stock cannot go below zero", {"stock": c.steps["new_stock"]}),
    )
    .branch(
        when=lambda c: c.steps["new_stock"] < LOW_STOCK,
        on_true=lambda b: b.unsafe_projection_upsert(
            LowStockAlert,
            on=["product_id"],
            row=lambda c: {
                "product_id": c.payload.id,
                "tenant_id": c.user.tenant_id,
                "sku": c.steps["product"].sku,
                "stock": c.steps["new_stock"],
            },
        ),
        on_false=lambda b: b.unsafe_projection_delete(
            LowStockAlert, where=lambda c: LowStockAlert.product_id == c.payload.id
        ),
    )
    .return_(lambda c: ok(c.steps["new_stock"])),
    roles=["Admin", "User"],
)

bulk_adjust = inventory.write_handler(
    "product:bulk-adjust",
    inventory.pipeline(BulkAdjust)
    .for_each(
        "item",
        over=lambda c: c.payload.items,
        do=lambda b: b.call_feature(
            "adjusted",
            adjust_stock,
            payload=lambda c: AdjustStock(c.scope["item"].id, c.scope["item"].delta, c.payload.reason),
        ),
    )
    .return_(lambda c: ok(len(c.payload.items))),
    roles=["Admin"],
)

archive_product = inventory.write_handler(
    "product:archive",
    inventory.pipeline(ArchiveProduct)
    .update(
        "archived",
        Product,
        id=lambda c: c.payload.id,
        changes=lambda c: {"archived": True},
        version=lambda c: c.payload.version,
    )
    .return_(lambda c: ok(ProductRef(c.steps["archived"].id, c.steps["archived"].version))),
    roles=["Admin"],
)

archive_low_stock = inventory.write_handler(
    "product:archive-low-stock",
    inventory.pipeline(ArchiveLowStock)
    .find_many(
        "low",
        lambda c: select(Product).where(Product.stock < c.payload.threshold, Product.archived.is_(False)),
    )
    .for_each(
        "product",
        over=lambda c: c.steps["low"],
        do=lambda b: b.update(
            "archived",
            Product,
            id=lambda c: c.scope["product"].id,
            changes=lambda c: {"archived": True},
            skip_optimistic_lock=True,
        ),
    )
    .return_(lambda c: ok(sorted(p.sku for p in c.steps["low"]))),
    roles=["Admin"],
)

# A query: it only reads, so app.query runs it in a read-only transaction.
low_stock_report = inventory.query_handler(
    "report:low-stock",
    inventory.query_pipeline(LowStockReport)
    .find_many(
        "alerts",
        lambda c: (
            select(LowStockAlert)
            .where(LowStockAlert.tenant_id == c.user.tenant_id)
            .order_by(LowStockAlert.stock, LowStockAlert.sku)
        ),
        limit=1000,
    )
    .return_(lambda c: ok([AlertView(a.sku, a.stock) for a in c.steps["alerts"][: c.payload.limit]])),
)

restock_reminder = inventory.workflow(
    "restock-reminder",
    trigger=manual(LowStockFollowUp),
    pipeline=inventory.workflow_pipeline(LowStockFollowUp)
    .wait(timedelta(days=1))
    .find_one("product", lambda c: select(Product).where(Product.id == c.payload.product_id))
    .branch(
        when=lambda c: (product := c.steps["product"]) is not None and product.stock < LOW_STOCK,
        on_true=lambda b: b.send_mail(
            to="purchasing@example.com",
            subject=lambda c: f"Restock {c.payload.sku}",
            body=lambda c: f"{c.payload.sku} has been low on stock for a day.",
        ),
    ),
)
