"""A foreign key whose value is another tenant's row is refused as a reference to a row
that does not exist is — the same ``validation_error``, word for word, on both
databases — for every way a run writes: ``create``, ``update``, ``append_event``'s
projector, a projection upsert, ``c.db`` statements (one row, many rows, the ORM's
flush) and a deferred key.  The foreign key alone only checked that the id exists
somewhere, so tenant A's row could point at tenant B's (and B could then not delete it)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data, run_info
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Failure, Feature, User, manual, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]


class TrShelf(Entity):
    __tablename__ = "tr_shelf"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "id", name="tr_shelf_tenant_id"),)
    label: Mapped[str] = mapped_column(sa.String(40))


class TrBook(Entity):
    __tablename__ = "tr_book"
    title: Mapped[str] = mapped_column(sa.String(100))
    shelf_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("tr_shelf.id"), default=None)
    spare_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("tr_shelf.id"), default=None)


class TrLoan(Entity):
    """A key checked at COMMIT."""

    __tablename__ = "tr_loan"
    shelf_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("tr_shelf.id", deferrable=True, initially="DEFERRED"))


class TrTag(Entity):
    """A key of two columns, the tenant's own among them (what a schema may do itself)."""

    __tablename__ = "tr_tag"
    __table_args__ = (sa.ForeignKeyConstraint(["tenant_id", "shelf_id"], ["tr_shelf.tenant_id", "tr_shelf.id"]),)
    shelf_id: Mapped[uuid.UUID] = mapped_column()


#: A read model (no Entity) that refers to an aggregate's row.
tr_shelf_stats = sa.Table(
    "tr_shelf_stats",
    Entity.metadata,
    sa.Column("shelf_id", sa.Uuid, sa.ForeignKey("tr_shelf.id"), primary_key=True),
    sa.Column("books", sa.Integer, nullable=False),
)


@attrs.frozen
class AddShelf:
    label: str


@attrs.frozen
class AddBook:
    title: str
    shelf: uuid.UUID | None = None
    spare: uuid.UUID | None = None


@attrs.frozen
class Move:
    book: uuid.UUID
    shelf: uuid.UUID


@attrs.frozen
class AddBooks:
    shelves: list[uuid.UUID]


@attrs.frozen
class Drop:
    shelf: uuid.UUID


@attrs.frozen
class Moved:
    shelf: uuid.UUID


def _raw(c: Any, shelf: uuid.UUID, title: str = "raw") -> dict[str, object]:
    now = c.now
    return {
        "id": uuid.uuid4(),
        "tenant_id": c.user.tenant_id,
        "version": 1,
        "created_at": now,
        "updated_at": now,
        "title": title,
        "shelf_id": shelf,
        "spare_id": None,
    }


def _feature() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("tr_library", projections=[tr_shelf_stats])
    f.entity(TrShelf)
    f.entity(TrBook)
    f.entity(TrLoan)
    f.entity(TrTag)
    f.event(Moved, name="tr-moved")

    @f.projector(TrBook, Moved)
    def moved(row: TrBook, event: Moved) -> None:
        row.shelf_id = event.shelf

    h = {
        "shelf": f.write_handler(
            "shelf",
            f.pipeline(AddShelf)
            .create("shelf", TrShelf, data=lambda c: TrShelf(label=c.payload.label))
            .return_(lambda c: ok(c.steps["shelf"].id)),
        ),
        "book": f.write_handler(
            "book",
            f.pipeline(AddBook)
            .create(
                "book",
                TrBook,
                data=lambda c: TrBook(title=c.payload.title, shelf_id=c.payload.shelf, spare_id=c.payload.spare),
            )
            .return_(lambda c: ok(c.steps["book"].id)),
        ),
        "move": f.write_handler(
            "move",
            f.pipeline(Move)
            .update(
                "book",
                TrBook,
                id=lambda c: c.payload.book,
                changes=lambda c: {"shelf_id": c.payload.shelf},
                skip_optimistic_lock=True,
            )
            .return_(lambda c: ok(c.steps["book"].version)),
        ),
        "move_event": f.write_handler(
            "move_event",
            f.pipeline(Move)
            .append_event(TrBook, id=lambda c: c.payload.book, event=lambda c: Moved(c.payload.shelf))
            .return_(lambda c: ok(1)),
        ),
        "stats": f.write_handler(
            "stats",
            f.pipeline(Move)
            .unsafe_projection_upsert(
                tr_shelf_stats, on=["shelf_id"], row=lambda c: {"shelf_id": c.payload.shelf, "books": 1}
            )
            .return_(lambda c: ok(1)),
        ),
        # c.db: one row with its values in the statement, many rows (executemany), the ORM's flush.
        "raw_one": f.write_handler(
            "raw_one",
            f.pipeline(Move)
            .compute("n", lambda c: c.db.execute(sa.insert(TrBook).values(_raw(c, c.payload.shelf))).rowcount)
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "raw_many": f.write_handler(
            "raw_many",
            f.pipeline(AddBooks)
            .compute(
                "n",
                lambda c: c.db.execute(sa.insert(TrBook.__table__), [_raw(c, s) for s in c.payload.shelves]).rowcount,
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "raw_values": f.write_handler(
            "raw_values",
            f.pipeline(AddBooks)
            .compute(
                "n",
                lambda c: c.db.execute(sa.insert(TrBook).values([_raw(c, s) for s in c.payload.shelves])).rowcount,
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "raw_crossing": f.write_handler(
            "raw_crossing",
            f.pipeline(Move)
            .compute(
                "n",
                lambda c: (
                    c.db.execute(
                        sa.insert(TrBook).values(_raw(c, c.payload.shelf)).execution_options(kumiko_all_tenants=True)
                    ).rowcount
                ),
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "raw_caught": f.write_handler(
            "raw_caught",
            f.pipeline(Move).compute("n", _caught).return_(lambda c: ok(c.steps["n"])),
        ),
        # A row of tenant B (its tenant_id set) that a run of A writes: B's rows are its own.
        "raw_for_b": f.write_handler(
            "raw_for_b",
            f.pipeline(Move)
            .compute(
                "n",
                lambda c: (
                    c.db.execute(
                        sa.insert(TrBook).values({**_raw(c, c.payload.shelf), "tenant_id": c.payload.book})
                    ).rowcount
                ),
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "tags": f.write_handler(
            "tags",
            f.pipeline(AddBooks)
            .compute(
                "n",
                lambda c: (
                    c.db.execute(
                        sa.insert(TrTag.__table__),
                        [{**_raw(c, s), "shelf_id": s} for s in c.payload.shelves],
                    ).rowcount
                ),
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "raw_update": f.write_handler(
            "raw_update",
            f.pipeline(Move)
            .compute(
                "n",
                lambda c: (
                    c.db.execute(
                        sa.update(TrBook).where(TrBook.id == c.payload.book).values(shelf_id=c.payload.shelf)
                    ).rowcount
                ),
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
        "orm_add": f.write_handler(
            "orm_add",
            f.pipeline(Move).compute("n", _orm_add).return_(lambda c: ok(c.steps["n"])),
        ),
        "lend": f.write_handler(
            "lend",
            f.pipeline(Drop)
            .create("loan", TrLoan, data=lambda c: TrLoan(shelf_id=c.payload.shelf))
            .return_(lambda c: ok(c.steps["loan"].id)),
        ),
        "drop": f.write_handler(
            "drop",
            f.pipeline(Drop)
            .compute(
                "n",
                lambda c: (
                    c.db.execute(
                        sa.delete(TrShelf).where(TrShelf.id == c.payload.shelf, TrShelf.tenant_id == c.user.tenant_id)
                    ).rowcount
                ),
            )
            .return_(lambda c: ok(c.steps["n"])),
        ),
    }
    h["shelve"] = f.workflow(
        "shelve",
        trigger=manual(AddBook),
        pipeline=f.workflow_pipeline(AddBook)
        .wait("PT1M")
        .create("book", TrBook, data=lambda c: TrBook(title=c.payload.title, shelf_id=c.payload.shelf)),
    )
    h["lend_later"] = f.workflow(
        "lend_later",
        trigger=manual(Drop),
        pipeline=f.workflow_pipeline(Drop)
        .wait("PT1M")
        .create("loan", TrLoan, data=lambda c: TrLoan(shelf_id=c.payload.shelf)),
    )
    return f, h


def _caught(c: Any) -> int:
    """A step that swallows the refusal of its write."""
    try:
        c.db.execute(sa.insert(TrBook).values(_raw(c, c.payload.shelf)))
    except Exception:
        return 0
    return 1


def _orm_add(c: Any) -> int:
    book = TrBook(title="orm", shelf_id=c.payload.shelf)
    book.tenant_id, book.version, book.created_at, book.updated_at = c.user.tenant_id, 1, c.now, c.now
    c.db.add(book)
    c.db.flush()
    return 1


def _answer(result: object) -> tuple[str, str, object]:
    """A Failure as the client sees it, its error ids blanked."""
    failure = failure_of(result)
    ids = re.compile(r"[0-9a-f]{32}")
    details = failure.details
    if isinstance(details, list):
        details = [{k: "ID" if k == "error_id" else v for k, v in p.items()} for p in details]
    return failure.code, ids.sub("ID", failure.message), details


def _count(app: App, table: Any) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


Two = tuple[App, dict[str, Any], User, User, uuid.UUID, uuid.UUID]


@pytest.fixture
def two(app_on: AppOn, make_user: Callable[..., User]) -> Two:
    """The app, its handlers, tenants A and B, and a shelf of each."""
    f, h = _feature()
    app = app_on([f])
    a, b = make_user(), make_user()
    return (
        app,
        h,
        a,
        b,
        ok_data(app.dispatch(h["shelf"], AddShelf("A's"), user=a)),
        ok_data(app.dispatch(h["shelf"], AddShelf("B's"), user=b)),
    )


def _refused_as_missing(app: App, handler: Any, other: object, missing: object, user: User) -> Failure:
    """``other`` (a payload naming B's row) is answered as ``missing`` (naming no row)
    is: a validation_error, the same words, nothing written."""
    before = (_count(app, TrBook.__table__), _count(app, tr_shelf_stats), _count(app, TrLoan.__table__))
    events = _count(app, sa.table("kumiko_events"))
    refused = app.dispatch(handler, other, user=user)
    assert _answer(refused) == _answer(app.dispatch(handler, missing, user=user))
    assert failure_of(refused, "validation_error").http_status == 400
    after = (_count(app, TrBook.__table__), _count(app, tr_shelf_stats), _count(app, TrLoan.__table__))
    assert (after, _count(app, sa.table("kumiko_events"))) == (before, events)
    return failure_of(refused)


def test_create_referring_to_another_tenants_row_is_refused_as_a_missing_row(two: Two) -> None:
    app, h, a, _b, mine, theirs = two
    refused = _refused_as_missing(app, h["book"], AddBook("x", theirs), AddBook("x", uuid.uuid4()), a)
    [problem] = refused.details  # type: ignore[misc]
    assert {k: problem[k] for k in ("path", "column", "message")} == {
        "path": "$.shelf",
        "column": "tr_book.shelf_id",
        "message": "must refer to an existing row of tr_shelf",
    }
    assert str(theirs) not in refused.message and "tenant" not in refused.message
    # Two keys set: named alike whichever of them is another tenant's or missing.
    _refused_as_missing(app, h["book"], AddBook("x", mine, theirs), AddBook("x", mine, uuid.uuid4()), a)
    assert ok_data(app.dispatch(h["book"], AddBook("x", mine, mine), user=a))


def test_update_and_a_projector_referring_to_another_tenants_row_are_refused(two: Two) -> None:
    app, h, a, _b, mine, theirs = two
    book = ok_data(app.dispatch(h["book"], AddBook("x"), user=a))  # on no shelf: the move to mine changes it
    for name in ("move", "move_event"):
        _refused_as_missing(app, h[name], Move(book, theirs), Move(book, uuid.uuid4()), a)
    assert ok_data(app.dispatch(h["move"], Move(book, mine), user=a)) == 2


def test_a_projection_row_referring_to_another_tenants_row_is_refused(two: Two) -> None:
    app, h, a, _b, mine, theirs = two
    _refused_as_missing(app, h["stats"], Move(uuid.uuid4(), theirs), Move(uuid.uuid4(), uuid.uuid4()), a)
    assert ok_data(app.dispatch(h["stats"], Move(uuid.uuid4(), mine), user=a)) == 1


def test_c_db_writes_referring_to_another_tenants_row_are_refused(two: Two) -> None:
    app, h, a, _b, mine, theirs = two
    for name in ("raw_one", "orm_add"):
        _refused_as_missing(app, h[name], Move(uuid.uuid4(), theirs), Move(uuid.uuid4(), uuid.uuid4()), a)
    # Many rows, the bad one last: the good rows do not let it through.
    _refused_as_missing(app, h["raw_many"], AddBooks([mine, mine, theirs]), AddBooks([mine, mine, uuid.uuid4()]), a)
    book = ok_data(app.dispatch(h["book"], AddBook("x", mine), user=a))
    _refused_as_missing(app, h["raw_update"], Move(book, theirs), Move(book, uuid.uuid4()), a)
    _refused_as_missing(app, h["raw_values"], AddBooks([mine, theirs, mine]), AddBooks([mine, uuid.uuid4(), mine]), a)
    before = _count(app, TrBook.__table__)
    ok_data(app.dispatch(h["raw_many"], AddBooks([mine, mine]), user=a))  # rowcount: -1 on psycopg's executemany
    assert _count(app, TrBook.__table__) == before + 2
    assert ok_data(app.dispatch(h["raw_update"], Move(book, mine), user=a)) == 1


def test_a_deferred_key_to_another_tenants_row_is_refused_at_commit_as_a_missing_row(two: Two) -> None:
    """The key is checked at COMMIT: another tenant's row is refused there, with the
    answer a row that does not exist gets (no step, no column): an answer at the step
    would tell the two apart.  With an idempotency key too, which keeps no answer."""
    app, h, a, _b, mine, theirs = two
    _refused_as_missing(app, h["lend"], Drop(theirs), Drop(uuid.uuid4()), a)
    for key in ("k", "k"):
        refused = app.dispatch(h["lend"], Drop(theirs), user=a, idempotency_key=key)
        assert _answer(refused) == _answer(app.dispatch(h["lend"], Drop(uuid.uuid4()), user=a))
    assert _count(app, sa.table("kumiko_idempotency_keys")) == 0
    assert ok_data(app.dispatch(h["lend"], Drop(mine), user=a))


def test_the_other_tenant_deletes_the_row_that_was_referred_to(two: Two) -> None:
    """No reference to B's shelf got in, so B's delete of it is not blocked by A."""
    app, h, a, b, _mine, theirs = two
    failure_of(app.dispatch(h["book"], AddBook("x", theirs), user=a), "validation_error")
    failure_of(app.dispatch(h["raw_one"], Move(uuid.uuid4(), theirs), user=a), "validation_error")
    assert ok_data(app.dispatch(h["drop"], Drop(theirs), user=b)) == 1
    # B's own reference still blocks B's delete, as a foreign key does.
    shelf = ok_data(app.dispatch(h["shelf"], AddShelf("B's 2"), user=b))
    ok_data(app.dispatch(h["book"], AddBook("y", shelf), user=b))
    failure_of(app.dispatch(h["drop"], Drop(shelf), user=b), "validation_error")


def test_a_run_crosses_tenants_only_on_purpose(app_on: AppOn, make_user: Callable[..., User]) -> None:
    """A sysadmin's call_feature as a user of B writes as B (B's rows are B's own), so
    does a statement writing a row whose tenant_id is B's; a statement that says
    ``kumiko_all_tenants`` is not checked, as a read that says it is not filtered."""
    f, h = _feature()
    ops: Feature[Any] = Feature("tr_ops", requires=["call_feature"])
    b = make_user()
    as_b = ops.write_handler(
        "as_b",
        ops.pipeline(AddBook)
        .call_feature("book", h["book"], payload=lambda c: c.payload, as_user=lambda c: b)
        .return_(lambda c: ok(c.steps["book"])),
    )
    app = app_on([f, ops])
    a = make_user()
    theirs = ok_data(app.dispatch(h["shelf"], AddShelf("B's"), user=b))
    failure_of(app.dispatch(h["book"], AddBook("a's", theirs), user=a), "validation_error")
    assert ok_data(app.dispatch(as_b, AddBook("b's", theirs), user=make_user("sysadmin")))
    # A row's own tenant_id is what its references are checked against.
    ok_data(app.dispatch(h["raw_for_b"], Move(b.tenant_id, theirs), user=a))
    mine = ok_data(app.dispatch(h["shelf"], AddShelf("A's"), user=a))
    _refused_as_missing(app, h["raw_for_b"], Move(b.tenant_id, mine), Move(b.tenant_id, uuid.uuid4()), a)
    before = _count(app, TrBook.__table__)
    ok_data(app.dispatch(h["raw_crossing"], Move(uuid.uuid4(), theirs), user=a))
    assert _count(app, TrBook.__table__) == before + 1


def test_a_refusal_a_step_caught_still_fails_the_run(two: Two) -> None:
    """The statement was sent (its row is in the transaction): the run fails and rolls
    back, whatever the step made of the refusal."""
    app, h, a, _b, mine, theirs = two
    before = _count(app, TrBook.__table__)
    refused = failure_of(app.dispatch(h["raw_caught"], Move(uuid.uuid4(), theirs), user=a), "validation_error")
    lead = "handler tr_library:raw_caught: tr_book.shelf_id must refer to an existing row"
    assert refused.message.startswith(lead), refused.message
    assert _count(app, TrBook.__table__) == before
    assert ok_data(app.dispatch(h["raw_caught"], Move(uuid.uuid4(), mine), user=a)) == 1


def test_a_key_of_two_columns_is_checked_as_one(two: Two) -> None:
    """(tenant_id, shelf_id): the database refuses another tenant's shelf itself; one row
    and many, answered as a missing shelf."""
    app, h, a, _b, mine, theirs = two
    for shelves in ([theirs], [mine, theirs]):
        missing = [s if s == mine else uuid.uuid4() for s in shelves]
        _refused_as_missing(app, h["tags"], AddBooks(shelves), AddBooks(missing), a)
    ok_data(app.dispatch(h["tags"], AddBooks([mine, mine]), user=a))
    assert _count(app, TrTag.__table__) == 2


def test_a_workflow_segment_referring_to_another_tenants_row_fails_its_run_alone(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """A resumed segment in a worker's pass (the run's user's tenant): its run fails as
    for a missing row, and a deferred key as the validation_error a COMMIT's refusal
    is (it was an internal_error naming OtherTenantRow); the pass goes on."""
    f, h = _feature()
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    a, b = make_user(), make_user()
    mine = ok_data(app.dispatch(h["shelf"], AddShelf("A's"), user=a))
    theirs = ok_data(app.dispatch(h["shelf"], AddShelf("B's"), user=b))
    runs = {
        "book_theirs": app.start_workflow(h["shelve"], AddBook("x", theirs), user=a),
        "book_missing": app.start_workflow(h["shelve"], AddBook("x", uuid.uuid4()), user=a),
        "loan_theirs": app.start_workflow(h["lend_later"], Drop(theirs), user=a),
        "book_mine": app.start_workflow(h["shelve"], AddBook("x", mine), user=a),
        "loan_mine": app.start_workflow(h["lend_later"], Drop(mine), user=a),
    }
    clock.advance(minutes=2)
    app.run_worker(once=True)
    info = {name: run_info(app, run) for name, run in runs.items()}
    assert {name: i.status for name, i in info.items()} == {
        "book_theirs": "failed",
        "book_missing": "failed",
        "loan_theirs": "failed",
        "book_mine": "completed",
        "loan_mine": "completed",
    }
    ids = re.compile(r"[0-9a-f]{32}")
    theirs_error, missing_error = info["book_theirs"].error, info["book_missing"].error
    assert theirs_error["code"] == missing_error["code"] == "validation_error"
    assert ids.sub("ID", theirs_error["message"]) == ids.sub("ID", missing_error["message"])
    loan_error = info["loan_theirs"].error
    assert loan_error["code"] == "validation_error", loan_error
    assert loan_error["message"].startswith(
        "in the segment from step @wait: a value refers to a row that does not exist; pass the id of a row that exists"
    ), loan_error
    assert "tenant" not in loan_error["message"] and "OtherTenantRow" not in loan_error["message"]
    assert (_count(app, TrBook.__table__), _count(app, TrLoan.__table__)) == (1, 1)


@pytest.mark.slow
def test_a_write_of_more_references_than_a_statement_takes_parameters_is_checked_in_batches(two: Two) -> None:
    """Before: the check of many rows' references read every value in one ``IN``, more
    parameters than PostgreSQL takes (65535): a bulk write referring to the tenant's own
    rows was an ``internal_error`` there."""
    app, h, a, _b, _mine, theirs = two
    at = datetime(2024, 1, 1, tzinfo=UTC)
    shelves = [uuid.uuid4() for _ in range(66_000)]
    with app.engine.begin() as conn:  # the tenant's own rows, written outside any run
        conn.execute(
            sa.insert(TrShelf.__table__),
            [
                {"id": s, "tenant_id": a.tenant_id, "version": 1, "created_at": at, "updated_at": at, "label": "s"}
                for s in shelves
            ],
        )
    before = _count(app, TrBook.__table__)
    ok_data(app.dispatch(h["raw_many"], AddBooks(shelves), user=a))
    assert _count(app, TrBook.__table__) == before + len(shelves)
    # Another tenant's row past the first batch (of 5,000 values) is still found.
    _refused_as_missing(
        app, h["raw_many"], AddBooks([*shelves[:5_000], theirs]), AddBooks([*shelves[:5_000], uuid.uuid4()]), a
    )
