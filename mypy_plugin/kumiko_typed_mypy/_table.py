"""Loading the step rule table (``kumiko_typed/_rules.py``) by file path.

Importing ``kumiko_typed`` would pull SQLAlchemy and the whole runtime into every mypy
process, so the table, a standalone module that imports only the standard library, is
executed on its own.  Two readers use this: the plugin (``_rules.py``, the installed
table) and ``scripts/generate_builders.py`` (the table of its own checkout).  This
module imports only the standard library too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The name the plugin's copy of the table is registered under in ``sys.modules``.
PLUGIN_TABLE = "kumiko_typed_mypy._rule_table"


def installed() -> Path:
    """The path of the rule table of the installed ``kumiko_typed``, found without importing it."""
    package = importlib.util.find_spec("kumiko_typed")
    if package is None or not package.submodule_search_locations:
        raise ImportError("kumiko_typed_mypy needs the kumiko-typed package installed next to it")
    return Path(next(iter(package.submodule_search_locations))) / "_rules.py"


def load(path: Path, name: str) -> ModuleType:
    """Execute the rule table at ``path`` as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the kumiko-typed rule table from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
