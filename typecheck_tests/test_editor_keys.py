"""Key completion in an editor on pyright, without the plugin (DESIGN §4.8): a real LSP
exchange with ``pyright-langserver --stdio`` (initialize, didOpen, completion).

After ``c.steps["`` in a step, the server offers exactly the names of the steps before it,
those of a branch arm or loop body included after it; after ``c.scope["`` in a loop body,
the loop's item name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from ._lsp import LanguageServer, editing

#: Each ``# offers: a, b`` line asks for completion right after its last ``c.steps["`` (or
#: ``c.scope["``) and expects exactly those names.
SOURCE = """\
from datetime import timedelta

import attrs

from kumiko_typed import Feature, fail, ok


@attrs.frozen
class Order:
    qty: int
    lines: list[int]


shop = Feature("shop")
handler = shop.write_handler(
    "h",
    shop.pipeline(Order)
    .compute("count", lambda c: c.payload.qty)
    .compute("double", lambda c: c.steps["count"] * 2)  # offers: count
    .compute("label", lambda c: str(c.steps["double"]))  # offers: count, double
    .branch(
        when=lambda c: c.steps["count"] > 1,  # offers: count, double, label
        on_true=lambda b: b.compute("big", lambda c: True)
        .compute("big2", lambda c: c.steps["big"]),  # offers: count, double, label, big
    )
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("q", lambda c: c.steps["count"] * c.scope["line"])  # offers: line
        .compute("q2", lambda c: c.steps["q"]),  # offers: count, double, label, big, big2, q
    )
    .return_(lambda c: ok(c.steps["label"])),  # offers: count, double, label, big, big2, q, q2
)
flow = (
    shop.workflow_pipeline(Order)
    .wait_for_event("seen", Order, key=lambda c: c.payload.qty, event_key=lambda e: e.qty, timeout=timedelta(days=1))
    .retry(times=2, do=lambda b: b.compute("tried", lambda c: c.steps["seen"]))  # offers: seen
    .compute("after", lambda c: c.steps["tried"])  # offers: seen, tried
)
# A retry body holding a branch whose arm only guards (no key): its keys are offered after it.
saga = (
    shop.workflow_pipeline(Order)
    .retry(
        times=2,
        do=lambda b: b.compute("held", lambda c: c.payload.qty > 0).branch(
            when=lambda c: c.steps["held"],
            on_true=lambda b: b.guard(lambda c: True, otherwise=lambda c: fail("unprocessable", "no")),
        ),
    )
    .compute("after", lambda c: c.steps["held"])  # offers: held
)
"""

_OFFERS = re.compile(r"#\s*offers: (?P<keys>.*)$")
_READ = re.compile(r'c\.(?:steps|scope)\["')


def _asks() -> list[tuple[int, int, set[str]]]:
    out = []
    for number, text in enumerate(SOURCE.splitlines()):
        m = _OFFERS.search(text)
        if m is not None:
            column = [r.end() for r in _READ.finditer(text[: m.start()])][-1]
            out.append((number, column, {k.strip() for k in m["keys"].split(",")}))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LanguageServer, str]]:
    with editing(tmp_path_factory.mktemp("editor-keys"), SOURCE) as (lsp, uri, diagnostics):
        assert not [d for d in diagnostics if d.get("severity") == 1], diagnostics  # the source is correct
        yield lsp, uri


def test_every_ask_is_found() -> None:
    assert len(_asks()) == 10


@pytest.mark.parametrize("ask", _asks(), ids=lambda a: f"line{a[0] + 1}")
def test_completion_offers_the_keys_before(server: tuple[LanguageServer, str], ask: tuple[int, int, set[str]]) -> None:
    lsp, uri = server
    line, column, keys = ask
    offered = {i["label"].strip('"') for i in lsp.complete(uri, line, column) if i["label"].startswith('"')}
    assert offered == keys, f"line {line + 1}: offered {sorted(offered)}"
