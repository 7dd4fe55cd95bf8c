"""The public surface is curated: what ``kumiko_typed`` exports is pinned here, every
private module says what it offers (``__all__``), and the failure codes have their
HTTP status.  A change to any of these is a decision, taken by editing this file.

The packages import their public names when first read (``_lazy_exports``): each name's
table entry, the checkers' import and ``__all__`` agree, and reading a name gives the
object its module defines, as an eager import did."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import textwrap
import traceback
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import get_args

import pytest

import kumiko_typed
import kumiko_typed.testing
from kumiko_typed import HTTP_STATUS, App, FailureCode
from kumiko_typed._lazy_exports import lazy_exports

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
    helper the package imports for itself (``version`` was importlib's), read or not yet."""
    listed = {n for n in dir(kumiko_typed) if not n.startswith("_")}
    # Modules aside: the subpackage ``testing``, and pytest's for the asserts it rewrote here.
    assert {n for n in listed if not inspect.ismodule(vars(kumiko_typed).get(n))} == set(PUBLIC)
    for name in PUBLIC:
        getattr(kumiko_typed, name)
    public = {n for n, v in vars(kumiko_typed).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert public == set(PUBLIC)


def _checkers_imports(package: ModuleType) -> dict[str, str]:
    """The names the package's ``if _typing.TYPE_CHECKING:`` block imports (``X as X``,
    which mypy and pyright take as re-exports), each with its module, as written."""
    assert package.__file__ is not None
    tree = ast.parse(Path(package.__file__).read_text())
    [block] = [
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "_typing.TYPE_CHECKING"
    ]
    found: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name} is no re-export: write {alias.name} as {alias.name}"
            found[alias.name] = "." * node.level + (node.module or "")
    return found


@pytest.mark.parametrize("package", [kumiko_typed, kumiko_typed.testing], ids=lambda m: m.__name__)
def test_the_lazy_table_the_checkers_imports_and_all_name_the_same(package: ModuleType) -> None:
    """One table says where each public name comes from (``_WHERE``); what mypy and pyright
    read (the imports under TYPE_CHECKING) and ``__all__`` must say the same."""
    table: dict[str, str] = package._WHERE
    assert _checkers_imports(package) == table
    assert sorted(package.__all__) == sorted(table)
    assert len(set(package.__all__)) == len(package.__all__)


@pytest.mark.parametrize("package", [kumiko_typed, kumiko_typed.testing], ids=lambda m: m.__name__)
def test_every_public_name_is_the_object_its_module_defines(package: ModuleType) -> None:
    for name, module in package._WHERE.items():
        defined = getattr(importlib.import_module(module, package.__name__), name)
        assert getattr(package, name) is defined, name
        assert vars(package)[name] is defined  # kept: the next read is a plain lookup


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a new interpreter, which has imported nothing of the library yet."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )


def test_importing_the_packages_imports_none_of_the_library() -> None:
    """What the pytest plugin imports in every pytest run: the packages, not their names'
    modules nor SQLAlchemy; reading a name imports its module then."""
    run = _fresh(
        """
        import sys
        import kumiko_typed, kumiko_typed.testing
        print(sorted(m for m in sys.modules if m.startswith(("kumiko_typed", "sqlalchemy"))))
        kumiko_typed.App
        print("sqlalchemy" in sys.modules, "kumiko_typed._app" in sys.modules)
        """
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "['kumiko_typed', 'kumiko_typed._lazy_exports', 'kumiko_typed.testing']",
        "True True",
    ]


def test_import_star_gives_all_and_nothing_else() -> None:
    run = _fresh(
        """
        before = set(globals())
        from kumiko_typed import *
        print(sorted(set(globals()) - before - {"before"}))
        from kumiko_typed.testing import *
        print(sorted(n for n in ("AppFactory", "AppSettings", "FakeClock", "MemoryMail") if n in globals()))
        """
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        str(sorted(PUBLIC)),
        "['AppFactory', 'AppSettings', 'FakeClock', 'MemoryMail']",
    ]


def test_an_unknown_name_is_the_usual_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'kumiko_typed' has no attribute 'Nope'$") as raised:
        kumiko_typed.Nope  # type: ignore[attr-defined]
    assert raised.value.name == "Nope" and raised.value.obj is kumiko_typed  # what "Did you mean" reads
    with pytest.raises(ImportError, match=r"^cannot import name 'Nope' from 'kumiko_typed'"):
        from kumiko_typed import Nope  # type: ignore[attr-defined]  # noqa: F401
    with pytest.raises(AttributeError, match=r"^module 'kumiko_typed.testing' has no attribute 'FakeClok'$"):
        kumiko_typed.testing.FakeClok  # type: ignore[attr-defined]
    assert not hasattr(kumiko_typed, "Nope")
    # A private module is still found as one (``from .. import _interpreter`` in _steps).
    assert importlib.import_module("kumiko_typed._rules") is kumiko_typed._rules


def _broken_package(root: Path, body: str) -> None:
    """A package whose one public name ``Thing`` lives in ``_thing``, whose code is ``body``."""
    (root / "brokenpkg").mkdir()
    (root / "brokenpkg" / "__init__.py").write_text(
        "from kumiko_typed._lazy_exports import lazy_exports\n"
        "__all__ = ['Thing']\n"
        "__getattr__, __dir__ = lazy_exports(__name__, globals(), {'Thing': '._thing'})\n"
    )
    (root / "brokenpkg" / "_thing.py").write_text(body)


@pytest.mark.parametrize(
    ("body", "raised", "says"),
    [
        ("import not_installed_anywhere\nThing = 1\n", ModuleNotFoundError, "No module named 'not_installed_anywhere'"),
        ("raise RuntimeError('the module broke')\n", RuntimeError, "the module broke"),
        # An AttributeError would read as "no such name": it is an ImportError caused by it.
        ("import os\nThing = os.not_there\n", ImportError, "module 'os' has no attribute 'not_there'"),
        ("Other = 1\n", ImportError, "module 'brokenpkg._thing' has no attribute 'Thing'"),
    ],
    ids=["missing-dependency", "error", "attribute-error", "name-not-there"],
)
def test_an_import_error_of_a_lazy_name_is_raised_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, raised: type[Exception], says: str
) -> None:
    """Neither ``getattr`` nor ``from package import name`` hides why the name's module did
    not import: the error is raised with its traceback (in the module's own code)."""
    _broken_package(tmp_path, body)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("brokenpkg")]:
        monkeypatch.delitem(sys.modules, name)
    package = importlib.import_module("brokenpkg")
    with pytest.raises(raised) as first:
        package.Thing
    with pytest.raises(raised) as second:
        exec("from brokenpkg import Thing", {})
    for error in (first.value, second.value):
        assert says in str(error) + str(error.__cause__)
    if body.startswith("import os"):
        assert isinstance(first.value.__cause__, AttributeError)
        frames = [f.filename for f in traceback.extract_tb(first.value.__cause__.__traceback__)]
        assert frames[-1].endswith("_thing.py")
    assert "Thing" in dir(package) and "Thing" not in vars(package)
    monkeypatch.delitem(sys.modules, "brokenpkg")


def test_lazy_exports_serves_dir_with_what_is_read_and_what_is_not() -> None:
    namespace: dict[str, object] = {"__name__": "x", "kept": 1}
    _, listing = lazy_exports("kumiko_typed", namespace, {"ok": "._results"})
    assert listing() == ["__name__", "kept", "ok"]


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
