"""Pipeline graphs: the steps of a handler or workflow as text, Mermaid or Graphviz dot.

Branch arms and loop bodies are drawn as nested groups, so the shape of a pipeline
can be read at a glance (and rendered in docs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

from ._steps import Branch, ForEach, Retry, Step

Format = Literal["text", "mermaid", "dot"]


def _label(step: Step) -> str:
    name = step.step_name
    if isinstance(step, ForEach):
        return f'for_each "{name}"'
    return f'{step.kind} "{name}"' if name is not None else step.kind


def _groups(step: Step) -> list[tuple[str, tuple[Step, ...]]]:
    if isinstance(step, Branch):
        return [("on_true", step.on_true.steps), ("on_false", step.on_false.steps)]
    if isinstance(step, (ForEach, Retry)):
        return [("do", step.body.steps)]
    return []


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


def _ids() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"s{n}"


def mermaid(title: str, steps: Sequence[Step]) -> str:
    out = ["flowchart TD", f'  start(["{title}"])']
    ids = _ids()

    def walk(seq: Sequence[Step], prev: str, indent: str) -> str:
        for step in seq:
            node = next(ids)
            label_text = _label(step).replace('"', "#quot;")  # Mermaid's escape inside ["..."]
            out.append(f'{indent}{node}["{label_text}"]')
            out.append(f"{indent}{prev} --> {node}")
            for label, inner in _groups(step):
                if not inner:
                    continue
                group = next(ids)
                out.append(f'{indent}subgraph {group}["{label}"]')
                walk(inner, node, indent + "  ")
                out.append(f"{indent}end")
            prev = node
        return prev

    walk(steps, "start", "  ")
    return "\n".join(out)


def dot(title: str, steps: Sequence[Step]) -> str:
    out = ["digraph pipeline {", "  rankdir=TB;", "  node [shape=box];", f'  start [label="{title}", shape=oval];']
    ids = _ids()

    def esc(text: str) -> str:
        return text.replace('"', '\\"')

    def walk(seq: Sequence[Step], prev: str, indent: str) -> str:
        for step in seq:
            node = next(ids)
            out.append(f'{indent}{node} [label="{esc(_label(step))}"];')
            out.append(f"{indent}{prev} -> {node};")
            for label, inner in _groups(step):
                if not inner:
                    continue
                group = next(ids)
                out.append(f"{indent}subgraph cluster_{group} {{")
                out.append(f'{indent}  label="{label}";')
                walk(inner, node, indent + "  ")
                out.append(f"{indent}}}")
            prev = node
        return prev

    walk(steps, "start", "  ")
    out.append("}")
    return "\n".join(out)


def render(title: str, steps: Sequence[Step], fmt: Format) -> str:
    return {"text": text, "mermaid": mermaid, "dot": dot}[fmt](title, steps)
