"""The documentation's Python is real: every ```python block of README.md and docs/*.md is
type-checked with mypy and the kumiko-typed plugin (one run over all of them, zero errors
expected), checked by pyright in strict mode (zero errors) and executed in a fresh working
directory (exit 0 expected).

A block opts out only on purpose, with an HTML comment line right before its fence:

- ``<!-- fragment -->``: a piece of a program shown for explanation (not checked);
- ``<!-- file: NAME.py -->``: a module of a multi-file program.  It is checked like the
  others, every block of the same document runs next to a copy of that document's named
  files (so examples can import a shared set-up), and a ``test_*.py`` file is run with
  pytest instead of python.

A trailing ``# Revealed type is "..."`` comment on a line of a checked block must match
what mypy reveals there, and the comment after a top-level ``print(...)`` (on its line or
the next) is what it must print, ``...`` standing for any text.  docs/errors.md must show
every ``kumiko-*`` code, and the README's quoted plugin output must be what mypy says
about ``typecheck_tests/cases/errors_rules.py``.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _docblocks import ROOT, Block, parse

from kumiko_typed import _rules
from typecheck_tests._mypy import pyright, pyright_errors

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CASES = ROOT / "typecheck_tests" / "cases"
MYPY_INI = CASES / "mypy.ini"
#: Copied next to the blocks so the README's quoted mypy output is checked in the same run.
QUOTED_CASE = "errors_rules.py"

_REVEALED = re.compile(r'#\s*(?P<note>Revealed type is ".*")\s*$')
_MYPY_LINE = re.compile(r"^(?P<file>[^:\s]+\.py):(?P<line>\d+): (?P<severity>error|note): (?P<message>.*)$")
PYTHON_TAGS = {"python", "py", "python3"}


ALL_BLOCKS = [b for doc in DOCS for b in parse(doc)]
PYTHON = [b for b in ALL_BLOCKS if b.lang in PYTHON_TAGS]
CHECKED = [b for b in PYTHON if not b.fragment]


def test_docs_exist() -> None:
    names = {d.name for d in DOCS}
    assert names >= {"README.md", "tutorial.md", "steps.md", "plugin.md", "workflows.md", "operations.md", "errors.md"}
    assert CHECKED, "no checked python block found"


def test_every_python_block_is_checked_or_marked() -> None:
    """Fails for a block that would escape the checks: an unknown marker, a ``py`` fence, a
    duplicated file name (named files share one type-check directory)."""
    problems: list[str] = []
    for block in PYTHON:
        if block.lang != "python":
            problems.append(f"{block.label}: write ```python (not ```{block.lang}) so that the block is checked")
        if block.marker is not None and not block.fragment and block.named is None:
            problems.append(
                f"{block.label}: unknown marker <!-- {block.marker} -->; use <!-- fragment --> "
                "or <!-- file: NAME.py --> (or nothing, for a complete program)"
            )
        if not block.fragment and not block.code.strip():
            problems.append(f"{block.label}: empty block")
    names = [b.filename for b in CHECKED]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(
            f"file name {name} is used by more than one block: "
            + ", ".join(b.label for b in CHECKED if b.filename == name)
        )
    if QUOTED_CASE in names or "_models.py" in names:
        problems.append(f"{QUOTED_CASE} and _models.py are reserved for the quoted mypy case")
    # Every python block is either a fragment or one of the blocks the tests below check.
    unchecked = [b.label for b in PYTHON if not b.fragment and b not in CHECKED]
    assert not problems and not unchecked, "\n".join(problems + unchecked)


def _clean_env() -> dict[str, str]:
    drop = ("KUMIKO_", "PYTEST_", "MYPY")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _write_blocks(tmp_dir: Path) -> None:
    for block in CHECKED:
        (tmp_dir / block.filename).write_text(block.code, encoding="utf-8")


def _mypy_output(tmp_dir: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    _write_blocks(tmp_dir)
    for name in (QUOTED_CASE, "_models.py"):
        shutil.copy(CASES / name, tmp_dir / name)
    files = sorted({b.filename for b in CHECKED} | {QUOTED_CASE})
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(MYPY_INI), "--cache-dir", str(tmp_dir / ".mypy_cache")]
    cmd += ["--show-error-codes", "--no-pretty", "--no-error-summary", *files]
    result = subprocess.run(cmd, cwd=tmp_dir, capture_output=True, text=True, check=False, env=_clean_env())
    return result, result.stdout.splitlines()


def test_python_blocks_typecheck_with_the_plugin(tmp_path: Path) -> None:
    result, lines = _mypy_output(tmp_path)
    by_file = {b.filename: b for b in CHECKED}
    errors: list[str] = []
    notes: dict[tuple[str, int], list[str]] = {}
    quoted: set[str] = set()
    for line in lines:
        m = _MYPY_LINE.match(line)
        if m is None:
            if line.strip():
                errors.append(f"unexpected mypy output: {line}")
            continue
        if m["file"] == QUOTED_CASE:
            quoted.add(line)
            continue
        block = by_file.get(m["file"])
        where = f"{block.label} (block line {m['line']})" if block else m["file"]
        if m["severity"] == "error":
            errors.append(f"{where}: {m['message']}")
        else:
            notes.setdefault((m["file"], int(m["line"])), []).append(m["message"])
    for block in CHECKED:
        for number, text in enumerate(block.code.splitlines(), start=1):
            want = _REVEALED.search(text)
            if want and want["note"] not in notes.get((block.filename, number), []):
                got = notes.get((block.filename, number), [])
                errors.append(f"{block.label} (block line {number}): expected {want['note']}, mypy said {got}")
    if result.returncode not in (0, 1) or result.stderr.strip():
        errors.append(f"mypy exit {result.returncode}: {result.stderr}")
    assert not errors, "\n".join(errors)

    # The README quotes the plugin's real output on typecheck_tests/cases/errors_rules.py.
    readme = [b for b in ALL_BLOCKS if b.doc.name == "README.md" and b.lang == "text"]
    shown = [line for b in readme for line in b.code.splitlines() if line.startswith(f"{QUOTED_CASE}:")]
    assert shown, f"README.md quotes no mypy output on {QUOTED_CASE}"
    stale = [line for line in shown if line not in quoted]
    assert not stale, (
        "README.md quotes mypy output that mypy no longer gives:\n"
        + "\n".join(stale)
        + ("\n\nmypy says:\n" + "\n".join(sorted(quoted)))
    )


def test_python_blocks_pass_pyright_strict(tmp_path: Path) -> None:
    """Readers copy these blocks into editors: pyright's strict mode finds nothing in them,
    in particular no Unknown from a step result (docs/plugin.md, "Without the plugin")."""
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    _write_blocks(blocks)
    data = pyright(*sorted(blocks.glob("*.py")), mode="strict", config_dir=tmp_path)
    errors = pyright_errors(data)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("block", CHECKED, ids=[b.label for b in CHECKED])
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    for other in CHECKED:
        if other.doc == block.doc and other.named is not None:
            (tmp_path / other.filename).write_text(other.code, encoding="utf-8")
    (tmp_path / block.filename).write_text(block.code, encoding="utf-8")
    if block.filename.startswith("test_"):
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", block.filename]
    else:
        cmd = [sys.executable, block.filename]
    result = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False, env=_clean_env()
    )
    assert result.returncode == 0, f"{block.label}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    printed = iter(result.stdout.splitlines())
    for shown in _shown_prints(block.code):
        # In order, other lines between; "..." in a shown line stands for any text.
        pattern = ".*".join(re.escape(part) for part in shown.split("..."))
        assert any(re.fullmatch(pattern, line) for line in printed), (
            f"{block.label} shows a print as {shown!r}, which it does not print (in this order):\n{result.stdout}"
        )


_PRINT = re.compile(r"^print\(.*\)(?:\s+#\s(?P<shown>.*))?$")


def _shown_prints(code: str) -> list[str]:
    """What a block's comments say its top-level ``print`` calls print: the comment at the
    end of the call's line, or the one on the next line."""
    lines = code.splitlines()
    shown: list[str] = []
    for line, after in zip(lines, [*lines[1:], ""], strict=True):
        m = _PRINT.match(line)
        if m and m["shown"]:
            shown.append(m["shown"])
        elif m and after.startswith("# "):
            shown.append(after.removeprefix("# "))
    return shown


def _sections(text: str) -> dict[str, str]:
    """``## `code` `` heading -> the text up to the next ``## `` heading."""
    out: dict[str, str] = {}
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    for part in parts[1:]:
        heading, _, body = part.partition("\n")
        m = re.fullmatch(r"`([^`]+)`\s*", heading)
        if m:
            out[m[1]] = body
    return out


def test_every_error_code_is_documented_with_an_example() -> None:
    sections = _sections((ROOT / "docs" / "errors.md").read_text(encoding="utf-8"))
    missing = [code for code in _rules.ERROR_CODES if code not in sections]
    without_example = [code for code in _rules.ERROR_CODES if code in sections and "```python" not in sections[code]]
    assert not missing and not without_example, (
        f"docs/errors.md lacks a '## `code`' section for {missing} and a ```python example for {without_example}"
    )


def test_every_failure_code_is_in_the_table_with_its_status() -> None:
    from kumiko_typed._results import HTTP_STATUS

    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d{3}) \|", text, flags=re.MULTILINE))
    assert rows == {code: str(status) for code, status in HTTP_STATUS.items()}


def test_readme_diagram_is_current() -> None:
    """docs/adjust-stock.svg (rendered by scripts/render_diagram.py with Graphviz) shows the
    nodes, clusters and edges that ``kumiko-typed graph --format dot`` gives today.  Compared
    without Graphviz: the SVG keeps every node's label and every edge's "a->b" as text."""
    from examples.inventory.handlers import adjust_stock
    from kumiko_typed._graph import dot

    assert "](docs/adjust-stock.svg)" in (ROOT / "README.md").read_text(encoding="utf-8")
    source = dot(adjust_stock.name, adjust_stock.pipeline.steps)
    labels = {m.replace('\\"', '"') for m in re.findall(r'\[label="((?:[^"\\]|\\.)*)"', source)}
    labels |= set(re.findall(r'label="([^"]+)";', source))  # cluster labels
    edges = set(re.findall(r'^\s*(\w+) -> (\w+)(?: \[label="\w+"\])?;$', source, flags=re.MULTILINE))
    assert {"true", "false"} <= labels  # the branch's edges are labelled
    clusters = set(re.findall(r"subgraph (cluster_\w+) \{", source))

    svg = html.unescape((ROOT / "docs" / "adjust-stock.svg").read_text(encoding="utf-8"))
    texts = set(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    titles = set(re.findall(r"<title>([^<]*)</title>", svg))
    svg_edges = {tuple(t.split("->")) for t in titles if "->" in t}
    stale = (labels != texts) or (edges != svg_edges) or not clusters <= titles
    assert not stale, (
        "docs/adjust-stock.svg is stale: run python scripts/render_diagram.py (needs Graphviz)\n"
        f"labels {sorted(labels ^ texts)}, edges {sorted(edges ^ svg_edges)}, clusters {sorted(clusters - titles)}"
    )


def test_every_step_kind_is_documented() -> None:
    text = (ROOT / "docs" / "steps.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^### `([^`]+)`", text, flags=re.MULTILINE))
    missing = [r.kind for r in _rules.STEP_RULES if r.kind not in headings]
    assert not missing, f"docs/steps.md has no '### `kind`' section for {missing}"
    for rule in _rules.STEP_RULES:
        assert f".{rule.method}(" in text, f"docs/steps.md never shows .{rule.method}(...)"


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_FENCED = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation but ``-``
    and ``_`` dropped, spaces as ``-``; a repeated heading's anchor gets ``-1``, ``-2``..."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", _FENCED.sub("", markdown), flags=re.MULTILINE):
        base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = base, 0
        while anchor in anchors:
            n += 1
            anchor = f"{base}-{n}"
        anchors.add(anchor)
    return anchors


def test_relative_links_lead_somewhere() -> None:
    """A link from the README or a doc to another file of the repository, or to a heading,
    names one that exists: a renamed section or moved file breaks the reader's path."""
    broken = []
    for doc in DOCS:
        for match in _LINK.finditer(_FENCED.sub("", doc.read_text(encoding="utf-8"))):
            target = match["target"]
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
