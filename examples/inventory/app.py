"""Building the inventory App (``python -m examples.inventory.app`` runs a short tour)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from kumiko_typed import App, Ok, User

from .handlers import adjust_stock, create_product, inventory, low_stock_report, rename_product, restock_reminder
from .model import AdjustStock, CreateProduct, LowStockFollowUp, LowStockReport, RenameProduct


def make_app(database_url: str = "sqlite:///inventory.sqlite3") -> App:
    app = App([inventory], database_url=database_url)
    app.create_all()
    return app


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="kumiko-inventory-"))
    app = make_app(f"sqlite:///{folder / 'inventory.sqlite3'}")
    admin = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"Admin"})
    created = app.dispatch(create_product, CreateProduct("tea", "Green tea", 8), user=admin)
    print("create       ->", created)
    if not isinstance(created, Ok):
        return
    ref = created.data
    print("rename       ->", app.dispatch(rename_product, RenameProduct(ref.id, "Sencha", ref.version), user=admin))
    print("rename again ->", app.dispatch(rename_product, RenameProduct(ref.id, "Sencha", ref.version), user=admin))
    print("stale rename ->", app.dispatch(rename_product, RenameProduct(ref.id, "Matcha", ref.version), user=admin))
    sale = AdjustStock(ref.id, -5, "sold")
    print("adjust -5    ->", app.dispatch(adjust_stock, sale, user=admin, idempotency_key="sale-1"))
    print("adjust -9    ->", app.dispatch(adjust_stock, AdjustStock(ref.id, -9, "oops"), user=admin))
    print("report       ->", app.query(low_stock_report, LowStockReport(), user=admin))
    # A client retrying the sale (its answer was lost) gets the first answer; nothing runs again.
    print("retried sale ->", app.dispatch(adjust_stock, sale, user=admin, idempotency_key="sale-1"))
    # One reminder per product, however often the low stock is noticed.
    follow_up = LowStockFollowUp(ref.id, "tea")
    runs = {app.start_workflow(restock_reminder, follow_up, user=admin, key=f"restock:{ref.id}") for _ in range(2)}
    print("reminders    ->", len(runs))
    app.dispose()


if __name__ == "__main__":
    main()
