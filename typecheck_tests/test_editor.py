"""What an editor on pyright shows for a step a builder refuses (DESIGN §4.5): a real LSP
exchange with ``pyright-langserver --stdio`` (initialize, didOpen, completion and its
resolve, hover, the published diagnostics).

pyright reads the ``@deprecated`` stub: a call is struck through (a diagnostic tagged
Deprecated, with the rule's message), and completion and hover lead with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from kumiko_typed import _rules

from ._lsp import LanguageServer, editing

#: Each ``# complete: B`` line offers builder B's methods right after the last ``b.``
#: (or ``handler.``/``workflow.``); each ``# deprecated: B.m`` line calls refused step m.
SOURCE = """\
from datetime import timedelta

import attrs

from kumiko_typed import Feature, ok


@attrs.frozen
class Order:
    qty: int


shop = Feature("shop")
handler = shop.pipeline(Order)
workflow = shop.workflow_pipeline(Order)

handler.compute("x", lambda c: 1)  # complete: Pipeline
workflow.compute("x", lambda c: 1)  # complete: WorkflowPipeline
handler.branch(when=lambda c: True, on_true=lambda b: b.compute("x", lambda c: 1))  # complete: SubPipeline
workflow.branch(when=lambda c: True, on_true=lambda b: b.compute("x", lambda c: 1))  # complete: WorkflowSubPipeline
workflow.retry(times=3, do=lambda b: b.compute("x", lambda c: 1))  # complete: SubPipeline


def wait() -> None:
    handler.wait(timedelta(days=1))  # deprecated: Pipeline.wait


def wait_for_event() -> None:
    handler.wait_for_event(  # deprecated: Pipeline.wait_for_event
        "seen", Order, key=lambda c: c.payload.qty, event_key=lambda e: e.qty, timeout=timedelta(days=1)
    )


def retry() -> None:
    handler.retry(times=3, do=lambda b: b.compute("x", lambda c: 1))  # deprecated: Pipeline.retry


def return_in_arm() -> None:
    handler.branch(when=lambda c: True, on_true=lambda b: b.return_(lambda c: ok(1)))  # deprecated: SubPipeline.return_


def return_in_workflow_arm() -> None:
    workflow.branch(
        when=lambda c: True, on_true=lambda b: b.return_(lambda c: ok(1))  # deprecated: WorkflowSubPipeline.return_
    )


def in_retry_body() -> None:
    workflow.retry(times=3, do=lambda b: b.return_(lambda c: ok(1)))  # deprecated: SubPipeline.return_
    workflow.retry(times=3, do=lambda b: b.wait(timedelta(hours=1)))  # deprecated: SubPipeline.wait
"""

_MARK = re.compile(r"#\s*(?P<what>complete|deprecated): (?P<builder>\w+)(?:\.(?P<method>\w+))?$")
#: The steps issue 10 names; completion is checked for each on every builder.
WATCHED = ("wait", "wait_for_event", "retry", "return_", "compute")
KIND = {r.method: r.kind for r in _rules.STEP_RULES}
#: The running server, the file's URI and the diagnostics pyright published for it.
Editor = tuple[LanguageServer, str, list[Any]]


def _reason(builder: str, method: str) -> str:
    if method == "return_":
        return _rules.msg_return_in_subpipeline(builder)
    return _rules.msg_workflow_only(KIND[method], method, builder)


def _marks(what: str) -> list[tuple[int, int, str, str]]:
    """(line, column, builder, method) of each mark; the column is where completion or
    hover happens: just after the receiver's dot, on the method name."""
    out = []
    for number, text in enumerate(SOURCE.splitlines()):
        m = _MARK.search(text)
        if m is None or m["what"] != what:
            continue
        code = text[: m.start()]
        if what == "complete":
            column = max(code.rfind(r) + len(r) for r in ("b.", "handler.", "workflow."))
        else:
            column = code.rindex(f".{m['method']}(") + 1
        out.append((number, column, m["builder"], m["method"] or ""))
    return out


def _documentation(item: dict[str, Any]) -> str:
    doc = item.get("documentation", "")
    text = doc["value"] if isinstance(doc, dict) else doc
    assert isinstance(text, str)
    return text.partition("\n---\n")[2]  # after pyright's signature block


@pytest.fixture(scope="module")
def editor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Editor]:
    with editing(tmp_path_factory.mktemp("editor"), SOURCE) as opened:
        yield opened


def test_marks_cover_the_named_steps() -> None:
    deprecated = {(b, m) for _, _, b, m in _marks("deprecated")}
    assert {("Pipeline", "wait"), ("Pipeline", "wait_for_event"), ("Pipeline", "retry")} <= deprecated
    assert {("SubPipeline", "return_"), ("WorkflowSubPipeline", "return_")} <= deprecated
    assert len(_marks("complete")) == 5


def test_a_refused_call_is_struck_through_with_the_reason(editor: Editor) -> None:
    _server, _uri, diagnostics = editor
    starts = ((d["range"]["start"], d) for d in diagnostics if 2 in d.get("tags", []))  # 2: Deprecated
    struck = {(start["line"], start["character"]): d for start, d in starts}
    for line, column, builder, method in _marks("deprecated"):
        found = struck.pop((line, column), None)
        assert found is not None, f"line {line + 1}: {builder}.{method} is not shown deprecated; got {diagnostics}"
        title, _, reason = found["message"].partition("\n")
        assert title == f'The method "{method}" in class "{builder}" is deprecated'
        assert reason.strip("\xa0 ") == _reason(builder, method)
    assert not struck, f"deprecated where no mark says so: {list(struck.values())}"


def test_completion_leads_with_the_reason(editor: Editor) -> None:
    server, uri, _ = editor
    for line, column, builder, _method in _marks("complete"):
        items = {i["label"]: i for i in server.complete(uri, line, column)}
        assert set(WATCHED) <= set(items), f"{builder}: offered {sorted(items)}"
        for method in WATCHED:
            doc = _documentation(server.request("completionItem/resolve", items[method]))
            if _rules.allows(builder, KIND[method]):
                assert "Deprecated" not in doc, f"{builder}.{method}: {doc}"
            else:
                first = " ".join(doc.split("\n\n")[0].split()).replace("\\_", "_")
                assert first == f"Deprecated here: {_reason(builder, method)}.", f"{builder}.{method}: {doc}"


def test_hover_on_a_refused_call_gives_the_reason(editor: Editor) -> None:
    server, uri, _ = editor
    for line, column, builder, method in _marks("deprecated"):
        hover = server.request(
            "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": line, "character": column}}
        )
        text = hover["contents"]["value"]
        assert text.startswith(f"```python\n(method) def {method}("), text
        assert ") -> Never\n```" in text, text
        first = " ".join(_documentation({"documentation": hover["contents"]}).split("\n\n")[0].split())
        first = first.replace("\\_", "_")
        assert first == f"Deprecated here: {_reason(builder, method)}.", text
