"""Spans (OpenTelemetry's SDK with its in-memory exporter) and structured log records of
dispatches, steps, nested calls, workflow segments and deliveries — both databases."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import attrs
import pytest
import sqlalchemy as sa
from _receiver import Receiver
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from sqlalchemy.orm import Mapped, mapped_column

import kumiko_typed._observe as observe
from kumiko_typed import App, Entity, Failure, Feature, Ok, RetryPolicy, User, bearer, fail, manual, ok
from kumiko_typed.testing import FakeClock

T0 = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


@attrs.frozen
class Order:
    items: tuple[int, ...]
    url: str = ""


f = Feature("obs", requires=["webhook.send", "call_feature"])
inner = f.write_handler(
    "inner", f.pipeline(Order).compute("n", lambda c: len(c.payload.items)).return_(lambda c: ok(c.steps["n"]))
)
outer = f.write_handler(
    "outer",
    f.pipeline(Order)
    .compute("count", lambda c: len(c.payload.items))
    .branch(
        when=lambda c: c.steps["count"] > 1,
        on_true=lambda b: b.for_each(
            "item", over=lambda c: c.payload.items, do=lambda d: d.compute("x", lambda c: c.scope["item"] * 2)
        ),
    )
    .call_feature("nested", inner, payload=lambda c: c.payload)
    .guard(lambda c: 0 not in c.payload.items, otherwise=lambda c: fail("unprocessable", "no zero items"))
    .compute("ratio", lambda c: 10 // (c.payload.items[0] - 1))
    .return_(lambda c: ok(c.steps["ratio"])),
)
hook = f.write_handler(
    "hook",
    f.pipeline(Order).send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}).return_(lambda c: ok(None)),
)
flow = f.workflow(
    "flow",
    trigger=manual(Order),
    pipeline=f.workflow_pipeline(Order).compute("a", lambda c: 1).wait("PT1M").compute("b", lambda c: 2),
)
counted = f.query_handler(
    "counted", f.query_pipeline(Order).compute("n", lambda c: len(c.payload.items)).return_(lambda c: ok(c.steps["n"]))
)

guarded = Feature("obs-guarded", requires=["webhook.send"])
clerks_only = guarded.write_handler("close", guarded.pipeline(Order).return_(lambda c: ok(None)), roles={"clerk"})
authed = guarded.write_handler(
    "authed",
    guarded.pipeline(Order)
    .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}, auth=bearer("CRM"))
    .return_(lambda c: ok(None)),
)


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A real SDK provider whose spans land in memory; the runtime's tracer comes from it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(observe, "_tracer", lambda: provider.get_tracer("kumiko_typed"))
    yield exporter
    provider.shutdown()


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def test_a_dispatch_has_a_span_and_one_per_step_with_its_path(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter
) -> None:
    app = app_on([f])
    assert app.dispatch(outer, Order((2, 3)), user=user) == Ok(10)
    found = spans.get_finished_spans()
    named = _by_name(found)
    dispatch = named["kumiko.dispatch"]
    assert dispatch.attributes is not None
    assert dispatch.attributes["kumiko.handler"] == "obs:outer"
    assert dispatch.attributes["kumiko.tenant"] == str(user.tenant_id)
    steps = {
        s.attributes["kumiko.step.path"]: s
        for s in found
        if s.attributes and "kumiko.step.path" in s.attributes and s.attributes["kumiko.handler"] == "obs:outer"
    }
    assert set(steps) == {"0", "1", "1/on_true/0", "1/on_true/0/do/#0/0", "1/on_true/0/do/#1/0", "2", "3", "4", "5"}
    assert steps["1/on_true/0/do/#1/0"].attributes["kumiko.step.kind"] == "compute"  # type: ignore[index]
    assert steps["1/on_true/0/do/#1/0"].attributes["kumiko.step.name"] == "x"  # type: ignore[index]
    assert steps["2"].attributes["kumiko.step.kind"] == "call_feature"  # type: ignore[index]
    # nesting: a step span is a child of its parent step's span, the nested call a child of its step
    assert steps["1/on_true/0"].parent.span_id == steps["1"].context.span_id  # type: ignore[union-attr]
    assert steps["0"].parent.span_id == dispatch.context.span_id  # type: ignore[union-attr]
    nested = named["kumiko.call_feature"]
    assert nested.parent.span_id == steps["2"].context.span_id  # type: ignore[union-attr]
    assert nested.attributes["kumiko.handler"] == "obs:inner"  # type: ignore[index]
    assert all(s.status.status_code != StatusCode.ERROR for s in found)


def test_a_failure_marks_its_step_and_dispatch_with_the_code(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter
) -> None:
    app = app_on([f])
    result = app.dispatch(outer, Order((0, 3)), user=user)
    assert not isinstance(result, Ok) and result.code == "unprocessable"
    named = _by_name(spans.get_finished_spans())
    assert named["kumiko.dispatch"].status.status_code == StatusCode.ERROR
    assert named["kumiko.dispatch"].status.description == "unprocessable"
    assert named["guard"].status.status_code == StatusCode.ERROR


def test_a_crash_in_a_traced_compute_names_its_step(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter
) -> None:
    """The traced path runs fused computes one by one: a crash still names its own step."""
    app = app_on([f])
    result = app.dispatch(outer, Order((1,)), user=user)  # 10 // 0
    assert not isinstance(result, Ok) and result.code == "internal_error"
    assert result.details["step"] == 'compute "ratio"'  # type: ignore[index,call-overload]
    assert result.details["path"] == "4"  # type: ignore[index,call-overload]


def test_segments_and_deliveries_have_spans(
    app_on: Callable[..., App], user: User, receiver: Receiver, spans: InMemorySpanExporter
) -> None:
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Order(()), user=user)
    clock.advance(minutes=2)
    assert app.dispatch(hook, Order((), receiver.url("/hook")), user=user) == Ok(None)
    app.run_worker(once=True)
    found = spans.get_finished_spans()
    segments = [s for s in found if s.name == "kumiko.workflow.segment"]
    assert [s.attributes["kumiko.workflow.path"] for s in segments] == ["", "1"]  # type: ignore[index]
    assert {s.attributes["kumiko.workflow.run_id"] for s in segments} == {str(run_id)}  # type: ignore[index]
    (delivery,) = [s for s in found if s.name == "kumiko.delivery"]
    assert delivery.attributes["kumiko.outbox.kind"] == "webhook"  # type: ignore[index]
    assert delivery.status.status_code != StatusCode.ERROR


def test_a_failed_delivery_span_has_the_stored_error_with_the_secret_redacted(
    app_on: Callable[..., App],
    user: User,
    receiver: Receiver,
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The page's claim, held: a peer echoing the bearer secret (here in a redirect's
    Location) shows in neither the span nor a log record."""
    secret = "s3cret-XYZZY"
    receiver.respond = lambda _i, _p: (302, {"Location": f"http://127.0.0.1:1/next?t={secret}"})
    app = app_on([f, guarded], secrets={"CRM": secret}.get)
    with caplog.at_level(logging.DEBUG, logger="kumiko_typed"):
        assert app.dispatch(authed, Order((), receiver.url("/hook")), user=user) == Ok(None)
        app.run_worker(once=True)

    (delivery,) = [s for s in spans.get_finished_spans() if s.name == "kumiko.delivery"]
    assert delivery.status.status_code == StatusCode.ERROR
    assert (
        delivery.status.description == "HTTP 302 redirect to http://127.0.0.1:1/next?t=*** (redirects are not followed)"
    )
    seen = [str(s.attributes) + str(s.events) + str(s.status.description) for s in spans.get_finished_spans()]
    assert not any(secret in text for text in seen + [logging.Formatter().format(r) for r in caplog.records])


def test_without_a_recording_provider_nothing_is_traced() -> None:
    """The API alone (no SDK configured) records nothing: the runtime keeps its untraced path."""
    with observe.span("kumiko.dispatch") as current:
        assert current is None


# A fresh interpreter per case: the API takes its global provider once per process.
_PROVIDER_LATE = """
import os, sys
import kumiko_typed._observe as observe
from opentelemetry import trace
assert not observe.tracing(), "traced before any provider"
if sys.argv[1] == "environment":
    os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
else:
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
assert observe.tracing(), "a provider set after the first dispatch is not seen"
with observe.span("kumiko.dispatch") as current:
    assert current is not None and current.is_recording()
"""


@pytest.mark.parametrize("how", ["set_tracer_provider", "environment"])
def test_a_provider_configured_after_import_is_used(how: str) -> None:
    """The untraced path is told without asking the API each run, but a provider set
    later (``set_tracer_provider``), or named by ``OTEL_PYTHON_TRACER_PROVIDER`` in the
    environment, still turns tracing on, as the API's ``get_tracer_provider`` would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _PROVIDER_LATE, how], check=False, capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_log_records_carry_structured_fields(
    app_on: Callable[..., App], user: User, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.respond = lambda _i, _p: (404, {})
    app = app_on([f], clock=FakeClock(T0))
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        app.dispatch(outer, Order((0,)), user=user)
        app.dispatch(hook, Order((), receiver.url("/gone")), user=user)
        app.run_worker(once=True)
    failure = next(r for r in caplog.records if getattr(r, "kumiko_code", None) == "unprocessable")
    assert failure.kumiko_handler == "obs:outer" and failure.kumiko_tenant == str(user.tenant_id)  # type: ignore[attr-defined]
    passes = [r for r in caplog.records if hasattr(r, "kumiko_counts")]
    assert passes and passes[-1].kumiko_counts["retried"] == 1  # type: ignore[attr-defined]
    assert all(str(uuid.UUID(int=0)) not in r.getMessage() for r in passes)


def test_a_call_refused_before_it_runs_is_logged_like_any_failed_one(
    app_on: Callable[..., App], user: User, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal for the caller's roles or payload left no record: a log pipeline
    counting failures by code missed every 403 (someone trying handlers they may not
    run) and every 400 of a payload, though the table promises one per failed dispatch."""
    app = app_on([f, guarded])
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        failed = [
            app.dispatch(clerks_only, Order(()), user=user),
            app.dispatch_json("obs-guarded:close", {"items": []}, user=user),
            app.dispatch_json("obs:outer", {"items": "many"}, user=user),
            app.query_json("obs:counted", {"items": "many"}, user=user),
            app.dispatch(outer, Order((1, 2)), user="nobody"),  # type: ignore[arg-type]
        ]

    records = [r for r in caplog.records if hasattr(r, "kumiko_code")]
    tenant = str(user.tenant_id)
    assert [(r.kumiko_handler, r.kumiko_code, r.kumiko_tenant) for r in records] == [  # type: ignore[attr-defined]
        ("obs-guarded:close", "access_denied", tenant),
        ("obs-guarded:close", "access_denied", tenant),
        ("obs:outer", "validation_error", tenant),
        ("obs:counted", "validation_error", tenant),
        ("obs:outer", "access_denied", None),
    ]
    for record, result in zip(records, failed, strict=True):
        assert isinstance(result, Failure) and result.message in record.getMessage()
        assert record.levelno == logging.INFO


def test_a_query_has_its_own_span(app_on: Callable[..., App], user: User, spans: InMemorySpanExporter) -> None:
    app = app_on([f])
    assert app.query(counted, Order((1, 2, 3)), user=user) == Ok(3)
    named = _by_name(spans.get_finished_spans())
    assert "kumiko.dispatch" not in named
    query = named["kumiko.query"]
    assert query.attributes is not None
    assert (query.attributes["kumiko.handler"], query.attributes["kumiko.tenant"]) == (
        "obs:counted",
        str(user.tenant_id),
    )
    step = named['compute "n"']
    assert step.parent is not None and step.parent.span_id == query.context.span_id


# --- what log records leave out: SQL, parameters and the payload's values ------------------


class ObsShelf(Entity):
    __tablename__ = "obs_shelf"
    label: Mapped[str] = mapped_column(sa.String(40))


class ObsBook(Entity):
    __tablename__ = "obs_book"
    title: Mapped[str] = mapped_column(sa.String(100))
    shelf_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("obs_shelf.id"))


class _RefusedOnSqlite(sa.TypeDecorator[str]):
    """Text whose binding SQLite's side refuses (PostgreSQL's refusal is its cast's)."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> str | None:
        if dialect.name == "sqlite":
            raise ValueError(f"{value!r} is refused")
        return value


@attrs.frozen
class Title:
    text: str


def _quiet_feature() -> Feature[str]:
    q = Feature("quiet")
    q.entity(ObsShelf)
    q.entity(ObsBook)
    q.write_handler(
        "shelve",  # a shelf that does not exist: the foreign key refuses the row
        q.pipeline(Title)
        .create("book", ObsBook, data=lambda c: ObsBook(title=c.payload.text, shelf_id=uuid.uuid4()))
        .return_(lambda c: ok(None)),
    )
    q.write_handler(
        "cast",
        q.pipeline(Title)
        .find_one(
            "n",
            lambda c: sa.select(ObsBook).where(
                sa.cast(sa.literal(c.payload.text), sa.Integer) == 1,
                sa.literal(c.payload.text, _RefusedOnSqlite()) == "x",
            ),
        )
        .return_(lambda c: ok(None)),
    )
    insert = sa.text("INSERT INTO obs_shelf (id, tenant_id, version, label) VALUES (:i, :t, 1, :label)")
    q.query_handler(
        "write",
        q.query_pipeline(Title)
        .compute("w", lambda c: c.db.execute(insert, {"i": uuid.uuid4(), "t": uuid.uuid4(), "label": c.payload.text}))
        .return_(lambda c: ok(None)),
    )
    return q


def test_log_messages_carry_no_sql_and_no_values_and_the_exception_goes_with_them(
    app_on: Callable[..., App], user: User, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a constraint's refusal logged the whole IntegrityError as its message (the
    INSERT and every value of the row), a refused value the database's reason quoting the
    value, and a query's write its SQL and values at INFO, with no traceback and no error id
    in its Failure (docs/observability.md: messages hold no SQL, no parameters, no values)."""
    app = app_on([_quiet_feature()])
    for name, code, level in (
        ("quiet:shelve", "validation_error", logging.INFO),
        ("quiet:cast", "validation_error", logging.INFO),
        ("quiet:write", "internal_error", logging.ERROR),
    ):
        marker = "iban-" + uuid.uuid4().hex
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="kumiko_typed"):
            run = app.query_json if name == "quiet:write" else app.dispatch_json
            result = run(name, {"text": marker}, user=user)
        assert isinstance(result, Failure) and result.code == code, result
        found = result.details if isinstance(result.details, dict) else result.details[0]
        error_id = found["error_id"]
        assert error_id in result.message and marker not in repr(result)
        # The record of the refusal (beside the dispatch's own, with its structured fields).
        [record] = [r for r in caplog.records if error_id in r.getMessage() and not hasattr(r, "kumiko_code")]
        assert record.levelno == level and record.exc_info is not None, name
        for r in caplog.records:
            for leak in (marker, "INSERT", "[SQL", "parameters"):
                assert leak not in r.getMessage(), (name, leak, r.getMessage())
        assert marker in caplog.text  # in the exception logged with the record


# --- what spans leave out: an exception's text ------------------------------------------------


def _leaky_sql(c: object) -> object:
    insert = sa.text("INSERT INTO obs_no_such_table (secret) VALUES (:secret)")
    return c.db.execute(insert, {"secret": c.payload.text})  # type: ignore[attr-defined]


def test_an_exception_in_a_step_leaves_its_text_out_of_the_spans(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter
) -> None:
    """Before: the SDK recorded the exception on the step's span and on the branch around it:
    an ``exception`` event with its message and traceback, and the status description
    "OperationalError: ... [SQL: INSERT ...] [parameters: ('<the payload's value>',)]" — SQL
    and payload values sent to the tracing backend.  The status now names the class, as the
    Failure does; a suspending run's step is no error."""
    q = Feature("spanned")
    q.write_handler(
        "leak",
        q.pipeline(Title)
        .branch(when=lambda c: True, on_true=lambda b: b.compute("w", _leaky_sql))
        .return_(lambda c: ok(None)),
    )
    app = app_on([q, f])
    marker = "iban-" + uuid.uuid4().hex
    result = app.dispatch_json("spanned:leak", {"text": marker}, user=user)
    assert isinstance(result, Failure) and result.code == "internal_error"
    raised = result.message.split(" raised ")[1].split(" ")[0]  # OperationalError / ProgrammingError
    named = _by_name(spans.get_finished_spans())
    for name in ('compute "w"', "branch"):
        assert (named[name].status.status_code, named[name].status.description) == (StatusCode.ERROR, raised)
    for s in spans.get_finished_spans():
        assert [e.name for e in s.events] == [], s.name
        shown = f"{s.status.description} {dict(s.attributes or {})}"
        assert marker not in shown and "INSERT" not in shown, s.name
    spans.clear()
    app.start_workflow(flow, Order(()), user=user)  # runs to its wait: the run suspends
    waited = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("kumiko.step.kind") == "workflow.wait"]
    assert [s.status.status_code for s in waited] == [StatusCode.UNSET]


# --- the page's tables, held one promise at a time ------------------------------------------

retried = f.workflow(
    "retried",
    trigger=manual(Order),
    pipeline=f.workflow_pipeline(Order).retry(
        times=2, do=lambda b: b.compute("r", lambda c: 1 // len(c.payload.items))
    ),
)
dying = f.write_handler(
    "dying",
    f.pipeline(Order)
    .send_webhook(url=lambda c: c.payload.url, body=lambda c: {"n": 1}, retry=RetryPolicy(times=1))
    .return_(lambda c: ok(None)),
)


def test_a_failure_code_is_an_attribute_of_its_step_and_dispatch_spans(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter
) -> None:
    app = app_on([f])
    assert not isinstance(app.dispatch(outer, Order((0, 3)), user=user), Ok)
    named = _by_name(spans.get_finished_spans())
    for name in ("kumiko.dispatch", "guard"):
        assert (named[name].attributes or {}).get("kumiko.failure.code") == "unprocessable", name
    nested = named["kumiko.call_feature"]
    assert (nested.attributes or {}).get("kumiko.tenant") == str(user.tenant_id)


def test_a_delivery_span_starts_a_trace_of_its_own_naming_its_row_and_tenant(
    app_on: Callable[..., App], user: User, receiver: Receiver, spans: InMemorySpanExporter
) -> None:
    """Its correlation id is the dispatch's that queued it: the two traces join on it."""
    app = app_on([f], clock=FakeClock(T0))
    call = uuid.uuid4()
    assert app.dispatch(hook, Order((), receiver.url("/hook")), user=user, correlation_id=call) == Ok(None)
    (item,) = app.outbox()
    app.run_worker(once=True)
    named = _by_name(spans.get_finished_spans())
    assert (named["kumiko.dispatch"].attributes or {})["kumiko.correlation_id"] == str(call)
    delivery = named["kumiko.delivery"]
    assert delivery.parent is None
    assert dict(delivery.attributes or {}) == {
        "kumiko.outbox.id": str(item.id),
        "kumiko.outbox.kind": "webhook",
        "kumiko.tenant": str(user.tenant_id),
        "kumiko.correlation_id": str(call),
    }


def test_a_failed_call_is_logged_with_its_correlation_id_as_its_span_carries_it(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """The record of a failed call names the correlation id its span, events and outbox
    rows carry: the one given, or the one the App made for it.  Before, neither the
    record nor the span named it, and a log line could not be joined with a trace."""
    app = app_on([f, guarded])
    given = uuid.uuid4()
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        app.dispatch(outer, Order((0, 3)), user=user, correlation_id=given)
        app.dispatch(outer, Order((0, 3)), user=user)
        app.dispatch_json("obs-guarded:close", {"items": []}, user=user, correlation_id=given)  # refused: roles
        app.query_json("obs:counted", {"items": "many"}, user=user)  # refused: payload
    ids = [r.kumiko_correlation_id for r in caplog.records if hasattr(r, "kumiko_code")]  # type: ignore[attr-defined]
    assert ids[0] == ids[2] == str(given) and ids[3] is None
    made = ids[1]
    assert made is not None and made != str(given)
    dispatches = [s for s in spans.get_finished_spans() if s.name == "kumiko.dispatch"]
    assert [(s.attributes or {})["kumiko.correlation_id"] for s in dispatches] == [str(given), made]


def test_a_segment_span_names_its_workflow_and_tenant_and_a_failed_one_its_code(
    app_on: Callable[..., App], user: User, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed ``retry`` attempt is an INFO record with its fields, and no exception's
    text; the run failing at its last attempt marks its segment's span."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        run_id = app.start_workflow(retried, Order(()), user=user)  # 1 // 0, twice
        clock.advance(minutes=5)
        app.run_worker(once=True)
    assert app.get_run(run_id).status == "failed"
    segments = [s for s in spans.get_finished_spans() if s.name == "kumiko.workflow.segment"]
    assert [dict(s.attributes or {}).get("kumiko.handler") for s in segments] == ["obs:retried"] * 2
    assert {dict(s.attributes or {}).get("kumiko.tenant") for s in segments} == {str(user.tenant_id)}
    assert segments[0].status.status_code == StatusCode.UNSET  # suspended for the next attempt
    assert (segments[1].status.status_code, segments[1].status.description) == (StatusCode.ERROR, "internal_error")
    # The first attempt's step is a span under the retry's and its own part of the path.
    paths = [
        (dict(s.attributes or {}).get("kumiko.step.path"), s.status.status_code)
        for s in spans.get_finished_spans()
        if s.name != "kumiko.workflow.segment" and dict(s.attributes or {}).get("kumiko.handler") == "obs:retried"
    ]
    assert paths[:2] == [("0/do/#1/0", StatusCode.ERROR), ("0", StatusCode.UNSET)]
    (attempt,) = [r for r in caplog.records if hasattr(r, "kumiko_attempt")]
    assert (attempt.levelno, attempt.name) == (logging.INFO, "kumiko_typed")
    fields = (attempt.kumiko_handler, attempt.kumiko_attempt, attempt.kumiko_times)  # type: ignore[attr-defined]
    assert fields == ("obs:retried", 1, 2)
    assert "ZeroDivisionError" in attempt.getMessage() and "division" not in attempt.getMessage()


def test_a_dead_row_is_a_warning_and_an_idle_pass_a_debug_record(
    app_on: Callable[..., App], user: User, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.respond = lambda _i, _p: (404, {})
    app = app_on([f], clock=FakeClock(T0))
    with caplog.at_level(logging.DEBUG, logger="kumiko_typed"):
        app.run_worker(once=True)
        assert app.dispatch(dying, Order((), receiver.url("/gone")), user=user) == Ok(None)
        (item,) = app.outbox()
        app.run_worker(once=True)
    passes = [r for r in caplog.records if hasattr(r, "kumiko_counts")]
    assert [(r.levelno, r.kumiko_counts["dead"]) for r in passes] == [  # type: ignore[attr-defined]
        (logging.DEBUG, 0),
        (logging.INFO, 1),
    ]
    (dead,) = [r for r in caplog.records if hasattr(r, "kumiko_outbox_id")]
    assert (dead.levelno, dead.name) == (logging.WARNING, "kumiko_typed")
    fields = (dead.kumiko_outbox_id, dead.kumiko_kind, dead.kumiko_attempts)  # type: ignore[attr-defined]
    assert fields == (str(item.id), "webhook", 1)
    assert "HTTP 404 Not Found" in dead.getMessage()
