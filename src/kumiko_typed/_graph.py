"""Pipeline graphs: the steps of a handler or workflow as text, Mermaid or Graphviz dot.

Branch arms and loop bodies are drawn as nested groups, so the shape of a pipeline
can be read at a glance (and rendered in docs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ._steps import Branch, ForEach, Step

__all__ = ["Format", "dot", "mermaid", "render", "text"]

Format = Literal["text", "mermaid", "dot"]


def _label(step: Step) -> str:
    name = step.step_name
    if isinstance(step, ForEach):
        return f'for_each "{name}"'
    return f'{step.kind} "{name}"' if name is not None else step.kind


def _groups(step: Step) -> list[tuple[str, tuple[Step, ...]]]:
    return [(label, block.steps) for label, block in step.children()]


def text(title: str, steps: Sequence[Step]) -> str:
    lines = [title]

    def walk(seq: Sequence[Step], indent: str) -> None:
        for i, step in enumerate(seq):
            lines.append(f"{indent}{i}. {_label(step)}")
            for label, inner in _groups(step):
                if inner:
                    lines.append(f"{indent}   {label}:")
                    walk(inner, indent + "      ")

    walk(steps, "  ")
    return "\n".join(lines)


_EDGE_LABELS = {"on_true": "true", "on_false": "false"}


class _Layout:
    """Nodes in nested groups, and the edges between them, for the drawing formats.

    Edges are kept apart from the groups: a node that an edge written inside a group
    mentions becomes part of that group (in Mermaid and Graphviz alike), which drew a
    branch or loop node inside its own arm.  The step after a branch is joined from the
    last step of each arm (or from the branch itself for an empty arm), so it does not
    look like a third alternative.  An edge leaving a branch into an arm (or past an empty
    one) is labelled ``true`` or ``false``.
    """

    def __init__(self, steps: Sequence[Step]) -> None:
        #: ("node", depth, id, label) | ("open", depth, id, label) | ("close", depth, "", "")
        self.items: list[tuple[str, int, str, str]] = []
        self.edges: list[tuple[str, str, str]] = []  # (from, to, label)
        self._n = 0
        self._walk(steps, [("start", "")], 1)

    def _id(self) -> str:
        self._n += 1
        return f"s{self._n}"

    def _walk(self, seq: Sequence[Step], tails: list[tuple[str, str]], depth: int) -> list[tuple[str, str]]:
        """``tails``: the nodes the next step is joined from, each with its edge's label."""
        for step in seq:
            node = self._id()
            self.items.append(("node", depth, node, _label(step)))
            self.edges.extend((tail, node, edge) for tail, edge in tails)
            tails = [(node, "")]
            arm_tails: list[tuple[str, str]] = []
            for label, inner in _groups(step):
                edge = _EDGE_LABELS.get(label, "")
                if not inner:
                    arm_tails.append((node, edge))
                    continue
                self.items.append(("open", depth, self._id(), label))
                arm_tails += self._walk(inner, [(node, edge)], depth + 1)
                self.items.append(("close", depth, "", ""))
            if isinstance(step, Branch):
                tails = list(dict.fromkeys(arm_tails))
        return tails


def _mermaid_text(text: str) -> str:
    """``text`` for inside Mermaid's ``["..."]``, where ``"`` ends it and ``#...;`` is an
    entity code: ``#`` is written as its own code first, then ``"`` as ``#quot;``."""
    return text.replace("#", "#35;").replace('"', "#quot;")


def mermaid(title: str, steps: Sequence[Step]) -> str:
    layout = _Layout(steps)
    out = ["flowchart TD", f'  start(["{_mermaid_text(title)}"])']
    for kind, depth, node, label in layout.items:
        indent = "  " * depth
        if kind == "node":
            out.append(f'{indent}{node}["{_mermaid_text(label)}"]')
        elif kind == "open":
            out.append(f'{indent}subgraph {node}["{label}"]')
        else:
            out.append(f"{indent}end")
    out += [f"  {a} -->|{label}| {b}" if label else f"  {a} --> {b}" for a, b, label in layout.edges]
    return "\n".join(out)


def dot(title: str, steps: Sequence[Step]) -> str:
    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace('"', '\\"')

    layout = _Layout(steps)
    out = ["digraph pipeline {", "  rankdir=TB;", "  node [shape=box];", f'  start [label="{esc(title)}", shape=oval];']
    for kind, depth, node, label in layout.items:
        indent = "  " * depth
        if kind == "node":
            out.append(f'{indent}{node} [label="{esc(label)}"];')
        elif kind == "open":
            out.append(f"{indent}subgraph cluster_{node} {{")
            out.append(f'{indent}  label="{label}";')
        else:
            out.append(f"{indent}}}")
    out += [f'  {a} -> {b} [label="{label}"];' if label else f"  {a} -> {b};" for a, b, label in layout.edges]
    out.append("}")
    return "\n".join(out)


def render(title: str, steps: Sequence[Step], fmt: Format) -> str:
    return {"text": text, "mermaid": mermaid, "dot": dot}[fmt](title, steps)
