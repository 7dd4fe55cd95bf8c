"""Step instances: the immutable program a builder accumulates.

A finished pipeline is a tuple of these, built once at import.  ``execute`` runs
one step against a :class:`~kumiko_typed._interpreter.Run`; it returns ``None`` to
go on, or an ``Ok``/``Failure`` that ends the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

import attrs

from . import _data, _outbox
from ._results import Failure, Ok
from ._rules import BUILDERS, RETRY_BODY_BUILDER

if TYPE_CHECKING:
    from ._feature import WriteHandler
    from ._interpreter import Run

Fn = Callable[[Any], Any]
Result = Ok[object] | Failure | None


class StepCrash(Exception):
    """An exception escaped a step; ``path`` grows as it unwinds through sub-pipelines."""

    def __init__(self, path: list[str], step: Step, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.path = path
        self.step = step
        self.cause = cause

    def where(self) -> str:
        return f"{'/'.join(self.path)} {self.step.describe()}"


#: ``(index, name, fn)`` of one ``compute`` step.
Fused: TypeAlias = tuple[int, str, Fn]
#: Runs a fused group: ``runner(values, ctx)``.
Runner: TypeAlias = Callable[[dict[str, object], Any], None]


class Segment:
    """A run of consecutive ``compute`` steps (fused into one generated function), then
    the step after them (``None`` when the group ends the block)."""

    __slots__ = ("fused", "runner", "step", "step_index")

    def __init__(self, fused: tuple[Fused, ...], step_index: int, step: Step | None) -> None:
        self.fused = fused
        self.runner = _fuse(fused) if fused else None
        self.step_index = step_index
        self.step = step

    def failed_index(self, exc: BaseException) -> int:
        """The index of the step that raised ``exc`` while this segment ran."""
        if self.runner is not None:
            code = self.runner.__code__
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code is code:
                    return self.fused[tb.tb_lineno - 2][0]  # line 1 is the def
                tb = tb.tb_next
        return self.step_index


def _fuse(fused: tuple[Fused, ...]) -> Runner:
    """Generate ``values[k0] = f0(ctx); values[k1] = f1(ctx); ...`` as one function.

    As attrs generates ``__init__``: a fused ``compute`` then costs what the same
    line written by hand costs, with no loop or unpacking per step.  A crash is
    mapped back to its step through the line number (see ``failed_index``).
    """
    namespace: dict[str, Any] = {}
    lines = ["def run(values, ctx):"]
    for j, (_index, name, fn) in enumerate(fused):
        namespace[f"f{j}"] = fn
        namespace[f"k{j}"] = name
        lines.append(f"    values[k{j}] = f{j}(ctx)")
    exec(compile("\n".join(lines), f"<kumiko-typed: {len(fused)} fused compute steps>", "exec"), namespace)
    runner: Runner = namespace["run"]
    return runner


class Block:
    """An immutable step sequence, compiled once when it is built.

    Each run of consecutive ``compute`` steps (the hot path) is fused into one
    generated function, so such a step costs one call of its resolver, without a
    dispatch through ``execute``.
    """

    __slots__ = ("segments", "steps")

    def __init__(self, steps: tuple[Step, ...]) -> None:
        self.steps = steps
        segments: list[Segment] = []
        fused: list[Fused] = []
        for i, step in enumerate(steps):
            if type(step) is Compute:  # exactly Compute: a subclass may override execute
                fused.append((i, step.name, step.fn))
            else:
                segments.append(Segment(tuple(fused), i, step))
                fused = []
        if fused:
            segments.append(Segment(tuple(fused), len(steps), None))
        self.segments: tuple[Segment, ...] = tuple(segments)

    def __repr__(self) -> str:
        return f"Block({list(self.steps)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Block) and other.steps == self.steps

    def __hash__(self) -> int:
        return hash(self.steps)


EMPTY = Block(())


def run_block(block: Block, run: Run) -> Result:
    """Run ``block`` in order; stop at the first step that ends the pipeline.

    A crash names the exact step that raised (its index in this block).
    """
    values = run.values
    ctx = run.ctx
    segment: Segment | None = None
    try:
        for segment in block.segments:
            runner = segment.runner
            if runner is not None:
                runner(values, ctx)
            step = segment.step
            if step is None:
                break
            result = step.execute(run)
            if result is not None:
                return result
    except StepCrash as crash:
        assert segment is not None
        crash.path.insert(0, str(segment.step_index))
        raise
    except Exception as exc:
        assert segment is not None
        i = segment.failed_index(exc)
        raise StepCrash([str(i)], block.steps[i], exc) from exc
    return None


def _prefix(crash: StepCrash, *parts: str) -> StepCrash:
    crash.path[0:0] = parts
    return crash


@attrs.frozen(slots=True)
class Step:
    kind: ClassVar[str]

    @property
    def step_name(self) -> str | None:
        return None

    def describe(self) -> str:
        name = self.step_name
        return f'{self.kind} "{name}"' if name is not None else self.kind

    def children(self) -> Iterable[tuple[str, tuple[Step, ...]]]:
        """Sub-pipelines as (path label, steps)."""
        return ()

    def execute(self, run: Run) -> Result:
        raise NotImplementedError(f"{type(self).__name__} does not define execute()")


@attrs.frozen(slots=True)
class NamedStep(Step):
    name: str

    @property
    def step_name(self) -> str | None:
        return self.name


@attrs.frozen(slots=True)
class Compute(NamedStep):
    kind = "compute"
    fn: Fn

    def execute(self, run: Run) -> Result:
        run.values[self.name] = self.fn(run.ctx)
        return None


@attrs.frozen(slots=True)
class FindOne(NamedStep):
    kind = "read.find_one"
    query: Fn

    def execute(self, run: Run) -> Result:
        _data.find_one(self, run)
        return None


@attrs.frozen(slots=True)
class GetOne(NamedStep):
    kind = "read.get_one"
    query: Fn

    def execute(self, run: Run) -> Result:
        return _data.get_one(self, run)


@attrs.frozen(slots=True)
class FindMany(NamedStep):
    kind = "read.find_many"
    query: Fn
    limit: int | None

    def execute(self, run: Run) -> Result:
        _data.find_many(self, run)
        return None


@attrs.frozen(slots=True)
class Create(NamedStep):
    kind = "aggregate.create"
    entity: type[Any]
    data: Fn

    def execute(self, run: Run) -> Result:
        return _data.create(self, run)


@attrs.frozen(slots=True)
class Update(NamedStep):
    kind = "aggregate.update"
    entity: type[Any]
    id: object
    changes: Fn
    version: object
    skip_optimistic_lock: bool

    def execute(self, run: Run) -> Result:
        return _data.update(self, run)


@attrs.frozen(slots=True)
class AppendEvent(Step):
    kind = "aggregate.append_event"
    entity: type[Any]
    id: object
    event: Fn
    headers: object = None

    def execute(self, run: Run) -> Result:
        return _data.append_event(self, run)


@attrs.frozen(slots=True)
class ProjectionUpsert(Step):
    kind = "unsafe_projection_upsert"
    table: object
    on: tuple[str, ...]
    row: Fn

    def execute(self, run: Run) -> Result:
        _data.projection_upsert(self, run)
        return None


@attrs.frozen(slots=True)
class ProjectionDelete(Step):
    kind = "unsafe_projection_delete"
    table: object
    where: Fn

    def execute(self, run: Run) -> Result:
        _data.projection_delete(self, run)
        return None


@attrs.frozen(slots=True)
class Branch(Step):
    kind = "branch"
    when: Fn
    on_true: Block
    on_false: Block

    def children(self) -> Iterable[tuple[str, tuple[Step, ...]]]:
        return (("on_true", self.on_true.steps), ("on_false", self.on_false.steps))

    def execute(self, run: Run) -> Result:
        arm, block = ("on_true", self.on_true) if self.when(run.ctx) else ("on_false", self.on_false)
        try:
            return run_block(block, run)
        except StepCrash as crash:
            raise _prefix(crash, arm) from crash.cause


@attrs.frozen(slots=True)
class ForEach(Step):
    kind = "for_each"
    item: str
    over: Fn
    body: Block

    @property
    def step_name(self) -> str | None:
        return self.item

    def children(self) -> Iterable[tuple[str, tuple[Step, ...]]]:
        return (("do", self.body.steps),)

    def execute(self, run: Run) -> Result:
        items = list(self.over(run.ctx))
        scope = run.scope
        missing = object()
        shadowed = scope.get(self.item, missing)
        try:
            for n, item in enumerate(items):
                scope[self.item] = item
                try:
                    result = run_block(self.body, run)
                except StepCrash as crash:
                    raise _prefix(crash, "do", f"#{n}") from crash.cause
                if result is not None:
                    return result
        finally:
            if shadowed is missing:
                scope.pop(self.item, None)
            else:
                scope[self.item] = shadowed
        return None


@attrs.frozen(slots=True)
class Guard(Step):
    """A business refusal without a step key: ``otherwise``'s Failure is returned like
    ``return_``'s, so it unwinds every enclosing branch arm and loop body and ends the
    handler (rolled back) or the workflow run."""

    kind = "guard"
    when: Fn
    otherwise: Fn

    def execute(self, run: Run) -> Result:
        ctx = run.ctx
        if self.when(ctx):
            return None
        failure = self.otherwise(ctx)
        if not isinstance(failure, Failure):
            raise _data.StepRefused(f"guard's otherwise= must give fail(...), not {type(failure).__name__}")
        run.refused = failure
        return failure


@attrs.frozen(slots=True)
class Return(Step):
    kind = "return"
    fn: Fn

    def execute(self, run: Run) -> Result:
        result = self.fn(run.ctx)
        if not isinstance(result, (Ok, Failure)):
            raise _data.StepRefused(f"return_ must give ok(...) or fail(...), not {type(result).__name__}")
        return result


@attrs.frozen(slots=True)
class SendMail(Step):
    kind = "mail.send"
    to: object
    subject: object
    body: object
    sender: object

    def execute(self, run: Run) -> Result:
        _outbox.send_mail(self, run)
        return None


@attrs.frozen(slots=True)
class SendWebhook(Step):
    kind = "webhook.send"
    url: object
    method: str
    headers: object
    body: object
    auth: object
    retry: object

    def execute(self, run: Run) -> Result:
        _outbox.send_webhook(self, run)
        return None


@attrs.frozen(slots=True)
class CallFeature(NamedStep):
    kind = "call_feature"
    handler: WriteHandler[Any, Any]
    payload: Fn
    as_user: object

    def execute(self, run: Run) -> Result:
        return _data.call_feature(self, run)


@attrs.frozen(slots=True)
class Wait(Step):
    kind = "workflow.wait"
    duration: timedelta | str | Callable[[Any], datetime]


@attrs.frozen(slots=True)
class WaitForEvent(NamedStep):
    kind = "workflow.wait_for_event"
    event: type[Any]
    key: Fn
    event_key: Fn
    timeout: timedelta | str


@attrs.frozen(slots=True)
class Retry(Step):
    kind = "workflow.retry"
    times: int
    backoff: str
    base_delay: timedelta
    body: Block

    def children(self) -> Iterable[tuple[str, tuple[Step, ...]]]:
        return (("do", self.body.steps),)


def walk(steps: Sequence[Step], builder: str, prefix: str = "") -> Iterable[tuple[str, Step, str]]:
    """Every step with its path and the builder it was written in, depth first."""
    for i, step in enumerate(steps):
        path = f"{prefix}{i}"
        yield path, step, builder
        inner = RETRY_BODY_BUILDER if isinstance(step, Retry) else BUILDERS[builder].nested
        for label, child in step.children():
            yield from walk(child, inner, f"{path}/{label}/")


def sub_keys(steps: Sequence[Step]) -> Mapping[str, None]:
    """Keys that steps inside sub-pipelines declare: they start as ``None`` (DESIGN §3.4)."""
    keys: dict[str, None] = {}

    def visit(seq: Sequence[Step], nested: bool) -> None:
        for step in seq:
            if nested and isinstance(step, NamedStep):
                keys[step.name] = None
            for _label, child in step.children():
                visit(child, True)

    visit(steps, False)
    return keys
