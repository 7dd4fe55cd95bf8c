"""The public surface is curated: what ``kumiko_typed`` exports is pinned here, every
private module says what it offers (``__all__``), and the failure codes have their
HTTP status.  A change to any of these is a decision, taken by editing this file."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from importlib.metadata import version
from typing import get_args

import kumiko_typed
from kumiko_typed import HTTP_STATUS, App, FailureCode

PUBLIC = [
    "HTTP_STATUS",
    "AggregateCreated",
    "AggregateUpdated",
    "App",
    "Auth",
    "BootError",
    "Command",
    "CronTick",
    "Ctx",
    "DeliveryError",
    "Entity",
    "Failure",
    "FailureCode",
    "Feature",
    "Finished",
    "Incompatible",
    "MailMessage",
    "MailTransport",
    "MaildirTransport",
    "Ok",
    "OutboxItem",
    "Pipeline",
    "ProjectionReport",
    "QueryFinished",
    "QueryHandler",
    "QueryPipeline",
    "QuerySubPipeline",
    "RetryPolicy",
    "RunInfo",
    "Saved",
    "SmtpTransport",
    "StoredEvent",
    "SubPipeline",
    "Trigger",
    "User",
    "Workflow",
    "WorkflowFinished",
    "WorkflowPipeline",
    "WorkflowSubPipeline",
    "WriteHandler",
    "WriteResult",
    "bearer",
    "cron",
    "fail",
    "header_auth",
    "mail_address",
    "manual",
    "ok",
    "on_event",
    "signed",
]


def test_the_public_names_are_exactly_these() -> None:
    assert sorted(kumiko_typed.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(kumiko_typed, name) is not None


def test_nothing_else_is_reachable_as_a_public_name() -> None:
    """``dir(kumiko_typed)`` and an editor's completion offer the curated names only: no
    helper the package imports for itself (``version`` was importlib's)."""
    public = {n for n, v in vars(kumiko_typed).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert public == set(PUBLIC)


def test_the_version_is_the_installed_distributions() -> None:
    assert kumiko_typed.__version__ == version("kumiko-typed")


def _private_modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages(kumiko_typed.__path__, "kumiko_typed."):
        last = info.name.rsplit(".", 1)[-1]
        if last.startswith("_") and last != "__main__":
            found.append(info.name)
    return found


def test_every_private_module_says_what_it_offers() -> None:
    modules = _private_modules()
    assert len(modules) > 30  # the walk found the library, not an empty folder
    missing = []
    for name in modules:
        module = importlib.import_module(name)
        offered = getattr(module, "__all__", None)
        if offered is None:
            missing.append(name)
            continue
        assert all(hasattr(module, n) for n in offered), name
    assert missing == []


def test_every_failure_code_has_its_http_status() -> None:
    assert set(get_args(FailureCode)) == set(HTTP_STATUS)
    assert all(400 <= status < 600 for status in HTTP_STATUS.values())


def test_the_app_documents_every_constructor_parameter() -> None:
    doc = inspect.getdoc(App) or ""
    for parameter in inspect.signature(App).parameters:
        assert re.search(rf"^\s+{parameter}:", doc, re.M), parameter
