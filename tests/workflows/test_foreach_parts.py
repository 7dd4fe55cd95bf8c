"""A suspended run's long values and loop items are stored once, as parts beside its row
(``kumiko_workflow_parts``): each segment of a ``for_each`` whose body suspends stored
the run's values and the loop's items whole again, so the loop cost its item count
squared.  Then (stored form 2) each segment still read, decoded and compared them whole:
now a loop's items are pages read as its iterations reach them, a long value is read
when a step asks for it.  Both databases: what a segment reads and sends no longer grows
with the loop's length, resumed steps see the values they saw (types and order), items
changed in place keep their change, nested loops, a loop in a branch, retries in a loop,
an empty loop and entity items work, a page that cannot be read leaves the run as it
stood, and runs stored by the release before parts
(tests/workflows/foreach_before_parts.json), by the release of stored form 2
(tests/workflows/foreach_parts_form2.json) and by that of form 4, a loop over a step value
storing its items twice (tests/workflows/foreach_parts_form4.json), resume."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import _foreach_parts_app as before_parts  # by the module name its stored payload names
import attrs
import pytest
import sqlalchemy as sa
from _sql_log import bytes_read, statements
from _support import run_info
from sqlalchemy.orm import Mapped

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed._tables import workflow_parts, workflow_runs, workflow_waits
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
FIXTURE = Path(__file__).with_name("foreach_before_parts.json")
FORM2 = Path(__file__).with_name("foreach_parts_form2.json")
FORM4 = Path(__file__).with_name("foreach_parts_form4.json")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@attrs.frozen
class Go:
    n: int


@attrs.frozen
class FpPaid:
    ref: int


class FpSku(Entity):
    __tablename__ = "fp_sku"
    name: Mapped[str]
    price: Mapped[Decimal]


def _items(n: int) -> list[dict[str, Any]]:
    return [{"name": f"item {i}", "count": i, "id": uuid.UUID(int=i)} for i in range(n)]


def _sent(app: App) -> Callable[[], int]:
    """The bytes of the parameters of every INSERT and UPDATE ``app`` sends from now on
    (JSON as the driver gets it), read and reset by the function returned."""
    sent = [0]

    def size(value: object) -> int:
        if isinstance(value, str | bytes):
            return len(value)
        if hasattr(value, "obj"):  # psycopg's Jsonb
            return len((getattr(value, "dumps", None) or json.dumps)(value.obj))
        return 0

    def count(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            for row in parameters if many else [parameters]:
                sent[0] += sum(size(v) for v in (row.values() if isinstance(row, dict) else row))

    sa.event.listen(app.engine, "before_cursor_execute", count)

    def taken() -> int:
        got, sent[0] = sent[0], 0
        return got

    return taken


def _parts(app: App, run_id: uuid.UUID) -> list[str]:
    with app.engine.connect() as conn:
        stmt = sa.select(workflow_parts.c.name).where(workflow_parts.c.run_id == run_id)
        return sorted(conn.execute(stmt).scalars())


def _pages(name: str, count: int) -> list[str]:
    """The parts of a loop's ``count`` items stored as pages of 64 as ``name``."""
    return [f"{name}/{k}" for k in range(-(-count // 64))]


def _until_done(app: App, run_id: uuid.UUID, clock: FakeClock, each: Callable[[], None] = lambda: None) -> Any:
    while run_info(app, run_id).status == "suspended":
        each()
        clock.advance(minutes=1)
        app.run_worker(once=True)
    return run_info(app, run_id)


def test_the_bytes_a_segment_stores_do_not_grow_with_the_loop(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """The segment at iteration 10 of a loop over 20 items and of one over 2,000 sends
    the same (it sent the run's values and the items whole: about 500 KB for 2,000)."""
    f = Feature("fpbytes")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("items", lambda c: _items(c.payload.n))
        .for_each("item", over=lambda c: c.steps["items"], do=lambda b: b.compute("n", lambda c: 1).wait("PT1M")),
    )
    app = app_on([f], clock=clock)
    taken = _sent(app)
    sizes = {}
    for n in (20, 2_000):
        run_id = app.start_workflow(flow, Go(n), user=user)
        for _ in range(9):
            clock.advance(minutes=1)
            app.run_worker(once=True)
        taken()
        clock.advance(minutes=1)
        app.run_worker(once=True)
        sizes[n] = taken()
        assert run_info(app, run_id).path == "item/do/#10/@wait"
        assert _parts(app, run_id) == sorted(_pages("p/items", n))  # the value's pages, the loop's items
        app.cancel_run(run_id, user=user)
    assert abs(sizes[2_000] - sizes[20]) <= 16, sizes  # the path's digits, the time's text
    assert sizes[20] < 1_000, sizes
    # A cancelled run keeps its parts (get_run shows its values); purged, they go with it.
    assert _parts(app, run_id) == sorted(_pages("p/items", 2_000))
    assert run_info(app, run_id).steps["items"] == _items(2_000)
    assert app.purge_runs(older_than=timedelta(0)) == 2
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(workflow_parts)).scalar_one() == 0


def test_a_long_value_changed_in_place_keeps_its_change_across_suspensions(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A loop body that appends to a long list of an earlier step (rather than returning a
    new value) keeps each append across the waits, as when the run stored its values whole:
    a part is written again when it encodes otherwise, not only when a step replaced it."""
    f = Feature("fpinplace")

    def note(c: Any) -> int:
        c.steps["log"].append(f"done {c.scope['item']['count']}")
        return len(c.steps["log"])

    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("log", lambda c: ["x" * 100 for _ in range(40)])  # over 2 KB: a part
        .for_each("item", over=lambda c: _items(c.payload.n), do=lambda b: b.compute("n", note).wait("PT1M"))
        .return_(lambda c: ok(list(c.steps["log"][40:]))),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(5), user=user)
    assert "v/log" in _parts(app, run_id)
    info = _until_done(app, run_id, clock)
    assert info.status == "completed", info
    assert app.result(flow, run_id, user=user) == ok([f"done {i}" for i in range(5)])


def test_a_start_stores_its_row_and_parts_in_one_transaction(
    app_on: Callable[..., App], clock: FakeClock, user: User, db_url: str
) -> None:
    """A manual start whose first segment suspends in a long loop writes its row and then
    its parts: both or neither.  On PostgreSQL a start whose steps sent nothing sends its
    row alone (``_lone_statement``); with parts after it, it must not, or a refused part
    left a suspended run whose parts were never stored."""
    f = Feature("fpatomic")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).for_each(
            "item", over=lambda c: _items(c.payload.n), do=lambda b: b.compute("n", lambda c: 1).wait("PT1M")
        ),
    )
    app = app_on([f], clock=clock)
    with app.engine.begin() as conn:  # the database refuses every part
        if db_url.startswith("sqlite"):
            conn.exec_driver_sql(
                "CREATE TRIGGER fp_refuse BEFORE INSERT ON kumiko_workflow_parts"
                " BEGIN SELECT RAISE(ABORT, 'no parts today'); END"
            )
        else:
            conn.exec_driver_sql(
                "CREATE FUNCTION fp_refuse() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'no parts today'; END $$"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER fp_refuse BEFORE INSERT ON kumiko_workflow_parts"
                " FOR EACH ROW EXECUTE FUNCTION fp_refuse()"
            )
    run_id = app.start_workflow(flow, Go(200), user=user)
    info = run_info(app, run_id)
    assert info.status == "failed" and info.error is not None, info
    assert info.error["code"] == "unstorable_state", info.error
    assert _parts(app, run_id) == []


def test_a_long_loop_resumes_with_exactly_its_values_and_shows_them(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """Decimal, UUID and datetime items in attrs classes, in order, iteration after
    iteration; ``get_run`` and ``runs`` show the values the run holds while its long ones
    are parts, and a completed run holds them all in its row again."""
    seen: list[str] = []
    f = Feature("fpvalues")

    def see(c: Any) -> int:
        seen.append(repr(c.scope["line"]))
        return len(c.steps["lines"])

    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("lines", lambda c: before_parts.lines(c.payload.n))
        .for_each("line", over=lambda c: c.steps["lines"], do=lambda b: b.compute("seen", see).wait("PT1M"))
        .compute("last", lambda c: c.steps["lines"][-1]),
    )
    app = app_on([f], clock=clock, value_types=[before_parts.Line])
    expected = before_parts.lines(30)
    run_id = app.start_workflow(flow, Go(30), user=user)

    def shown() -> None:
        assert _parts(app, run_id) == ["p/lines/0"]
        steps = run_info(app, run_id).steps
        assert steps["lines"] == expected
        assert list(steps) == ["seen", "lines"]  # the run's order (as stored whole), a part among them
        [listed] = [r for r in app.runs() if r.run_id == run_id]
        assert listed.steps == run_info(app, run_id).steps
        assert app.check_runs() == []

    info = _until_done(app, run_id, clock, shown)
    assert info.status == "completed", info
    assert seen == [repr(line) for line in expected]
    assert info.steps["lines"] == expected and info.steps["last"] == expected[-1]
    assert _parts(app, run_id) == []


def test_nested_loops_keep_only_the_parts_of_where_the_run_stands(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """An inner loop's items are a part per outer iteration: the one of an outer
    iteration done with is dropped, not kept for the run's life."""
    long = "x" * 1_500
    f = Feature("fpnested")
    pipeline = (
        f.workflow_pipeline(Go)
        .for_each(
            "outer",
            over=lambda c: [f"{o}{long}" for o in range(3)],
            do=lambda b: b.for_each(
                "inner",
                over=lambda c: [(c.scope["outer"][0], i, long) for i in range(3)],
                do=lambda d: d.wait("PT1M").compute(
                    "pairs", lambda c: (c.steps["pairs"] or ()) + ((c.scope["outer"][0], c.scope["inner"][1]),)
                ),
            ),
        )
        .compute("scope_after", lambda c: sorted(c.scope))
    )
    flow = f.workflow("nested", trigger=manual(Go), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(0), user=user)
    stood: list[tuple[str, list[str]]] = []
    info = _until_done(app, run_id, clock, lambda: stood.append((run_info(app, run_id).path, _parts(app, run_id))))
    assert info.status == "completed", info
    assert info.steps["pairs"] == tuple((str(o), i) for o in range(3) for i in range(3))
    assert info.steps["scope_after"] == []
    assert [path for path, _ in stood] == [f"outer/do/#{o}/inner/do/#{i}/@wait" for o in range(3) for i in range(3)]
    for path, parts in stood:
        outer = path.split("/")[2]
        assert parts == sorted(["i/outer/0", f"i/outer/do/{outer}/inner/0"]), (path, parts)
    assert _parts(app, run_id) == []


def test_a_loop_in_a_branch_with_a_retry_an_empty_loop_and_entity_items(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A for_each in a branch arm over entities, whose body retries (its first attempt
    fails, the run suspends until the retry), then a for_each over nothing."""
    attempts: dict[str, int] = {}
    f = Feature("fpbranch")
    f.entity(FpSku)

    def charge(c: Any) -> str:
        sku = c.scope["sku"]
        attempts[sku.name] = attempts.get(sku.name, 0) + 1
        if attempts[sku.name] == 1:
            raise RuntimeError("first attempt")
        return f"{sku.name}:{sku.price}"

    skus = [FpSku(name=f"sku {i:02} " + "y" * 100, price=Decimal(f"{i}.50")) for i in range(25)]
    pipeline = (
        f.workflow_pipeline(Go)
        .compute("skus", lambda c: skus)
        .branch(
            when=lambda c: c.payload.n > 0,
            on_true=lambda t: t.for_each(
                "sku",
                over=lambda c: c.steps["skus"],
                do=lambda d: d.retry(
                    times=2, base_delay=timedelta(minutes=1), do=lambda r: r.compute("charged", charge)
                ).compute("all", lambda c: (c.steps["all"] or ()) + (c.steps["charged"],)),
            ),
        )
        .for_each("none", over=lambda c: [], do=lambda d: d.wait("PT1M"))
        .compute("prices", lambda c: [s.price for s in c.steps["skus"]])
    )
    flow = f.workflow("branch", trigger=manual(Go), pipeline=pipeline)
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(1), user=user)
    assert run_info(app, run_id).path == "@branch/on_true/sku/do/#0/@retry/#2"
    assert _parts(app, run_id) == ["p/skus/0"]
    info = _until_done(app, run_id, clock)
    assert info.status == "completed", info
    assert attempts == {s.name: 2 for s in skus}
    assert info.steps["all"] == tuple(f"{s.name}:{s.price}" for s in skus)
    assert info.steps["prices"] == [Decimal(f"{i}.50") for i in range(25)]
    assert [str(p) for p in info.steps["prices"]][:2] == ["0.50", "1.50"]


def test_a_segment_reads_the_page_it_runs_not_the_loop_nor_the_long_value(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A segment of a loop over a step value of 200 items and of one of 5,000 reads the
    same from the parts: the page of the iteration it runs (one row), not the value and
    the items whole (two rows growing with the loop: about 640 KB for 5,000), and sends
    the same.  At a page's end it reads the next page; a step after the loop still sees
    the value whole."""
    f = Feature("fpread")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("items", lambda c: _items(c.payload.n))
        .for_each("item", over=lambda c: c.steps["items"], do=lambda b: b.compute("n", lambda c: 1).wait("PT1M"))
        .compute("count", lambda c: len(c.steps["items"])),
    )
    app = app_on([f], clock=clock)
    sent = _sent(app)
    figures: dict[int, list[tuple[int, int, int]]] = {}
    for n in (200, 5_000):
        run_id = app.start_workflow(flow, Go(n), user=user)
        for _ in range(9):
            clock.advance(minutes=1)
            app.run_worker(once=True)
        figures[n] = []
        for _ in range(2):
            sent()
            clock.advance(minutes=1)
            parts = workflow_parts.name
            with bytes_read(app.engine, parts) as read:
                app.run_worker(once=True)
            figures[n].append((read.get(parts, 0), read.get(f"{parts} rows", 0), sent()))
        assert run_info(app, run_id).path == "item/do/#11/@wait"
        if n == 200:
            info = _until_done(app, run_id, clock)
            assert info.status == "completed" and info.steps["count"] == 200, info
            assert info.steps["items"] == _items(200)
        else:
            app.cancel_run(run_id, user=user)
    for (read_small, rows_small, sent_small), (read_long, rows_long, sent_long) in zip(
        figures[200], figures[5_000], strict=True
    ):
        assert (read_long, rows_long) == (read_small, rows_small), figures
        assert abs(sent_long - sent_small) <= 4, figures  # the digits of the item count
        assert rows_small == 1 and 1_000 < read_small < 10_000 and sent_small < 1_000, figures


def test_items_changed_in_place_keep_their_change_across_pages(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A body that changes its item in place before a wait sees the change after it, on
    every page of a loop over 150 items (three pages): a page read is written again when
    it encodes otherwise; an item of a page no iteration read is as stored."""
    f = Feature("fpmutate")

    def mark(c: Any) -> int:
        c.scope["item"]["marks"] = [*c.scope["item"].get("marks", []), c.scope["item"]["count"]]
        return 1

    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go).for_each(
            "item",
            over=lambda c: _items(c.payload.n),
            do=lambda b: (
                b.compute("m", mark)
                .wait("PT1M")
                .compute("saw", lambda c: (c.steps["saw"] or ()) + (tuple(c.scope["item"]["marks"]),))
            ),
        ),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(150), user=user)
    assert _parts(app, run_id) == _pages("i/item", 150)
    info = _until_done(app, run_id, clock)
    assert info.status == "completed", info
    assert info.steps["saw"] == tuple((i,) for i in range(150))
    assert _parts(app, run_id) == []


@pytest.mark.parametrize("damage", ["class", "page"])
def test_a_page_that_cannot_be_read_leaves_the_run_where_it_stood(
    app_on: Callable[..., App], clock: FakeClock, user: User, damage: str
) -> None:
    """A page is read only when an iteration reaches it, inside the segment: one naming a
    class this deploy does not have strands the run, a damaged one fails it, as when the
    worker found that before resuming it; either way the segment is undone (the run
    stands where it stood, its event wait kept) and the check says the same."""
    f = Feature(f"fpdamage{damage}")
    f.event(FpPaid)

    def note(c: Any) -> int:
        return len(c.steps["lines"])

    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("lines", lambda c: before_parts.lines(c.payload.n))
        .for_each(
            "line",
            over=lambda c: c.steps["lines"],
            do=lambda b: b.compute("seen", note).wait_for_event(
                "paid", FpPaid, key=lambda c: 1, event_key=lambda e: e.ref, timeout="PT1M"
            ),
        ),
    )
    app = app_on([f], clock=clock, value_types=[before_parts.Line])
    run_id = app.start_workflow(flow, Go(70), user=user)
    page = "p/lines/0"  # the value's page, which the loop reads
    with app.engine.begin() as conn:
        where = (workflow_parts.c.run_id == run_id) & (workflow_parts.c.name == page)
        items = conn.execute(sa.select(workflow_parts.c.value).where(where)).scalar_one()
        items = [{**item, "c": "gone.Line"} for item in items] if damage == "class" else items[:3]
        conn.execute(sa.update(workflow_parts).where(where).values(value=items))
    clock.advance(minutes=2)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    assert info.path == "line/do/#0/paid", info
    assert info.error is not None, info
    if damage == "class":
        assert info.status == "suspended" and info.error["code"] == "stranded", info
        assert "gone.Line" in info.error["message"], info.error
        with app.engine.connect() as conn:
            waits = conn.execute(sa.select(sa.func.count()).where(workflow_waits.c.run_id == run_id)).scalar_one()
        assert waits == 1
        [found] = app.check_runs()  # reads every page: says what the worker found
        assert found.run_ids == (run_id,) and found.reason == info.error["message"], found
    else:
        assert info.status == "failed" and info.error["code"] == "unstorable_state", info
        assert info.error["message"] == (
            f"at step line/do/#0/paid: the stored state cannot be read: its part {page} is not a page of 64 loop items"
        )


def test_a_retry_keeps_what_its_failed_attempt_changed_in_place_in_a_long_value(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A long value read only when a step asks: a ``retry`` in the loop copies the values
    before its attempt with the value unread, the attempt reads it, appends to it and
    fails; the values put back give the value the attempt changed, as with the values all
    read (the run stored two appends per item: the failed attempt's and the next)."""
    f = Feature("fpretry")
    attempts: dict[int, int] = {}

    def append(c: Any) -> int:
        count = c.scope["item"]["count"]
        attempts[count] = attempts.get(count, 0) + 1
        c.steps["log"].append(f"{count}.{attempts[count]}")
        if attempts[count] == 1:
            raise RuntimeError("first attempt")
        return len(c.steps["log"])

    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("log", lambda c: ["x" * 100 for _ in range(40)])  # over 2 KB: a part
        .for_each(
            "item",
            over=lambda c: _items(c.payload.n),
            do=lambda b: b.wait("PT1M").retry(
                times=2, base_delay=timedelta(0), do=lambda r: r.compute("appended", append)
            ),
        )
        .return_(lambda c: ok(list(c.steps["log"][40:]))),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(3), user=user)
    assert "v/log" in _parts(app, run_id)
    info = _until_done(app, run_id, clock)
    assert info.status == "completed", info
    assert app.result(flow, run_id, user=user) == ok([f"{i}.{a}" for i in range(3) for a in (1, 2)])


def test_a_missing_value_part_fails_the_run_when_a_step_needs_it(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """A value stored as a part is read when a step asks for it: its part gone (a damaged
    database), the run goes on while no step does, and fails, its segment undone, at the
    one that does (here the end, which stores every value in the row); the pre-deploy
    check, which reads every part, says so from the start."""
    f = Feature("fpmissing")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("items", lambda c: _items(c.payload.n))
        # A copy: its items stored apart from the value, which no iteration reads.
        .for_each("item", over=lambda c: list(c.steps["items"]), do=lambda b: b.wait("PT1M")),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(30), user=user)
    assert _parts(app, run_id) == ["i/item/0", "v/items"]
    with app.engine.begin() as conn:
        conn.execute(sa.delete(workflow_parts).where(workflow_parts.c.name == "v/items"))
    [found] = app.check_runs()
    missing = "the stored state cannot be read: its part v/items is missing from kumiko_workflow_parts"
    assert found.reason == missing, found
    info = _until_done(app, run_id, clock)
    assert info.status == "failed" and info.error is not None, info
    assert info.path == "item/do/#29/@wait", info  # the last segment undone
    assert info.error == {
        "code": "unstorable_state",
        "message": f"at step item/do/#29/@wait: {missing}",
    }


@pytest.mark.parametrize("outcome", ["goes on", "fails"])
def test_a_step_that_catches_everything_cannot_hide_an_unreadable_value(
    app_on: Callable[..., App], clock: FakeClock, user: User, outcome: str
) -> None:
    """A step that reads a damaged value in a bare ``except:`` (``BaseException``) takes
    the read's signal for its own: the segment still does not go on as if it had read
    (neither stored nor failed with what the step made of it), and fails as damaged,
    undone, as without the catch."""
    f = Feature(f"fpswallow{outcome.replace(' ', '')}")

    def count(c: Any) -> int:
        try:
            return len(c.steps["items"])
        except BaseException:  # what the test is about
            if outcome == "fails":
                raise ValueError("no items") from None
            return -1

    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("items", lambda c: _items(c.payload.n))
        .wait("PT1M")
        .compute("count", count)
        .wait("PT1M"),
    )
    app = app_on([f], clock=clock)
    run_id = app.start_workflow(flow, Go(30), user=user)
    assert "v/items" in _parts(app, run_id)
    with app.engine.begin() as conn:
        conn.execute(sa.delete(workflow_parts).where(workflow_parts.c.name == "v/items"))
    clock.advance(minutes=2)
    app.run_worker(once=True)
    info = run_info(app, run_id)
    missing = "the stored state cannot be read: its part v/items is missing from kumiko_workflow_parts"
    assert info.status == "failed" and info.path == "@wait", info  # where it stood
    assert info.error == {"code": "unstorable_state", "message": f"at step @wait: {missing}"}, info
    assert "count" not in info.steps, info


def test_the_check_reads_the_parts_of_many_runs_at_once(
    app_on: Callable[..., App], clock: FakeClock, user: User
) -> None:
    """``check_runs`` reads the parts of the runs it decodes in one query per chunk of
    runs, not one per run."""
    f = Feature("fpcheck")
    flow = f.workflow(
        "loop",
        trigger=manual(Go),
        pipeline=f.workflow_pipeline(Go)
        .compute("lines", lambda c: before_parts.lines(c.payload.n))
        .for_each("line", over=lambda c: c.steps["lines"], do=lambda b: b.wait("PT1M")),
    )
    app = app_on([f], clock=clock, value_types=[before_parts.Line])
    for _ in range(5):
        app.start_workflow(flow, Go(40), user=user)
    with statements(app.engine) as sent:
        assert app.check_runs() == []
    assert len([s for s in sent if s.startswith("SELECT") and f"FROM {workflow_parts.name}" in s]) == 1, sent


# --- a run stored by the release before parts ----------------------------------------------


@pytest.fixture
def seen_before() -> Iterator[list[str]]:
    before_parts.SEEN.clear()
    yield before_parts.SEEN
    before_parts.SEEN.clear()


def test_a_run_stored_before_parts_resumes_where_it_stood(db_url: str, seen_before: list[str]) -> None:
    """The fixture's run waits in iteration 3 of 40, stored whole in its row by the
    release before: it resumes there with the items it stored (each iteration sees its
    item, types included), stores its long values as parts from then on, and completes."""
    _resumes_where_it_stood(db_url, json.loads(FIXTURE.read_text()), seen_before)


def test_a_run_stored_in_form_2_resumes_where_it_stood(db_url: str, seen_before: list[str]) -> None:
    """The fixture's run waits in iteration 3 of 40, stored by the release of stored form
    2: its long value and the loop's items whole, one part each.  It resumes there with
    the items it stored (each iteration sees its item, types included), stores them as
    pages from then on (the part of form 2 dropped), and completes."""
    fixture = json.loads(FORM2.read_text())
    assert fixture["row"]["state"]["format"] == 2 and sorted(fixture["parts"]) == ["l/line", "v/lines"]
    _resumes_where_it_stood(db_url, fixture, seen_before)


def test_a_run_stored_in_form_4_resumes_where_it_stood(db_url: str, seen_before: list[str]) -> None:
    """The fixture's run waits in iteration 3 of 40, stored by the release of stored form
    4: the value its loop runs over as a part, and the loop's items again, as pages.  It
    resumes there, each iteration seeing its item, the two stored apart until it
    completes (its next suspension stores them as they were)."""
    fixture = json.loads(FORM4.read_text())
    assert fixture["row"]["state"]["format"] == 4 and sorted(fixture["parts"]) == ["i/line/0", "v/lines"]
    _resumes_where_it_stood(db_url, fixture, seen_before)


def _resumes_where_it_stood(db_url: str, fixture: dict[str, Any], seen_before: list[str]) -> None:
    """Insert the fixture's run (its row, and its parts if it stored some) and run it to
    its end from iteration 3 of 40: as stored before, then with pages and long values."""
    app = before_parts.app(db_url)
    try:
        run_id = uuid.UUID(fixture["run_id"])
        row = {**fixture["row"], "run_id": run_id, "wake_at": T0, "error": None}
        with app.engine.begin() as conn:
            conn.execute(sa.insert(workflow_runs), {**row, "created_at": T0, "updated_at": T0})
            stored = fixture.get("parts", {})
            if stored:
                parts = [{"run_id": run_id, "name": name, "value": value} for name, value in stored.items()]
                conn.execute(sa.insert(workflow_parts), parts)
        expected = before_parts.lines(before_parts.LINES)
        assert fixture["seen"] == [repr(line) for line in expected[:4]]
        assert run_info(app, run_id).steps["lines"] == expected  # shown as before
        assert app.check_runs() == []
        app.run_worker(once=True)
        assert run_info(app, run_id).path == "line/do/#4/@wait"
        assert _parts(app, run_id) == ["i/line/0", "v/lines"]
        while run_info(app, run_id).status == "suspended":
            app.run_worker(once=True)
        info = run_info(app, run_id)
        assert info.status == "completed", info
        assert seen_before == [repr(line) for line in expected[4:]]  # iteration 3 is not run again
        assert info.steps["after"] == [sum(line.price for line in expected), 40]
        assert str(info.steps["after"][0]) == "784.00"
        assert _parts(app, run_id) == []
    finally:
        app.dispose()
