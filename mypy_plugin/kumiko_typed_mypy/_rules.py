"""The step rule table, loaded by file path from the installed ``kumiko_typed``.

Importing ``kumiko_typed`` itself would pull SQLAlchemy and the whole runtime into
every mypy process; the rule table is a standalone, stdlib-only module, so it is
executed on its own.  One source of truth, read by the runtime and by the plugin.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _load() -> ModuleType:
    name = "kumiko_typed_mypy._rule_table"
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("kumiko_typed")
    if package is None or not package.submodule_search_locations:
        raise ImportError("kumiko_typed_mypy needs the kumiko-typed package installed next to it")
    path = Path(next(iter(package.submodule_search_locations))) / "_rules.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the kumiko-typed rule table from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rules = _load()
