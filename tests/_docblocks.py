"""Fenced blocks of the Markdown documentation, with the HTML comment marker before each
(``<!-- fragment -->``, ``<!-- file: NAME.py -->``): what tests/tooling/test_docs.py checks and what
tests/tooling/test_wheel.py runs from a built wheel."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<text>.*?)\s*-->\s*$")
_FILE = re.compile(r"^file:\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*\.py)$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # the HTML comment on the line before the fence, if any

    @property
    def label(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def fragment(self) -> bool:
        return self.marker == "fragment"

    @property
    def named(self) -> str | None:
        m = _FILE.match(self.marker or "")
        return m["name"] if m else None

    @property
    def filename(self) -> str:
        stem = re.sub(r"\W", "_", self.doc.stem.lower())
        return self.named or f"doc_{stem}_{self.line}.py"


def parse(doc: Path) -> list[Block]:
    """Every fenced block of ``doc`` (fences inside other fences are content)."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, start = m["fence"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(m["indent"]) :] if lines[i].startswith(m["indent"]) else lines[i])
            i += 1
        previous = lines[start - 1] if start > 0 else ""
        marker = _MARKER.match(previous)
        blocks.append(
            Block(doc, start + 1, m["lang"].lower(), "\n".join(body) + "\n", marker["text"] if marker else None)
        )
        i += 1
    return blocks
