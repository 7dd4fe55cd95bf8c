"""An outside audit of deploys that keep suspended runs (docs/workflows.md, "Changing a
workflow that has suspended runs"), on SQLite and PostgreSQL: each deploy below changes
one thing while runs of the first release wait in ``wait``, ``wait_for_event``, ``retry``
or inside a ``for_each``.  A run either resumes (a compatible change), or is stranded,
intact, with a reason that names the step or class, listed alike by ``app.check_runs()``
— never failed, never resumed with values its code cannot read, never left without a word.

The cases tests/workflows/test_workflow_deploys.py, test_workflow_deploy_edits.py and
test_workflow_classes_across_deploys.py already cover (a wait renamed, a key added before
it, an awaited event replaced, a stored class dropped) are not repeated here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, Ok, User, fail, manual, ok
from kumiko_typed._tables import workflow_runs
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ADA = User(id=uuid.UUID(int=1), tenant_id=uuid.UUID(int=11))


def _order_class(fields: dict[str, Any]) -> type[Any]:
    """One version of the payload class ``Order``, as a deploy of this module defines it."""
    cls = attrs.make_class("Order", fields, frozen=True)
    cls.__module__ = __name__
    cls.__qualname__ = "Order"
    return cls


ORDER = _order_class({"n": attrs.field(type=int), "items": attrs.field(type=list[int], factory=list)})
#: ``Order`` after a deploy: a field added with a default, one without, one removed, one retyped.
ORDER_VARIANTS = {
    "field-with-default": _order_class(
        {
            "n": attrs.field(type=int),
            "items": attrs.field(type=list[int], factory=list),
            "rush": attrs.field(type=bool, default=False),
        }
    ),
    "field-without-default": _order_class(
        {"n": attrs.field(type=int), "items": attrs.field(type=list[int]), "rush": attrs.field(type=bool)}
    ),
    "field-removed": _order_class({"n": attrs.field(type=int)}),
    "field-retyped": _order_class({"n": attrs.field(type=str), "items": attrs.field(type=list[int], factory=list)}),
    "field-widened": _order_class(
        {"n": attrs.field(type=int | str), "items": attrs.field(type=list[float], factory=list)}
    ),
    "items-retyped": _order_class({"n": attrs.field(type=int), "items": attrs.field(type=list[str], factory=list)}),
}


@attrs.frozen
class Paid:
    n: int


@attrs.frozen
class Refunded:
    n: int


class AudBox(Entity):
    __tablename__ = "aud_box"
    note: Mapped[str]


def feature(version: str) -> Feature[Any]:
    """The workflows as deployed in ``version`` (``v1``: what the runs start under).

    ``wait-removed``: ``napper``'s wait ``nap`` gone; ``longer-nap``: ``nap`` waits a day;
    ``quote-text``: its ``quote`` is text now, not an integer; ``rekeyed``: ``waiter``'s
    ``key`` and ``event_key`` add 100; ``wait-kind``: ``nap`` is a ``wait_for_event`` now;
    ``fewer-tries``: ``retrier`` makes 1 attempt, not 3; ``retry-as-wait``: ``retrier``'s
    ``again`` is a ``wait`` now; ``body-key``: ``looper``'s body
    computes a key before its wait; ``loop-renamed``: ``looper``'s loop is ``line``, not
    ``item``; ``no-refunds``: the ``Refunded`` event class and its handler removed;
    ``ORDER_VARIANTS`` keys: ``Order`` changed."""
    order = ORDER_VARIANTS.get(version, ORDER)
    f: Feature[Any] = Feature("aud")
    f.entity(AudBox)
    events = [Paid] if version == "no-refunds" else [Paid, Refunded]
    for cls in events:
        f.event(cls)
        f.write_handler(
            cls.__name__.lower(),
            f.pipeline(order)
            .create("box", AudBox, data=lambda c: AudBox(note="x"))
            .append_event(AudBox, id=lambda c: c.steps["box"].id, event=lambda c, cls=cls: cls(c.payload.n))
            .return_(lambda c: ok(None)),
        )

    quote = (lambda c: "ten") if version == "quote-text" else (lambda c: 10)
    napper: Any = f.workflow_pipeline(order).compute("quote", quote)
    if version == "wait-kind":
        napper = napper.wait_for_event("nap", Paid, key=lambda c: c.payload.n, event_key=lambda e: e.n, timeout="PT1H")
    elif version != "wait-removed":
        napper = napper.wait("P1D" if version == "longer-nap" else "PT1M", name="nap")
    f.workflow(
        "nap-runner" if version == "workflow-renamed" else "napper",
        trigger=manual(order),
        pipeline=napper.return_(lambda c: ok(repr(c.steps["quote"]))),
    )

    shift = 100 if version == "rekeyed" else 0
    f.workflow(
        "waiter",
        trigger=manual(order),
        pipeline=f.workflow_pipeline(order)
        .wait_for_event("got", Paid, key=lambda c: c.payload.n + shift, event_key=lambda e: e.n + shift, timeout="PT1H")
        .return_(lambda c: ok(None if c.steps["got"] is None else c.steps["got"].n)),
    )

    def body(b: Any) -> Any:
        if version == "body-key":
            b = b.compute("doubled", lambda c: c.scope["item"] * 2)
        return b.wait("PT1M", name="tick").compute("seen", lambda c: c.scope["item"])

    loop = "line" if version == "loop-renamed" else "item"
    f.workflow(
        "looper",
        trigger=manual(order),
        pipeline=f.workflow_pipeline(order)
        .for_each(loop, over=lambda c: c.payload.items, do=body)
        .return_(lambda c: ok(c.steps["seen"])),
    )
    retrier: Any = f.workflow_pipeline(order)
    if version == "retry-as-wait":
        retrier = retrier.wait("PT1M", name="again")
    else:
        retrier = retrier.retry(
            times=1 if version == "fewer-tries" else 3,
            base_delay=timedelta(minutes=1),
            do=lambda b: b.get_one("none", lambda c: sa.select(AudBox).where(AudBox.note == "never")),
            name="again",
        )
    f.workflow("retrier", trigger=manual(order), pipeline=retrier.return_(lambda c: ok(None)))

    # Two unnamed waits, a keyless step between: ``@wait`` and ``@wait~2``.
    twice: Any = f.workflow_pipeline(order).compute("quote", lambda c: 10)
    if version not in ("first-wait-removed", "waits-named"):
        twice = twice.wait("PT1M")
    if version == "waits-named":
        twice = twice.wait("PT1M", name="first")
    twice = twice.guard(lambda c: True, otherwise=lambda c: fail("unprocessable", "never"))
    twice = twice.wait("PT1H", name="second") if version == "waits-named" else twice.wait("PT1H")
    if version == "wait-appended":
        twice = twice.wait("PT2H")
    f.workflow(
        "twice",
        trigger=manual(order),
        pipeline=twice.compute("done", lambda c: version).return_(lambda c: ok(c.steps["done"])),
        renamed={"@wait": "first", "@wait~2": "second"} if version == "waits-named" else None,
    )

    def arm(b: Any) -> Any:
        return (b if version == "first-wait-removed" else b.wait("PT1M")).wait("PT1H")

    inner: Any = f.workflow_pipeline(order).branch(when=lambda c: True, on_true=arm)
    if version == "branch-appended":
        inner = inner.branch(when=lambda c: False, on_true=lambda b: b.compute("never", lambda c: 0))
    f.workflow("inner-twice", trigger=manual(order), pipeline=inner.return_(lambda c: ok(version)))
    return f


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def deploy(db_url: str, clock: FakeClock) -> Iterator[Callable[[str], App]]:
    """``deploy(version)``: an App of that version on the one database."""
    apps: list[App] = []

    def build(version: str) -> App:
        app = App([feature(version)], database_url=db_url, clock=clock)
        if not apps:
            app.create_all()
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.dispose()


def _start(app: App, workflow: str, n: int = 4, items: list[int] | None = None) -> uuid.UUID:
    order = app.workflows[f"aud:{workflow}"]
    return app.start_workflow(order, ORDER(n, items or []), user=ADA)


def _stranded(app: App, clock: FakeClock, run_id: uuid.UUID, path: str, reason: str) -> None:
    """The check lists the run with ``reason``; a worker strands it there with the same
    reason, and passes it by after."""
    (problem,) = app.check_runs()
    assert (problem.path, problem.reason, problem.run_ids) == (path, reason, (run_id,))
    clock.advance(hours=2)
    assert app.run_worker(once=True)["resumed"] == 0
    info = run_info(app, run_id)
    assert (info.status, info.path, info.error) == ("suspended", path, {"code": "stranded", "message": reason})
    assert app.run_worker(once=True)["resumed"] == 0


def test_removing_the_wait_a_run_is_in_strands_it_and_the_release_with_it_resumes_it(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    v1 = deploy("v1")
    run_id = _start(v1, "napper")
    _stranded(deploy("wait-removed"), clock, run_id, "nap", 'step "nap" at nap no longer exists')
    assert deploy("v1").run_worker(once=True)["resumed"] == 1
    assert v1.result(v1.workflows["aud:napper"], run_id, user=ADA) == Ok("10")


def test_a_wait_made_longer_keeps_the_wake_time_its_waiting_runs_stored(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """A run waiting a minute in ``nap`` when a deploy makes it a day wakes after its
    minute; a run that reaches ``nap`` under the new code waits the day."""
    v1 = deploy("v1")
    old = _start(v1, "napper")
    v2 = deploy("longer-nap")
    assert v2.check_runs() == []
    new = _start(v2, "napper")
    clock.advance(minutes=1)
    assert v2.run_worker(once=True)["resumed"] == 1
    assert v2.result(v2.workflows["aud:napper"], old, user=ADA) == Ok("10")
    assert run_info(v2, new).wake_at == T0 + timedelta(days=1)


def test_a_wait_replaced_by_a_wait_for_event_of_the_same_name_strands_the_run(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    v1 = deploy("v1")
    run_id = _start(v1, "napper")
    reason = 'the step at nap is now workflow.wait_for_event "nap", the run waits in a workflow.wait step'
    _stranded(deploy("wait-kind"), clock, run_id, "nap", reason)
    assert deploy("v1").run_worker(once=True)["resumed"] == 1


def test_a_stored_key_whose_type_a_deploy_changed_is_handed_over_as_stored(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """A plain value (no class) carries no type: the new code's resolvers after the wait get
    the integer the run stored, as documented ("code the resolvers after P call must accept
    what the old runs stored"); only new runs compute the text."""
    v1 = deploy("v1")
    old = _start(v1, "napper")
    v2 = deploy("quote-text")
    assert v2.check_runs() == []
    new = _start(v2, "napper")
    clock.advance(minutes=1)
    assert v2.run_worker(once=True)["resumed"] == 2
    assert v2.result(v2.workflows["aud:napper"], old, user=ADA) == Ok("10")
    assert v2.result(v2.workflows["aud:napper"], new, user=ADA) == Ok("'ten'")


def test_a_retry_that_now_makes_fewer_attempts_still_makes_the_one_its_run_waits_for(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """The run suspended to make attempt 2 of 3; the deploy lowers ``times`` to 1.  The
    run makes that attempt (its path names it) and, as it fails, that failure is the last:
    the run fails with the step's own error, not with a deploy's."""
    v1 = deploy("v1")
    run_id = _start(v1, "retrier")
    assert run_info(v1, run_id).path == "again/#2"
    v2 = deploy("fewer-tries")
    assert v2.check_runs() == []
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 1
    info = run_info(v2, run_id)
    assert (info.status, info.error) == ("failed", {"code": "not_found", "message": 'step "none": no row matched'})


def test_a_retry_replaced_by_a_wait_of_the_same_name_strands_the_run_saying_so(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """The run waits to make attempt 2 of ``again``; the deploy makes ``again`` a wait.  The
    reason read 'workflow.wait "again" at again/#2 has no #2': true, and no help."""
    v1 = deploy("v1")
    run_id = _start(v1, "retrier")
    assert run_info(v1, run_id).path == "again/#2"
    reason = (
        'the step at again is now workflow.wait "again", not a workflow.retry: attempt #2, which the run is'
        " suspended to make, does not exist; deploy the workflow with the retry back, or cancel the run"
    )
    v2 = deploy("retry-as-wait")
    (problem,) = v2.check_runs()
    assert (problem.path, problem.reason, problem.run_ids) == ("again/#2", reason, (run_id,))
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    info = run_info(v2, run_id)
    assert (info.status, info.path, info.error["code"], info.error["message"]) == (
        "suspended",
        "again/#2",
        "stranded",
        reason,
    )
    assert info.error["last_attempts"] == "1"  # the retry's own error kept, for the release with it
    assert deploy("v1").run_worker(once=True)["resumed"] == 1
    info = run_info(v1, run_id)
    assert (info.status, info.path) == ("suspended", "again/#3")  # attempt 2 made (and failed), as before


def _unnamed_moved(part: str, then: int, now: int) -> str:
    return (
        f"{part} at {part} was one of {then} unnamed wait steps there, and {now} are there now: it may name another"
        f" step than the one the run stopped at; {_UNNAMED_FIX.format(part)}"
    )


_UNNAMED_FIX = (
    "unnamed steps are found by their order (@wait, @wait~2), so one added or removed beside them makes a stored"
    " path name another; deploy the workflow with its unnamed wait steps as they were, or give them name= and map"
    ' the old places to the names (renamed={{"{}": ...}}), or cancel the run'
)


def test_removing_the_first_of_two_unnamed_waits_strands_the_runs_at_either_instead_of_moving_them(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """``@wait`` and ``@wait~2`` are found by their order: with the first removed, a run
    waiting in it resumed at the other (``@wait`` now names it) and completed without
    its hour's wait, and the check listed nothing; a run in ``@wait~2`` was stranded
    with no word of why.  The run now stores how many unnamed waits stood there: both
    are stranded, with the fix, as the check says; the release with the waits named
    and the old places mapped resumes each where it stopped."""
    v1 = deploy("v1")
    first = _start(v1, "twice")
    second = _start(v1, "twice", n=5)
    clock.advance(minutes=1)
    assert v1.run_worker(once=True)["resumed"] == 2
    first_late = _start(v1, "twice", n=6)  # stops in @wait while the others wait in @wait~2
    assert [run_info(v1, r).path for r in (first, second, first_late)] == ["@wait~2", "@wait~2", "@wait"]

    v2 = deploy("first-wait-removed")
    gone = 'step "@wait~2" at @wait~2 no longer exists: ' + _UNNAMED_FIX.format("@wait~2")
    moved = _unnamed_moved("@wait", 2, 1)
    checked = [(p.workflow, p.path, p.reason, p.run_ids) for p in v2.check_runs()]
    assert checked == [
        ("aud:twice", "@wait", moved, (first_late,)),
        ("aud:twice", "@wait~2", gone, tuple(sorted((first, second)))),
    ]
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    for run_id, path, reason in ((first, "@wait~2", gone), (first_late, "@wait", moved)):
        info = run_info(v2, run_id)
        assert (info.status, info.path, info.error) == ("suspended", path, {"code": "stranded", "message": reason})

    v3 = deploy("waits-named")
    assert v3.check_runs() == []
    assert v3.run_worker(once=True)["resumed"] == 3
    assert [run_info(v3, r).status for r in (first, second)] == ["completed", "completed"]
    assert run_info(v3, first_late).path == "second"  # its first wait done, it waits in the second
    clock.advance(hours=2)
    assert v3.run_worker(once=True)["resumed"] == 1
    assert v3.result(v3.workflows["aud:twice"], first_late, user=ADA) == Ok("waits-named")


def test_an_unnamed_wait_added_after_two_strands_their_runs_and_other_edits_do_not(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """A third unnamed wait after the two moves no run, but which of them was added cannot
    be told from the count: the runs are stranded with the fix (name them first, as the
    docs say).  Edits that keep the count — a resolver, another workflow's steps, a key
    added elsewhere — strand none of them."""
    v1 = deploy("v1")
    run_id = _start(v1, "twice")
    for version in ("quote-text", "longer-nap", "wait-removed", "body-key"):
        assert deploy(version).check_runs() == [], version
    (problem,) = deploy("wait-appended").check_runs()
    assert (problem.path, problem.reason, problem.run_ids) == ("@wait", _unnamed_moved("@wait", 2, 3), (run_id,))


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        (
            "first-wait-removed",
            "@wait at @branch/on_true/@wait was one of 2 unnamed wait steps there, and 1 are there now: it may"
            " name another step than the one the run stopped at; " + _UNNAMED_FIX.format("@wait"),
        ),
        (
            "branch-appended",
            "@branch at @branch/on_true/@wait was one of 1 unnamed branch steps there, and 2 are there now: it may"
            " name another step than the one the run stopped at; "
            + _UNNAMED_FIX.replace("@wait", "@branch").replace("wait steps", "branch steps").format("@branch"),
        ),
    ],
)
def test_unnamed_steps_added_or_removed_at_any_level_of_the_path_strand_the_run(
    deploy: Callable[[str], App], clock: FakeClock, version: str, reason: str
) -> None:
    """The run waits in the first unnamed wait of an unnamed branch's arm: the count is
    kept per level, the arm's waits and the pipeline's branches alike."""
    v1 = deploy("v1")
    run_id = _start(v1, "inner-twice")
    assert run_info(v1, run_id).path == "@branch/on_true/@wait"
    _stranded(deploy(version), clock, run_id, "@branch/on_true/@wait", reason)
    assert deploy("v1").run_worker(once=True)["resumed"] == 1
    assert run_info(v1, run_id).path == "@branch/on_true/@wait~2"


def test_a_run_stored_without_the_count_of_its_unnamed_siblings_resumes_as_before(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """A release before the count stored none: its runs are found by their order, as then
    (here at the wait that is now first), not stranded by a count they lack."""
    v1 = deploy("v1")
    run_id = _start(v1, "twice")
    with v1.engine.begin() as conn:
        state = conn.execute(sa.select(workflow_runs.c.state).where(workflow_runs.c.run_id == run_id)).scalar_one()
        assert state.pop("siblings") == [2]
        conn.execute(sa.update(workflow_runs).where(workflow_runs.c.run_id == run_id).values(state=state))
    v2 = deploy("first-wait-removed")
    assert v2.check_runs() == []
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 1
    assert v2.result(v2.workflows["aud:twice"], run_id, user=ADA) == Ok("first-wait-removed")


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("body-key", 'key "doubled" needed at item/do/#1/tick was not stored'),
        ("loop-renamed", 'step "item" at item/do/#1/tick no longer exists'),
    ],
)
def test_a_loop_whose_body_or_name_changed_around_a_waiting_iteration_strands_it_there(
    deploy: Callable[[str], App], clock: FakeClock, version: str, reason: str
) -> None:
    """A run waiting in iteration 1 of 3: a key computed before the body's wait, or the
    loop renamed, strands it at that iteration; the release it started under resumes it
    there, not from the first item."""
    v1 = deploy("v1")
    run_id = _start(v1, "looper", items=[1, 2, 3])
    clock.advance(minutes=1)
    v1.run_worker(once=True)
    assert run_info(v1, run_id).path == "item/do/#1/tick"
    _stranded(deploy(version), clock, run_id, "item/do/#1/tick", reason)
    assert run_info(v1, run_id).steps["seen"] == 1  # intact
    back = deploy("v1")
    assert back.run_worker(once=True)["resumed"] == 1  # item 2 of 3, then the last wait
    assert run_info(back, run_id).path == "item/do/#2/tick"
    clock.advance(minutes=1)
    back.run_worker(once=True)
    assert back.result(back.workflows["aud:looper"], run_id, user=ADA) == Ok(3)


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("field-with-default", None),
        ("field-without-default", "Order now requires 'rush', which it lacks"),
        ("field-removed", "it has 'items', which Order no longer has"),
        ("field-retyped", "its 'n' holds an int, and Order now says str"),
        ("field-widened", None),  # int | str takes the int, list[float] the ints (PEP 484)
        ("items-retyped", "its 'items' holds a list, and Order now says list[str]"),
    ],
)
def test_a_payload_class_changed_under_a_waiting_run(
    deploy: Callable[[str], App], clock: FakeClock, version: str, reason: str | None
) -> None:
    v1 = deploy("v1")
    run_id = _start(v1, "napper", items=[1, 2])
    v2 = deploy(version)
    if reason is None:  # compatible: the stored payload reads with the default
        assert v2.check_runs() == []
        clock.advance(minutes=1)
        assert v2.run_worker(once=True)["resumed"] == 1
        assert v2.result(v2.workflows["aud:napper"], run_id, user=ADA) == Ok("10")
        return
    full = (
        f"at step nap: the stored state cannot be read: stored {__name__}.Order cannot be rebuilt: {reason}; "
        "a deploy with the class as the run stored it resumes the run"
    )
    _stranded(v2, clock, run_id, "nap", full)
    assert deploy("v1").run_worker(once=True)["resumed"] == 1


def test_a_rolling_deploy_leaves_a_run_the_new_payload_class_stored_to_the_new_workers(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """The new release adds ``rush`` (with a default) to ``Order`` and starts a run with
    it; a worker of the old release, still running, cannot rebuild that payload: it
    strands the run (never resumes it without ``rush``), and a new worker resumes it.
    The old worker's own run is resumed by either."""
    v1 = deploy("v1")
    old = _start(v1, "napper")
    v2 = deploy("field-with-default")
    new = v2.start_workflow(v2.workflows["aud:napper"], ORDER_VARIANTS["field-with-default"](7, [], True), user=ADA)
    clock.advance(minutes=1)
    assert v1.run_worker(once=True)["resumed"] == 1  # its own
    info = run_info(v1, new)
    assert (info.status, info.error["code"]) == ("suspended", "stranded")
    assert "it has 'rush', which Order no longer has" in info.error["message"]
    assert v1.check_runs()[0].run_ids == (new,)  # what a rollback would leave waiting
    assert v2.run_worker(once=True)["resumed"] == 1
    assert (run_info(v2, new).status, run_info(v2, old).status) == ("completed", "completed")


def test_an_old_worker_leaves_a_run_whose_payload_field_the_new_release_retyped_to_the_new_workers(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """A rolling deploy that makes ``Order.n`` text: a worker of the old release, still
    running, meets a run the new one started with ``n="4"``.  ``__init__`` takes the text
    (attrs checks no types), so before the codec checked the fields the old worker resumed
    the run with a text where its code says ``int``.  It strands it now, saying so (never
    the value), and a new worker resumes it; each release's check lists the other's run."""
    v1 = deploy("v1")
    old = _start(v1, "napper")
    v2 = deploy("field-retyped")
    new = v2.start_workflow(v2.workflows["aud:napper"], ORDER_VARIANTS["field-retyped"]("4"), user=ADA)
    clock.advance(minutes=1)
    assert v1.run_worker(once=True)["resumed"] == 1  # its own
    info = run_info(v1, new)
    assert (info.status, info.path, info.error["code"]) == ("suspended", "nap", "stranded")
    why = "stored test_deploy_audit.Order cannot be rebuilt: its 'n' holds a str, and Order now says int"
    assert why in info.error["message"]
    assert '"4"' not in info.error["message"] and "'4'" not in info.error["message"]
    assert [p.run_ids for p in v1.check_runs()] == [(new,)]  # what a rollback would leave waiting
    assert v2.run_worker(once=True)["resumed"] == 1
    assert (run_info(v2, new).status, run_info(v2, old).status) == ("completed", "completed")


def test_a_removed_event_class_whose_events_are_in_flight_stops_nothing(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """``Refunded`` events appended by the old release, not yet read by any worker's feed,
    when the new release no longer registers the class: the feed passes them by (no
    workflow of this release can want them) and goes on to the ``Paid`` after them."""
    v1 = deploy("v1")
    run_id = _start(v1, "waiter", n=5)
    v1.run_worker(once=True)
    assert v1.dispatch(v1.handlers["aud:refunded"], ORDER(5, []), user=ADA) == Ok(None)
    assert v1.dispatch(v1.handlers["aud:paid"], ORDER(5, []), user=ADA) == Ok(None)
    v2 = deploy("no-refunds")
    assert v2.check_runs() == []
    assert v2.run_worker(once=True)["resumed"] == 1
    assert v2.result(v2.workflows["aud:waiter"], run_id, user=ADA) == Ok(5)


def test_a_changed_key_function_matches_events_by_the_new_key_against_the_stored_one(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """``key`` and ``event_key`` changed together (both add 100): a run that waited before
    the deploy keeps the key it stored (5), and the new ``event_key`` computes 105 for its
    event, so that event does not wake it: it times out with ``None``, and the check
    cannot see it (resolvers are code).  docs/workflows.md says so: keep a key's value for
    the events of runs already waiting.  A run started after the deploy matches."""
    v1 = deploy("v1")
    old = _start(v1, "waiter", n=5)
    v1.run_worker(once=True)
    v2 = deploy("rekeyed")
    assert v2.check_runs() == []
    new = v2.start_workflow(v2.workflows["aud:waiter"], ORDER(6, []), user=ADA)
    for n in (5, 6):
        assert v2.dispatch(v2.handlers["aud:paid"], ORDER(n, []), user=ADA) == Ok(None)
    assert v2.run_worker(once=True)["resumed"] == 1
    assert v2.result(v2.workflows["aud:waiter"], new, user=ADA) == Ok(6)
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 1
    assert v2.result(v2.workflows["aud:waiter"], old, user=ADA) == Ok(None)


def test_a_renamed_workflow_leaves_the_old_names_runs_untouched_and_the_check_lists_them(
    deploy: Callable[[str], App], clock: FakeClock
) -> None:
    """A workflow's name is its identity: renamed, its runs are of a workflow this release
    does not register.  No worker touches them (not stranded, not failed); the check
    lists them with what to do; the release with the old name resumes them."""
    v1 = deploy("v1")
    run_id = _start(v1, "napper")
    before = run_info(v1, run_id)
    v2 = deploy("workflow-renamed")
    (problem,) = v2.check_runs()
    assert (problem.workflow, problem.run_ids) == ("aud:napper", (run_id,))
    assert problem.reason == (
        "workflow aud:napper is not registered in this App: its runs wait, untouched, until a deploy"
        " registers it again (or cancel them: app.cancel_run, kumiko-typed runs cancel)"
    )
    clock.advance(hours=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    assert run_info(v2, run_id) == before
    assert v2.runs(stranded=True) == []
    assert deploy("v1").run_worker(once=True)["resumed"] == 1
