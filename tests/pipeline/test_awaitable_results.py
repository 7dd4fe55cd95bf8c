"""A resolver that gives an awaitable other than a coroutine — an ``asyncio.Future``, an
object with ``__await__``, a ``types.coroutine`` generator — or an async generator is
refused as a coroutine is (``test_coroutine_results``): a structured ``internal_error``
naming the step and saying to make the function synchronous, the transaction rolled back
(both databases), the object closed or cancelled so Python warns of nothing, the detail
in the log.  A plain generator is a synchronous iterator and passes.

Before, only a coroutine was caught: the others were stored as the step's value (a
handler answered ``Ok(<Future pending>)``), taken as true by ``branch``, or failed with
an error of their own that did not say why.
"""

from __future__ import annotations

import asyncio
import logging
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import error_id, said
from _support import run_info
from _unawaited import no_unawaited_coroutine
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, manual, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]

#: What every refusal says after the kind of value.
FIX = (
    "steps run synchronously inside the transaction; call the async function outside the pipeline or make it "
    "synchronous"
)


class AwaitNote(Entity):
    __tablename__ = "await_note"
    n: Mapped[int]


@attrs.frozen
class Noted:
    n: int


@attrs.frozen
class Go:
    id: uuid.UUID


class Later:
    """An awaitable that is no coroutine and no future: an object with ``__await__``."""

    def __await__(self) -> Iterator[None]:
        yield


async def _streamed() -> Any:
    yield 1


@types.coroutine
def _legacy() -> Any:
    """A generator-based coroutine: awaitable, and a plain generator by its type."""
    yield


class Made:
    """The awaitables one test's resolvers made, to check each was let go of."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.made: list[Any] = []

    def make(self, kind: str) -> Any:
        value = {
            "future": self.loop.create_future,
            "__await__": Later,
            "async generator": _streamed,
            "types.coroutine": _legacy,
        }[kind]()
        self.made.append(value)
        return value

    def let_go(self) -> bool:
        """Whether every future was cancelled and every generator-based coroutine closed."""
        return all(
            v.cancelled() if isinstance(v, asyncio.Future) else v.gi_frame is None
            for v in self.made
            if isinstance(v, asyncio.Future | types.GeneratorType)
        )


#: Per kind: what the refusal calls the value.
KINDS = {
    "future": "an awaitable (Future)",
    "__await__": "an awaitable (Later)",
    "async generator": "an async generator",
    "types.coroutine": "a generator-based coroutine (types.coroutine)",
}


@pytest.fixture
def made() -> Iterator[Made]:
    loop = asyncio.new_event_loop()
    try:
        yield Made(loop)
    finally:
        loop.close()


def _feature(bad: Callable[[Any], Any]) -> tuple[Feature[Any], dict[str, Any]]:
    """A write before the refused step in every handler: an aggregate and an outbox row."""
    f: Feature[Any] = Feature("await", requires=["mail.send", "call_feature"])
    f.entity(AwaitNote)
    f.event(Noted, name="await-noted")

    @f.projector(AwaitNote, Noted)
    def noted(row: AwaitNote, event: Noted) -> Any:
        row.n = event.n
        return bad(None) if event.n == 13 else None

    def first() -> Any:
        return (
            f.pipeline(Go)
            .create("first", AwaitNote, data=lambda c: AwaitNote(n=0))
            .send_mail(to="ops@example.org", subject="s", body="b")
        )

    inner = f.write_handler(
        "inner",
        f.pipeline(Go)
        .create("inner_note", AwaitNote, data=lambda c: AwaitNote(n=1))
        .compute("x", bad)
        .return_(lambda c: ok(None)),
    )
    handlers = {
        "compute": first().compute("x", bad).return_(lambda c: ok("done")),
        "return_": first().return_(bad),
        "branch-when": first()
        .branch(when=bad, on_true=lambda b: b.compute("t", lambda c: 1))
        .return_(lambda c: ok("done")),
        "for_each-body": first()
        .for_each("i", over=lambda c: [1, 2], do=lambda b: b.compute("x", bad))
        .return_(lambda c: ok("done")),
        "branch-arm": first()
        .branch(when=lambda c: True, on_true=lambda b: b.compute("x", bad))
        .return_(lambda c: ok("done")),
        "call_feature": first().call_feature("r", inner, payload=lambda c: c.payload).return_(lambda c: ok("done")),
        "projector": first()
        .append_event(AwaitNote, id=lambda c: c.steps["first"].id, event=lambda c: Noted(13))
        .return_(lambda c: ok("done")),
    }
    return f, {name: f.write_handler(name, pipeline) for name, pipeline in handlers.items()}


#: Per handler: where the message says the refused value came from.
WHERE = {
    "compute": 'step 2 compute "x" raised StepRefused: fn=',
    "return_": "step 2 return raised StepRefused: fn=",
    "branch-when": "step 2 branch raised StepRefused: when=",
    "for_each-body": 'step 2/do/#0/0 compute "x" raised StepRefused: fn=',
    "branch-arm": 'step 2/on_true/0 compute "x" raised StepRefused: fn=',
    "call_feature": 'step 1 compute "x" raised StepRefused: fn=',
    "projector": "raised StepRefused: the projector",
}


def _snapshot(app: App) -> dict[str, list[str]]:
    with app.engine.connect() as conn:
        return {t.name: sorted(repr(tuple(r)) for r in conn.execute(sa.select(t))) for t in app.tables()}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("site", list(WHERE))
def test_a_step_that_returns_an_awaitable_fails_writes_nothing_and_leaves_nothing_open(
    app_on: AppOn, admin: User, made: Made, caplog: pytest.LogCaptureFixture, site: str, kind: str
) -> None:
    f, handlers = _feature(lambda c: made.make(kind))
    app = app_on([f])
    before = _snapshot(app)
    with no_unawaited_coroutine(), caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        answer = app.dispatch(handlers[site], Go(uuid.uuid4()), user=admin)
    assert isinstance(answer, Failure) and answer.code == "internal_error", answer
    message = said(answer)
    assert WHERE[site] in message and message.endswith(f" returned {KINDS[kind]}: {FIX}"), message
    assert _snapshot(app) == before
    assert made.made and made.let_go()
    # The log names the step and the value's kind under the Failure's error id.
    (record,) = [r for r in caplog.records if error_id(answer) in r.getMessage()]
    assert record.exc_info is not None and f"returned {KINDS[kind]}" in str(record.exc_info[1])


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_workflow_step_that_returns_an_awaitable_fails_the_run(
    app_on: AppOn, admin: User, made: Made, kind: str
) -> None:
    f, _handlers = _feature(lambda c: made.make(kind))
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .create("first", AwaitNote, data=lambda c: AwaitNote(n=0))
        .for_each("i", over=lambda c: [1], do=lambda b: b.compute("x", lambda c: made.make(kind))),
    )
    app = app_on([f])
    with no_unawaited_coroutine():
        info = run_info(app, app.start_workflow(flow, Go(uuid.uuid4()), user=admin))
    assert (info.status, info.error["code"]) == ("failed", "internal_error"), info
    assert f'compute "x" raised StepRefused: fn= returned {KINDS[kind]}: {FIX}' in info.error["message"]
    with app.engine.connect() as conn:  # the create before it was rolled back
        assert conn.execute(sa.select(sa.func.count()).select_from(AwaitNote)).scalar() == 0
    assert made.let_go()


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_awaitable_in_a_retry_body_fails_the_run_at_its_first_attempt(
    app_on: AppOn, admin: User, made: Made, kind: str
) -> None:
    """The refusal is the program's, the same at every attempt: the run fails with it at
    once (the attempt rolled back, its create never kept), not after spending its attempts
    and their backoff.  Before, each attempt was tried, waited for and refused again."""
    f, _handlers = _feature(lambda c: made.make(kind))
    flow = f.workflow(
        "flow",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).retry(
            times=3,
            do=lambda b: b.create("inside", AwaitNote, data=lambda c: AwaitNote(n=5)).compute(
                "x", lambda c: made.make(kind)
            ),
        ),
    )
    app = app_on([f], clock=FakeClock())
    with no_unawaited_coroutine():
        run_id = app.start_workflow(flow, Go(uuid.uuid4()), user=admin)
    info = run_info(app, run_id)
    assert (info.status, info.error["code"]) == ("failed", "internal_error"), info
    refused = f'step @retry/do/#1/x compute "x" raised StepRefused: fn= returned {KINDS[kind]}: {FIX}'
    assert refused in info.error["message"]
    assert "attempts" not in info.error  # no attempt record: the run's own failure
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(AwaitNote)).scalar() == 0
    assert len(made.made) == 1 and made.let_go()


def test_a_plain_generator_is_a_value_and_a_loop_reads_one(app_on: AppOn, admin: User) -> None:
    """A generator is a synchronous iterator, not a mistake: ``over=`` reads one lazily,
    and a compute may hand one to the next step."""
    f: Feature[Any] = Feature("await_gen")
    handler = f.write_handler(
        "h",
        f.pipeline(Go)
        .compute("evens", lambda c: (n for n in range(6) if n % 2 == 0))
        .compute("listed", lambda c: list(c.steps["evens"]))
        .for_each("i", over=lambda c: (n * 10 for n in c.steps["listed"]), do=lambda b: b.compute("x", lambda c: 1))
        .return_(lambda c: ok(c.steps["listed"])),
    )
    app = app_on([f])
    with no_unawaited_coroutine():
        assert app.dispatch(handler, Go(uuid.uuid4()), user=admin) == Ok([0, 2, 4])
