"""``kumiko-typed demo``: the inventory example end to end on a fresh SQLite file.

Everything it writes (the SQLite file, the maildir) goes to one temporary folder, removed
at the end unless ``--keep``: a demo should leave nothing behind but what it says it left."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import click
from sqlalchemy import func, select

from ._app import App
from ._ctx import User
from ._database_urls import shown_url
from ._mail import MaildirTransport
from ._results import Failure, Ok
from ._tables import events

__all__ = ["run_demo"]


def _example() -> tuple[ModuleType, ModuleType]:
    """The flagship example, the repository's ``examples/inventory``: a wheel ships it as
    ``kumiko_typed._demo_app`` (pyproject's wheel ``sources``); an editable install of a clone
    has no such module and imports it from the clone this package's source lives in."""
    package = "kumiko_typed._demo_app"
    if importlib.util.find_spec(package) is None:
        clone = str(Path(__file__).resolve().parents[2])
        if clone not in sys.path:
            sys.path.insert(0, clone)
        package = "examples.inventory"
    try:
        return importlib.import_module(f"{package}.handlers"), importlib.import_module(f"{package}.model")
    except ImportError as exc:
        raise click.ClickException(f"this installation lacks the demo app ({exc}): reinstall kumiko-typed") from exc


def _show(label: str, result: Ok[Any] | Failure) -> None:
    if isinstance(result, Ok):
        click.echo(f"  {label:<34} " + click.style(f"ok   {result.data}", fg="green"))
    else:
        detail = f"{result.code}: {result.message}"
        click.echo(f"  {label:<34} " + click.style(f"fail {detail}", fg="yellow"))


def _section(title: str) -> None:
    click.echo()
    click.echo(click.style(title, fg="cyan", bold=True))


def run_demo(database_url: str | None, *, keep: bool = False) -> None:
    """The tour on ``database_url`` (default: a SQLite file in a temporary folder, which also
    holds the maildir); the folder is removed afterwards unless ``keep``."""
    handlers, model = _example()
    folder = Path(tempfile.mkdtemp(prefix="kumiko-demo-"))
    try:
        _tour(handlers, model, folder, database_url or f"sqlite:///{folder / 'demo.sqlite3'}")
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    click.echo()
    done = click.style("done", fg="green", bold=True)
    if keep:
        what = "the mail" if database_url else "the database and the mail"
        click.echo(f"{done} — kept {folder} ({what}); remove it with: rm -r {folder}")
    elif folder.exists():
        click.echo(f"{done} — could not remove the temporary folder {folder}: remove it yourself")
    else:
        click.echo(f"{done} — removed the temporary folder {folder} (--keep keeps it)")
    if database_url:
        click.echo(f"The demo's tables and rows stay in {shown_url(database_url)}.")


def _tour(handlers: ModuleType, model: ModuleType, folder: Path, url: str) -> None:
    clock = [datetime(2026, 12, 2, 9, 0, tzinfo=UTC)]
    app = App(
        [handlers.inventory],
        database_url=url,
        clock=lambda: clock[0],
        mail=MaildirTransport(str(folder / "mail")),
    )
    try:
        _walk_through(app, handlers, model, folder, clock, url)
    finally:
        app.dispose()  # before the folder with its SQLite file goes


def _walk_through(
    app: App, handlers: ModuleType, model: ModuleType, folder: Path, clock: list[datetime], url: str
) -> None:
    app.create_all()
    admin = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles={"Admin"})
    click.echo(click.style("kumiko-typed demo", bold=True) + f" — inventory example on {shown_url(url)}")

    def count_events() -> int:
        with app.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(events)).scalar_one())

    _section("1. Typed handlers, one transaction each")
    created = app.dispatch(handlers.create_product, model.CreateProduct("tea", "Green tea", 8), user=admin)
    _show("create product tea (stock 8)", created)
    assert isinstance(created, Ok)
    ref = created.data
    renamed = app.dispatch(handlers.rename_product, model.RenameProduct(ref.id, "Sencha", 1), user=admin)
    _show("rename to Sencha", renamed)
    _show(
        "rename to Sencha again (no-op)",
        app.dispatch(handlers.rename_product, model.RenameProduct(ref.id, "Sencha", 2), user=admin),
    )

    _section("2. Optimistic locking")
    _show(
        "rename with the stale version 1",
        app.dispatch(handlers.rename_product, model.RenameProduct(ref.id, "Matcha", 1), user=admin),
    )

    _section("3. Events, inline projection, and a rollback")
    _show("adjust stock by -5", app.dispatch(handlers.adjust_stock, model.AdjustStock(ref.id, -5, "sold"), user=admin))
    before = count_events()
    _show(
        "adjust stock by -9 (below zero)",
        app.dispatch(handlers.adjust_stock, model.AdjustStock(ref.id, -9, "oops"), user=admin),
    )
    after = count_events()
    click.echo(f"  {'events before / after the failure':<34} {before} / {after}  (rolled back: nothing written)")
    _show("low-stock report", app.query(handlers.low_stock_report, model.LowStockReport(), user=admin))
    _show(
        "untrusted JSON with a wrong type",
        app.dispatch_json(
            "inventory:product:adjust-stock", {"id": str(ref.id), "delta": "ten", "reason": "x"}, user=admin
        ),
    )

    _section("4. A workflow that waits a day, then mails through the outbox")
    run_id = app.start_workflow(handlers.restock_reminder, model.LowStockFollowUp(ref.id, "tea"), user=admin)
    _run(app, run_id, "started")
    clock[0] += timedelta(days=1)
    counts = app.run_worker(once=True)
    click.echo(f"  {'the clock moves one day; worker pass':<34} {counts}")
    _run(app, run_id, "after the worker")
    for item in app.outbox():
        click.echo(f"  {'outbox':<34} {item.kind} {item.status} after {item.attempts} attempt(s)")
    for path in sorted((folder / "mail").glob("*.eml")):
        subject = next((line for line in path.read_text().splitlines() if line.startswith("Subject:")), "")
        click.echo(f"  {'delivered to the maildir':<34} {path.name}  ({subject})")


def _run(app: App, run_id: uuid.UUID, when: str) -> None:
    info = app.get_run(run_id)
    assert info is not None
    where = f" at step {info.path}" if info.status == "suspended" else ""
    wake = f", wakes {info.wake_at:%Y-%m-%d %H:%M}" if info.wake_at else ""
    click.echo(f"  {'run ' + when:<34} {info.status}{where}{wake}")
