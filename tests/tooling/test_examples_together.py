"""Every example imports beside every other in one process, as a user's service imports
several features: two entities of one table name (a port's ``shop_order`` and another's)
made the whole test run fail at collection, in whichever worker met both."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _example_modules() -> list[str]:
    found = []
    for package in ("examples.inventory", "examples.ports"):
        folder = ROOT / package.replace(".", "/")
        found += [f"{package}.{m.name}" for m in pkgutil.iter_modules([str(folder)]) if not m.name.startswith("_")]
    return sorted(found)


def test_every_example_imports_beside_every_other() -> None:
    modules = _example_modules()
    assert "examples.ports.shop" in modules and "examples.ports.order_saga" in modules
    # A fresh interpreter: this one may have imported some of them already.
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run(
        [sys.executable, "-c", code, *modules], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
