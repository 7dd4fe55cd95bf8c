"""``./dev mutants`` (scripts/mutants.py) is too slow for the per-commit run; what can go
stale without a run noticing is checked here: its table of guarantee modules and test files
names files that exist (a module renamed in a refactor must be renamed there too), and the
names it takes on its command line."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_script", ROOT / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_guarantee_module_and_test_file_exists() -> None:
    script = _script()
    missing = [
        path
        for key, tests in script.MODULES.items()
        for path in [f"{script.PACKAGE}/{key}.py", *tests]
        if not (ROOT / path).is_file()
    ]
    assert missing == []


@pytest.mark.parametrize(
    "arg",
    ["structuring", "_structuring", "kumiko_typed._structuring", "src/kumiko_typed/_structuring.py"],
)
def test_a_module_is_named_the_way_a_person_would(arg: str) -> None:
    assert _script().module_key(arg) == "_structuring"


def test_a_nested_module_and_an_unknown_one() -> None:
    script = _script()
    assert script.module_key("kumiko_typed._steps.reads") == "_steps/reads"
    with pytest.raises(SystemExit, match=r"unknown module 'nothing'; the guarantee modules are: _delivery, "):
        script.module_key("nothing")
