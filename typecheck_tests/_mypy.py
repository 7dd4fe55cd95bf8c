"""Running mypy and pyright over snippet files and reading what they say."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
CASES = HERE / "cases"
ROOT = HERE.parent
EXAMPLES = ROOT / "examples"

_LINE = re.compile(
    r"^(?P<file>[^:]+):(?P<line>\d+): (?P<severity>error|note): (?P<message>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
_EXPECT = re.compile(r"#\s*(?P<kind>[ERM]|P[RE]):\s*(?P<value>.*?)\s*(?=#\s*(?:[ERM]|P[RE]):|$)")


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int
    #: mypy's "E" (error code), "M" (the text of a kumiko-* error) and "R" (revealed type);
    #: pyright's "PE" (error rule) and "PR" (revealed type), without the plugin.
    kind: str
    value: str


def expected(path: Path, kinds: tuple[str, ...] = ("E", "M", "R")) -> set[Finding]:
    """``# E: <code>``, ``# M: <kumiko-* message>`` and ``# R: <revealed type>`` comments of one
    snippet file (mypy with the plugin), or with ``kinds=("PE", "PR")`` pyright's."""
    out: set[Finding] = set()
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if "#" not in text:
            continue
        comment = text[text.index("  #") + 2 :] if "  #" in text else ""
        for match in _EXPECT.finditer(comment):
            if match["kind"] in kinds:
                out.add(Finding(path.name, number, match["kind"], match["value"]))
    return out


def parse(output: str) -> tuple[set[Finding], list[str]]:
    """Errors (by code) and revealed types; other lines are returned for diagnostics."""
    found: set[Finding] = set()
    other: list[str] = []
    for raw in output.splitlines():
        m = _LINE.match(raw)
        if m is None:
            other.append(raw)
            continue
        name = Path(m["file"]).name
        if m["severity"] == "error":
            code = m["code"] or "?"
            found.add(Finding(name, int(m["line"]), "E", code))
            if code.startswith("kumiko-"):
                found.add(Finding(name, int(m["line"]), "M", m["message"]))
        elif m["message"].startswith("Revealed type is "):
            found.add(Finding(name, int(m["line"]), "R", m["message"][len('Revealed type is "') : -1]))
    return found, other


def mypy(*args: str, cwd: Path, config: Path | None, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(cache_dir), "--show-error-codes", "--no-pretty"]
    cmd += ["--config-file", str(config)] if config else ["--config-file", str(CASES / "no_plugin.ini")]
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True, check=False)


def pyright(*paths: Path, mode: str, config_dir: Path) -> dict[str, object]:
    """pyright's JSON report on ``paths`` in ``typeCheckingMode`` ``mode`` ("basic", "strict"...).

    The configuration file is written to ``config_dir``, which becomes pyright's project
    root; the case files' shared ``_models`` module is found through ``extraPaths``."""
    config = config_dir / "pyrightconfig.json"
    config.write_text(json.dumps({"typeCheckingMode": mode, "extraPaths": [str(CASES)]}))
    cmd = [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, "-p", str(config)]
    result = subprocess.run([*cmd, *map(str, paths)], capture_output=True, text=True, check=False, cwd=ROOT)
    try:
        data: dict[str, object] = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"pyright did not answer JSON:\n{result.stdout}\n{result.stderr}") from exc
    return data


def pyright_errors(data: dict[str, object]) -> list[str]:
    """pyright's errors as ``file:line: message (rule)`` lines."""
    diagnostics = data["generalDiagnostics"]
    assert isinstance(diagnostics, list)
    out: list[str] = []
    for d in diagnostics:
        if d.get("severity") == "error":
            line = d["range"]["start"]["line"] + 1
            out.append(f"{Path(d['file']).name}:{line}: {d['message']} ({d.get('rule', '?')})")
    return out


def pyright_findings(data: dict[str, object]) -> set[Finding]:
    """pyright's revealed types (``PR``) and error rules (``PE``), one per line and rule."""
    diagnostics = data["generalDiagnostics"]
    assert isinstance(diagnostics, list)
    out: set[Finding] = set()
    for d in diagnostics:
        name, line = Path(d["file"]).name, d["range"]["start"]["line"] + 1
        if d["severity"] == "information" and d["message"].startswith("Type of "):
            out.add(Finding(name, line, "PR", d["message"].rpartition(" is ")[2][1:-1]))
        elif d["severity"] == "error":
            out.add(Finding(name, line, "PE", d.get("rule", "?")))
    return out
