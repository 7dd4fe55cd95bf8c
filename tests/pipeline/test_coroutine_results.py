"""A resolver that gives a coroutine — a plain lambda calling an async function, which
boot cannot tell from a synchronous one — is refused where its result is used: a
structured ``internal_error`` naming the step and its argument and saying what to do,
nothing of the call written (the writes before it rolled back, on SQLite and
PostgreSQL), and the coroutine closed, so Python never warns that it was not awaited.

Before, ``compute`` stored the coroutine as the step's value (the handler answered
``Ok(<coroutine object>)``), ``branch``/``guard`` took it as true, the other steps
failed with an error of their own that did not say why ("raised TypeError"), and the
process printed "coroutine ... was never awaited"."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _crash import said
from _support import run_info
from _unawaited import no_unawaited_coroutine
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

import kumiko_typed._observe as observe
from kumiko_typed import App, BootError, Entity, Failure, Feature, Ok, User, manual, ok

AppOn = Callable[..., App]

#: What every refusal says after the argument's name.
FIX = (
    "returned a coroutine: steps run synchronously inside the transaction; call the async function "
    "outside the pipeline or make it synchronous"
)


#: What boot says of an ``async def`` where a plain function is called.
ASYNC = (
    "is async: it runs synchronously inside the transaction and its coroutine would never run; make it a plain "
    "(non-async) function"
)


class AwNote(Entity):
    __tablename__ = "aw_note"
    n: Mapped[int]


class _Projections(MappedAsDataclass, DeclarativeBase):
    pass


class AwLine(_Projections):
    __tablename__ = "aw_line"
    key: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    qty: Mapped[int]


@attrs.frozen
class AwBumped:
    n: int


@attrs.frozen
class AwMade:
    n: int


@attrs.frozen
class Target:
    id: uuid.UUID


async def fetch(c: object) -> Any:
    """What a step may not await: the async function a resolver calls."""
    return 1


def bad(c: Any) -> Any:
    """A resolver boot lets through (no ``async def``) that gives a coroutine."""
    return fetch(c)


def _feature() -> tuple[Feature[Any], Any]:
    f: Feature[Any] = Feature("aw", requires=["mail.send", "webhook.send", "call_feature"], projections=[AwLine])
    f.entity(AwNote)
    f.event(AwBumped, name="aw-bumped")
    f.event(AwMade, name="aw-made")

    @f.projector(AwNote, AwBumped)
    def bump(row: AwNote, event: AwBumped) -> None:
        row.n += event.n

    @f.projector(AwNote, AwMade)
    def made(row: AwNote, event: AwMade) -> None:
        row.n = event.n

    seed = f.write_handler(
        "seed",
        f.pipeline(Target)
        .create("note", AwNote, data=lambda c: AwNote(n=1))
        .unsafe_projection_upsert(AwLine, on=["key"], row=lambda c: {"key": "seeded", "qty": 1})
        .return_(lambda c: ok(c.steps["note"].id)),
    )
    return f, seed


def _inner(f: Feature[Any]) -> Any:
    return f.write_handler("inner", f.pipeline(Target).return_(lambda c: ok(None)))


by_id = lambda c: sa.select(AwNote).where(AwNote.id == c.payload.id)  # noqa: E731

#: Per call site: (the step(s) with ``bad`` in it, what the message names).
SITES: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "compute": (lambda p, inner: p.compute("x", bad), 'compute "x" raised StepRefused: fn='),
    "branch-when": (lambda p, inner: p.branch(when=bad, on_true=lambda b: b.compute("t", lambda c: 1)), "when="),
    "guard-when": (lambda p, inner: p.guard(bad, otherwise=lambda c: Failure("unprocessable", "no")), "when="),
    "guard-otherwise": (lambda p, inner: p.guard(lambda c: False, otherwise=bad), "otherwise="),
    "for_each-over": (lambda p, inner: p.for_each("i", over=bad, do=lambda b: b.compute("t", lambda c: 1)), "over="),
    "find_one-query": (lambda p, inner: p.find_one("r", bad), "query="),
    "get_one-query": (lambda p, inner: p.get_one("r", bad), "query="),
    "find_many-query": (lambda p, inner: p.find_many("r", bad), "query="),
    "create-data": (lambda p, inner: p.create("c", AwNote, data=bad), 'create "c" raised StepRefused: data='),
    "create-event": (lambda p, inner: p.create("c", AwNote, data=lambda c: AwNote(n=2), event=bad), "event="),
    "update-id": (lambda p, inner: p.update("u", AwNote, id=bad, changes=lambda c: {"n": 5}, version=1), "id="),
    "update-version": (
        lambda p, inner: p.update("u", AwNote, id=lambda c: c.payload.id, changes=lambda c: {"n": 5}, version=bad),
        "version=",
    ),
    "update-changes": (
        lambda p, inner: p.update("u", AwNote, id=lambda c: c.payload.id, changes=bad, version=1),
        "changes=",
    ),
    "append_event-event": (lambda p, inner: p.append_event(AwNote, id=lambda c: c.payload.id, event=bad), "event="),
    "append_event-id": (lambda p, inner: p.append_event(AwNote, id=bad, event=lambda c: AwBumped(1)), "id="),
    "append_event-headers": (
        lambda p, inner: p.append_event(AwNote, id=lambda c: c.payload.id, event=lambda c: AwBumped(1), headers=bad),
        "headers=",
    ),
    "upsert-row": (lambda p, inner: p.unsafe_projection_upsert(AwLine, on=["key"], row=bad), "row="),
    "delete-where": (lambda p, inner: p.unsafe_projection_delete(AwLine, where=bad), "where="),
    "send_mail-to": (lambda p, inner: p.send_mail(to=bad, subject="s", body="b"), "to="),
    "send_mail-body": (lambda p, inner: p.send_mail(to="a@example.org", subject="s", body=bad), "body="),
    "send_webhook-url": (lambda p, inner: p.send_webhook(url=bad), "url="),
    "send_webhook-body": (lambda p, inner: p.send_webhook(url="https://hooks.example.org/x", body=bad), "body="),
    "call_feature-payload": (lambda p, inner: p.call_feature("r", inner, payload=bad), "payload="),
    "call_feature-as_user": (
        lambda p, inner: p.call_feature("r", inner, payload=lambda c: c.payload, as_user=bad),
        "as_user=",
    ),
}


def _snapshot(app: App) -> dict[str, list[str]]:
    """Every row of every table the App has (framework tables included)."""
    with app.engine.connect() as conn:
        return {t.name: sorted(repr(tuple(r)) for r in conn.execute(sa.select(t))) for t in app.tables()}


@pytest.mark.parametrize("site", list(SITES))
def test_a_step_whose_resolver_returns_a_coroutine_fails_and_writes_nothing(
    app_on: AppOn, admin: User, site: str
) -> None:
    f, seed = _feature()
    add_step, named = SITES[site]
    inner = _inner(f)
    # Writes before the refused step: an aggregate, a projection row and an outbox row.
    before_it = (
        f.pipeline(Target)
        .create("first", AwNote, data=lambda c: AwNote(n=0))
        .unsafe_projection_upsert(AwLine, on=["key"], row=lambda c: {"key": "first", "qty": 1})
        .send_mail(to="ops@example.org", subject="s", body="b")
    )
    handler = f.write_handler("h", add_step(before_it, inner).return_(lambda c: ok("done")))
    app = app_on([f])
    seeded = app.dispatch(seed, Target(uuid.uuid4()), user=admin)
    assert isinstance(seeded, Ok), seeded
    before = _snapshot(app)
    with no_unawaited_coroutine():
        answer = app.dispatch(handler, Target(seeded.data), user=admin)
    assert isinstance(answer, Failure), answer
    assert answer.code == "internal_error", answer
    assert f"{named}" in said(answer) and f"{FIX}" in said(answer), answer.message
    assert _snapshot(app) == before


def test_return_whose_resolver_returns_a_coroutine_fails_and_writes_nothing(app_on: AppOn, admin: User) -> None:
    f, _seed = _feature()
    handler = f.write_handler("h", f.pipeline(Target).create("first", AwNote, data=lambda c: AwNote(n=0)).return_(bad))
    app = app_on([f])
    before = _snapshot(app)
    with no_unawaited_coroutine():
        answer = app.dispatch(handler, Target(uuid.uuid4()), user=admin)
    assert isinstance(answer, Failure) and answer.code == "internal_error", answer
    assert said(answer).endswith(f"step 1 return raised StepRefused: fn= {FIX}"), answer.message
    assert _snapshot(app) == before


def test_a_query_handler_refuses_a_coroutine_too(app_on: AppOn, admin: User) -> None:
    f, _seed = _feature()
    query = f.query_handler("q", f.query_pipeline(Target).compute("x", bad).return_(lambda c: ok(c.steps["x"])))
    app = app_on([f])
    with no_unawaited_coroutine():
        answer = app.query(query, Target(uuid.uuid4()), user=admin)
    assert isinstance(answer, Failure) and answer.code == "internal_error", answer
    assert f'compute "x" raised StepRefused: fn= {FIX}' in said(answer), answer.message


#: Workflow steps: (the step(s) with ``bad`` in it, what the message names).
WORKFLOW_SITES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "compute": (lambda p: p.compute("x", bad), "fn="),
    "wait-duration": (lambda p: p.wait(bad), "duration="),
    "wait_for_event-key": (
        lambda p: p.wait_for_event("e", AwBumped, key=bad, event_key=lambda e: e.n, timeout="PT1H"),
        "key=",
    ),
    "wait_for_event-timeout": (
        lambda p: p.wait_for_event("e", AwBumped, key=lambda c: 1, event_key=lambda e: e.n, timeout=bad),
        "timeout=",
    ),
}


@pytest.mark.parametrize("site", list(WORKFLOW_SITES))
def test_a_workflow_step_whose_resolver_returns_a_coroutine_fails_the_run(
    app_on: AppOn, admin: User, site: str
) -> None:
    f, _seed = _feature()
    add_step, named = WORKFLOW_SITES[site]
    pipeline = f.workflow_pipeline(Target).create("first", AwNote, data=lambda c: AwNote(n=0))
    flow = f.workflow("flow", trigger=manual(Target), pipeline=add_step(pipeline))
    app = app_on([f])
    with no_unawaited_coroutine():
        info = run_info(app, app.start_workflow(flow, Target(uuid.uuid4()), user=admin))
    assert info.status == "failed" and info.error is not None, info
    assert info.error["code"] == "internal_error", info.error
    assert f"raised StepRefused: {named} {FIX}" in info.error["message"], info.error
    with app.engine.connect() as conn:  # the create before it was rolled back
        assert conn.execute(sa.select(sa.func.count()).select_from(AwNote)).scalar() == 0


def test_an_event_key_that_returns_a_coroutine_matches_no_event_and_says_why(
    app_on: AppOn, admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    f, seed = _feature()
    bump = f.write_handler(
        "bump",
        f.pipeline(Target)
        .append_event(AwNote, id=lambda c: c.payload.id, event=lambda c: AwBumped(1))
        .return_(lambda c: ok(None)),
    )
    flow = f.workflow(
        "flow",
        trigger=manual(Target),
        pipeline=f.workflow_pipeline(Target).wait_for_event(
            "e", AwBumped, key=lambda c: 1, event_key=bad, timeout=timedelta(hours=1)
        ),
    )
    app = app_on([f])
    seeded = app.dispatch(seed, Target(uuid.uuid4()), user=admin)
    assert isinstance(seeded, Ok), seeded
    run_id = app.start_workflow(flow, Target(seeded.data), user=admin)
    assert run_info(app, run_id).status == "suspended"
    with no_unawaited_coroutine():
        assert isinstance(app.dispatch(bump, Target(seeded.data), user=admin), Ok)
        app.run_worker(once=True)
    assert run_info(app, run_id).status == "suspended"  # no key: the event matched no run
    assert f"event_key= {FIX}" in caplog.text


async def project_later(row: AwNote, event: AwBumped) -> None:
    row.n += event.n


def project_soon(row: AwNote, event: AwBumped) -> Any:
    """A plain function boot lets through, that gives a coroutine."""
    return project_later(row, event)


def test_an_async_projector_is_a_boot_error(make_app: AppOn) -> None:
    """Before, the App booted and every append left the row as it was (the projector only
    made a coroutine), with Python's "never awaited" warning as the one sign."""
    f: Feature[Any] = Feature("aw_boot")
    f.entity(AwNote)
    f.event(AwBumped, name="aw-bumped")
    f.projector(AwNote, AwBumped)(project_later)
    with pytest.raises(BootError) as raised:
        make_app([f])
    assert raised.value.problems == [
        f"feature 'aw_boot': the projector {__name__}.project_later of AwNote for AwBumped {ASYNC}"
    ]


def test_a_projector_that_returns_a_coroutine_fails_the_write_and_writes_nothing(app_on: AppOn, admin: User) -> None:
    f, seed = _feature()
    f.projector(AwNote, AwBumped)(project_soon)
    bump = f.write_handler(
        "bump",
        f.pipeline(Target)
        .create("first", AwNote, data=lambda c: AwNote(n=0))
        .append_event(AwNote, id=lambda c: c.payload.id, event=lambda c: AwBumped(1))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    seeded = app.dispatch(seed, Target(uuid.uuid4()), user=admin)
    assert isinstance(seeded, Ok), seeded
    before = _snapshot(app)
    with no_unawaited_coroutine():
        answer = app.dispatch(bump, Target(seeded.data), user=admin)
    assert isinstance(answer, Failure) and answer.code == "internal_error", answer
    assert f"raised StepRefused: the projector {__name__}.project_soon of AwNote for AwBumped {FIX}" in said(answer), (
        answer.message
    )
    assert _snapshot(app) == before


def test_a_traced_run_refuses_a_coroutine_of_a_compute_too(
    app_on: AppOn, admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded trace runs the fused computes one by one (``_observe``): the same refusal."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    monkeypatch.setattr(observe, "_tracer", lambda: provider.get_tracer("kumiko_typed"))
    f, _seed = _feature()
    handler = f.write_handler(
        "h",
        f.pipeline(Target)
        .create("first", AwNote, data=lambda c: AwNote(n=0))
        .compute("x", bad)
        .compute("y", lambda c: 2)
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    before = _snapshot(app)
    try:
        with no_unawaited_coroutine():
            answer = app.dispatch(handler, Target(uuid.uuid4()), user=admin)
    finally:
        provider.shutdown()
    assert isinstance(answer, Failure) and answer.code == "internal_error", answer
    assert said(answer) == f'step 1 compute "x" raised StepRefused: fn= {FIX}', answer.message
    assert _snapshot(app) == before


async def upcast_later(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "n": 2}


#: The coroutines ``upcast_soon`` gave: the log's record of the failure holds the one
#: given, so only its state tells whether it was closed.
UPCAST: list[Any] = []


def upcast_soon(payload: dict[str, Any]) -> Any:
    """A plain function boot lets through, that gives a coroutine."""
    UPCAST.append(upcast_later(payload))
    return UPCAST[-1]


def test_an_async_upcaster_or_fill_is_a_boot_error(make_app: AppOn) -> None:
    """Before, an async upcaster made every older event unreadable ("returned a
    coroutine"), and an async fill= stored a coroutine as the value of a carried-over run."""
    f: Feature[Any] = Feature("aw_boot")
    f.entity(AwNote)
    f.event(AwBumped, name="aw-bumped", version=2, upcasters={1: upcast_later})
    f.workflow(
        "flow",
        trigger=manual(Target),
        pipeline=f.workflow_pipeline(Target).compute("x", lambda c: 1).wait("PT1H"),
        fill={"x": fetch},
    )
    with pytest.raises(BootError) as raised:
        make_app([f])
    assert raised.value.problems == [
        f"feature 'aw_boot': event(AwBumped): the upcaster from version 1 {ASYNC}",
        f'workflow aw_boot:flow: fill= for "x" {ASYNC}',
    ]


def test_an_upcaster_that_returns_a_coroutine_leaves_the_event_unreadable_and_closes_it(
    app_on: AppOn, admin: User
) -> None:
    f, seed = _feature()
    bump = f.write_handler(
        "bump",
        f.pipeline(Target)
        .append_event(AwNote, id=lambda c: c.payload.id, event=lambda c: AwBumped(1))
        .return_(lambda c: ok(None)),
    )
    v1 = app_on([f])
    seeded = v1.dispatch(seed, Target(uuid.uuid4()), user=admin)
    assert isinstance(seeded, Ok) and isinstance(v1.dispatch(bump, Target(seeded.data), user=admin), Ok)
    g: Feature[Any] = Feature("aw", projections=[AwLine])
    g.entity(AwNote)
    g.event(AwBumped, name="aw-bumped", version=2, upcasters={1: upcast_soon})
    v2 = app_on([g])
    UPCAST.clear()
    with no_unawaited_coroutine():
        read = v2.read_stream(AwNote, seeded.data, user=admin)
    assert isinstance(read, Failure) and read.code == "internal_error", read
    assert "an upcaster to schema version 2 returned a coroutine, not the payload as a dict" in said(read)
    assert [inspect.getcoroutinestate(c) for c in UPCAST] == [inspect.CORO_CLOSED]
    UPCAST.clear()
