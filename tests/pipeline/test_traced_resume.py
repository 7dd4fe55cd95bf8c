"""The spans of a workflow run resumed inside a step (a ``retry`` between attempts, a
``wait_for_event`` in a branch arm or a loop body): the resumed step has its span, and
every step below it its whole path, as in a run that never suspended — both databases.

Before, a resumed run re-entered its stored step outside the per-step tracing: the
retry had no span in the resuming segment, and the steps of its next attempt lost the
retry's own position (``do/#2/0``, not ``0/do/#2/0``); a step after a resumed wait in a
branch arm was ``on_true/1``, not ``0/on_true/1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import kumiko_typed._observe as observe
from kumiko_typed import App, Feature, User, manual
from kumiko_typed.testing import FakeClock

T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
#: When the first attempt's back-off (10 s) is over.
LATER = timedelta(minutes=1)


@attrs.frozen
class Go:
    items: tuple[int, ...] = (1, 2)


@attrs.frozen
class Seen:
    n: int


def flaky(c: Any) -> int:
    """Fails while the clock is at T0 (the run's first attempt): a transient error the
    next attempt, after the back-off, no longer meets."""
    return 1 // (c.now > T0)


f = Feature("tr")
f.event(Seen, name="tr-seen")

#: (name, pipeline): each shape suspends in its first segment, the retries by ``flaky``.
SHAPES: dict[str, Any] = {
    "retry": f.workflow_pipeline(Go)
    .compute("a", lambda c: 1)
    .retry(times=3, do=lambda b: b.compute("r", flaky).compute("s", lambda c: 2))
    .compute("z", lambda c: 3),
    "retry-in-for_each": f.workflow_pipeline(Go)
    .for_each("item", over=lambda c: c.payload.items, do=lambda d: d.retry(times=3, do=lambda b: b.compute("r", flaky)))
    .compute("z", lambda c: 3),
    "retry-in-branch": f.workflow_pipeline(Go)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.retry(times=3, do=lambda r: r.compute("r", flaky)).compute("t", lambda c: 2),
    )
    .compute("z", lambda c: 3),
    "retry-in-for_each-in-branch": f.workflow_pipeline(Go).branch(
        when=lambda c: True,
        on_true=lambda b: b.for_each(
            "item", over=lambda c: c.payload.items, do=lambda d: d.retry(times=3, do=lambda r: r.compute("r", flaky))
        ),
    ),
    "wait_for_event-in-branch": f.workflow_pipeline(Go)
    .branch(
        when=lambda c: True,
        on_true=lambda b: b.wait_for_event(
            "got", Seen, key=lambda c: 1, event_key=lambda e: e.n, timeout=timedelta(seconds=30)
        ).compute("t", lambda c: 2),
    )
    .compute("z", lambda c: 3),
    "wait_for_event-in-for_each": f.workflow_pipeline(Go).for_each(
        "item",
        over=lambda c: c.payload.items,
        do=lambda d: d.wait_for_event(
            "got", Seen, key=lambda c: c.scope["item"], event_key=lambda e: e.n, timeout=timedelta(seconds=30)
        ).compute("t", lambda c: 2),
    ),
}
FLOWS = {name: f.workflow(name, trigger=manual(Go), pipeline=pipeline) for name, pipeline in SHAPES.items()}

#: Per shape: the step spans of each segment of a run started at T0, in the order they
#: end, as "path span-name", and " !" for one whose status is an error.  A retry's first
#: attempt fails; a wait times out.
SUSPENDED: dict[str, list[list[str]]] = {
    "retry": [
        ['0 compute "a"', '1/do/#1/0 compute "r" !', "1 workflow.retry"],
        ['1/do/#2/0 compute "r"', '1/do/#2/1 compute "s"', "1 workflow.retry", '2 compute "z"'],
    ],
    "retry-in-for_each": [
        ['0/do/#0/0/do/#1/0 compute "r" !', "0/do/#0/0 workflow.retry", '0 for_each "item"'],
        [
            '0/do/#0/0/do/#2/0 compute "r"',
            "0/do/#0/0 workflow.retry",
            '0/do/#1/0/do/#1/0 compute "r"',
            "0/do/#1/0 workflow.retry",
            '0 for_each "item"',
            '1 compute "z"',
        ],
    ],
    "retry-in-branch": [
        ['0/on_true/0/do/#1/0 compute "r" !', "0/on_true/0 workflow.retry", "0 branch"],
        [
            '0/on_true/0/do/#2/0 compute "r"',
            "0/on_true/0 workflow.retry",
            '0/on_true/1 compute "t"',
            "0 branch",
            '1 compute "z"',
        ],
    ],
    "retry-in-for_each-in-branch": [
        [
            '0/on_true/0/do/#0/0/do/#1/0 compute "r" !',
            "0/on_true/0/do/#0/0 workflow.retry",
            '0/on_true/0 for_each "item"',
            "0 branch",
        ],
        [
            '0/on_true/0/do/#0/0/do/#2/0 compute "r"',
            "0/on_true/0/do/#0/0 workflow.retry",
            '0/on_true/0/do/#1/0/do/#1/0 compute "r"',
            "0/on_true/0/do/#1/0 workflow.retry",
            '0/on_true/0 for_each "item"',
            "0 branch",
        ],
    ],
    "wait_for_event-in-branch": [
        ['0/on_true/0 workflow.wait_for_event "got"', "0 branch"],
        ['0/on_true/0 workflow.wait_for_event "got"', '0/on_true/1 compute "t"', "0 branch", '1 compute "z"'],
    ],
    "wait_for_event-in-for_each": [
        ['0/do/#0/0 workflow.wait_for_event "got"', '0 for_each "item"'],
        [
            '0/do/#0/0 workflow.wait_for_event "got"',
            '0/do/#0/1 compute "t"',
            '0/do/#1/0 workflow.wait_for_event "got"',
            '0 for_each "item"',
        ],
        ['0/do/#1/0 workflow.wait_for_event "got"', '0/do/#1/1 compute "t"', '0 for_each "item"'],
    ],
}


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A real SDK provider whose spans land in memory; the runtime's tracer comes from it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(observe, "_tracer", lambda: provider.get_tracer("kumiko_typed"))
    yield exporter
    provider.shutdown()


def _segments(exporter: InMemorySpanExporter) -> list[list[str]]:
    """The step spans of each segment span, in the order they ended; each step span is a
    descendant of its segment's (the tree is whole)."""
    found = exporter.get_finished_spans()
    parents = {s.context.span_id: s.parent.span_id if s.parent else None for s in found}  # type: ignore[union-attr]

    def segment_of(span_id: int) -> int | None:
        while span_id is not None and span_id not in segments:
            span_id = parents.get(span_id)  # type: ignore[assignment]
        return span_id

    segments = {s.context.span_id: [] for s in found if s.name == "kumiko.workflow.segment"}  # type: ignore[union-attr]
    for s in found:
        attributes = dict(s.attributes or {})
        if "kumiko.step.path" in attributes:
            owner = segment_of(s.context.span_id)  # type: ignore[union-attr]
            assert owner is not None, s.name
            failed = " !" if s.status.status_code == StatusCode.ERROR else ""
            segments[owner].append(f"{attributes['kumiko.step.path']} {s.name}{failed}")
    return list(segments.values())


def _wait_out(app: App, clock: FakeClock, run_id: Any) -> None:
    """Resume the run segment by segment, each when it is due, until it completes."""
    for _ in range(5):
        info = app.get_run(run_id)
        assert info is not None
        if info.status != "suspended":
            break
        clock.advance(LATER)
        app.run_worker(once=True)
    info = app.get_run(run_id)
    assert info is not None and info.status == "completed", info


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_resumed_run_has_the_spans_and_paths_of_one_that_never_suspended(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter, shape: str
) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(FLOWS[shape], Go(), user=user)
    _wait_out(app, clock, run_id)
    suspended = _segments(spans)
    assert suspended == SUSPENDED[shape]
    # A run that never suspends (a retry's first attempt succeeds): the same spans, the
    # same paths, but for the failed attempts and the resumed steps' second spans.
    if shape.startswith("retry"):
        spans.clear()
        clock.advance(LATER)
        again = app.start_workflow(FLOWS[shape], Go(), user=user)
        _wait_out(app, clock, again)
        (whole,) = _segments(spans)
        first, resumed = suspended
        failed = [span.split(" ")[0] for span in first if span.endswith(" !")]
        # The first segment's steps that completed: not the failed attempt, nor the steps
        # around it, which its suspension ended (their spans end again when resumed).
        done = [
            s for s in first if not s.endswith(" !") and not any(p.startswith(s.split(" ")[0] + "/") for p in failed)
        ]
        assert done + [s.replace("/#2/", "/#1/") for s in resumed] == whole
