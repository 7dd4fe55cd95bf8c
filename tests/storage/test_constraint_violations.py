"""A row the input makes break a constraint of its table — a foreign key to a row that does
not exist, a CHECK, a NOT NULL — is the client's ``validation_error`` naming the step, the
column, the payload field and the constraint, the same on both databases.  It was an
``internal_error`` (500).  The message never quotes SQL or values (the log has them);
nothing is written, in a dispatch, with an idempotency key, or in a workflow run."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import failure_of, ok_data, run_info
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column

from kumiko_typed import App, Entity, Feature, User, manual, ok
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]


class CvShelf(Entity):
    __tablename__ = "cv_shelf"
    label: Mapped[str] = mapped_column(sa.String(40))


class CvBook(Entity):
    __tablename__ = "cv_book"
    __table_args__ = (sa.CheckConstraint("pages > 0", name="cv_book_pages_positive"),)
    title: Mapped[str] = mapped_column(sa.String(100))
    pages: Mapped[int] = mapped_column()
    shelf_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("cv_shelf.id"), default=None)


class CvCrate(Entity):
    """Two foreign keys and an unnamed CHECK."""

    __tablename__ = "cv_crate"
    qty: Mapped[int] = mapped_column(sa.CheckConstraint("qty >= 0"))
    shelf_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("cv_shelf.id"), default=None)
    spare_id: Mapped[uuid.UUID | None] = mapped_column(sa.ForeignKey("cv_shelf.id"), default=None)


@attrs.frozen
class AddShelf:
    label: str


@attrs.frozen
class AddBook:
    title: str | None
    pages: int
    shelf: uuid.UUID | None = None


@attrs.frozen
class Reshelve:
    book: uuid.UUID
    pages: int
    shelf: uuid.UUID | None


@attrs.frozen
class AddCrate:
    qty: int
    shelf: uuid.UUID | None = None
    spare: uuid.UUID | None = None


def _book(c: Any) -> CvBook:
    return CvBook(title=c.payload.title, pages=c.payload.pages, shelf_id=c.payload.shelf)


def _library() -> tuple[Feature[Any], dict[str, Any]]:
    f: Feature[Any] = Feature("cv_library")
    f.entity(CvShelf)
    f.entity(CvBook)
    f.entity(CvCrate)
    h = {
        "shelf": f.write_handler(
            "shelf",
            f.pipeline(AddShelf)
            .create("shelf", CvShelf, data=lambda c: CvShelf(label=c.payload.label))
            .return_(lambda c: ok(c.steps["shelf"].id)),
        ),
        "book": f.write_handler(
            "book",
            f.pipeline(AddBook).create("book", CvBook, data=_book).return_(lambda c: ok(c.steps["book"].id)),
        ),
        "reshelve": f.write_handler(
            "reshelve",
            f.pipeline(Reshelve)
            .update(
                "book",
                CvBook,
                id=lambda c: c.payload.book,
                changes=lambda c: {"pages": c.payload.pages, "shelf_id": c.payload.shelf},
                skip_optimistic_lock=True,
            )
            .return_(lambda c: ok(c.steps["book"].version)),
        ),
        "crate": f.write_handler(
            "crate",
            f.pipeline(AddCrate)
            .create(
                "crate",
                CvCrate,
                data=lambda c: CvCrate(qty=c.payload.qty, shelf_id=c.payload.shelf, spare_id=c.payload.spare),
            )
            .return_(lambda c: ok(c.steps["crate"].id)),
        ),
        # The same write through the session, in a compute step (the ORM's flush).
        "raw_book": f.write_handler(
            "raw_book",
            f.pipeline(AddBook)
            .compute("raw", lambda c: c.db.execute(sa.insert(CvBook.__table__), [_raw_book(c)]).rowcount)
            .return_(lambda c: ok(c.steps["raw"])),
        ),
    }
    h["shelve"] = f.workflow(
        "shelve",
        trigger=manual(AddBook),
        pipeline=f.workflow_pipeline(AddBook).wait("PT1M").create("book", CvBook, data=_book),
    )
    return f, h


def _raw_book(c: Any, book: AddBook | None = None) -> dict[str, object]:
    now, book = c.now, book or c.payload
    return {
        "id": uuid.uuid4(),
        "tenant_id": c.user.tenant_id,
        "version": 1,
        "created_at": now,
        "updated_at": now,
        "title": book.title,
        "pages": book.pages,
        "shelf_id": book.shelf,
    }


def _rows(app: App, entity: type[Any]) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(entity.__table__)) or 0)


def _events(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.scalar(sa.text("SELECT count(*) FROM kumiko_events")) or 0)


def _problem(result: object) -> dict[str, Any]:
    """The one problem of a constraint's validation_error, without its error id (which the
    message ends with)."""
    failure = failure_of(result, "validation_error")
    assert failure.http_status == 400
    assert isinstance(failure.details, list), failure
    [problem] = failure.details
    error_id = problem.pop("error_id")
    assert failure.message.endswith(f" (error id {error_id})"), failure
    return dict(problem)


def _safe(result: object, *leaks: str) -> None:
    shown = repr(result)
    for leak in ("INSERT", "UPDATE", "[SQL", "parameters", "Traceback", "cv_book_pkey", *leaks):
        assert leak not in shown, (leak, shown)


def test_a_foreign_key_to_a_row_that_does_not_exist_is_a_validation_error(
    app_on: AppOn, user: User, caplog: pytest.LogCaptureFixture
) -> None:
    f, h = _library()
    app = app_on([f])
    missing = uuid.uuid4()
    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        result = app.dispatch(h["book"], AddBook("Dune", 412, missing), user=user)
    step = '0 aggregate.create "book"'
    assert _problem(result) == {
        "path": "$.shelf",
        "column": "cv_book.shelf_id",
        "constraint": "cv_book_shelf_id_fkey",
        "message": "must refer to an existing row of cv_shelf",
        "step": step,
    }
    message = failure_of(result).message
    assert message.startswith(
        f"step {step}: cv_book.shelf_id (from $.shelf) must refer to an existing row of cv_shelf"
        " (foreign key cv_book_shelf_id_fkey); pass the id of a row that exists"
    ), message
    _safe(result, str(missing), "Dune")
    assert str(missing) in caplog.text or missing.hex in caplog.text  # the database's words: the log
    assert (_rows(app, CvBook), _events(app)) == (0, 0)
    # The same book on a shelf that exists is written.
    shelf = ok_data(app.dispatch(h["shelf"], AddShelf("A"), user=user))
    ok_data(app.dispatch(h["book"], AddBook("Dune", 412, shelf), user=user))
    assert _rows(app, CvBook) == 1


def test_a_check_constraint_is_a_validation_error_naming_it(app_on: AppOn, user: User) -> None:
    f, h = _library()
    app = app_on([f])
    result = app.dispatch(h["book"], AddBook("Dune", -3), user=user)
    step = '0 aggregate.create "book"'
    assert _problem(result) == {
        "path": "$.pages",
        "column": "cv_book.pages",
        "constraint": "cv_book_pages_positive",
        "message": "must satisfy the check constraint cv_book_pages_positive",
        "step": step,
    }
    assert failure_of(result).message.startswith(
        f"step {step}: cv_book.pages (from $.pages) must satisfy the check constraint cv_book_pages_positive;"
        " pass a value it allows"
    )
    _safe(result, "pages > 0", "-3")
    assert (_rows(app, CvBook), _events(app)) == (0, 0)


def test_an_unnamed_check_is_named_as_postgresql_names_it(app_on: AppOn, user: User) -> None:
    f, h = _library()
    app = app_on([f])
    problem = _problem(app.dispatch(h["crate"], AddCrate(-1), user=user))
    assert problem == {
        "path": "$.qty",
        "column": "cv_crate.qty",
        "constraint": "cv_crate_qty_check",
        "message": "must satisfy the check constraint cv_crate_qty_check",
        "step": '0 aggregate.create "crate"',
    }


def test_a_null_in_a_not_null_column_is_a_validation_error(app_on: AppOn, user: User) -> None:
    """The payload's ``None``; one the program makes (a projector clearing a column) stays
    an ``internal_error`` (test_write_path)."""
    f, h = _library()
    app = app_on([f])
    result = app.dispatch(h["book"], AddBook(None, 100), user=user)
    step = '0 aggregate.create "book"'
    assert _problem(result) == {
        "path": "$.title",
        "column": "cv_book.title",
        "constraint": "NOT NULL",
        "message": "must not be null",
        "step": step,
    }
    assert failure_of(result).message.startswith(
        f"step {step}: cv_book.title (from $.title) must not be null; give it a value"
    )
    assert (_rows(app, CvBook), _events(app)) == (0, 0)


def test_an_update_that_breaks_a_constraint_writes_nothing(app_on: AppOn, user: User) -> None:
    """An update's row write takes no savepoint: the dispatch's rollback undoes its event."""
    f, h = _library()
    app = app_on([f])
    book = ok_data(app.dispatch(h["book"], AddBook("Dune", 412), user=user))
    before = _events(app)
    missing = uuid.uuid4()
    problem = _problem(app.dispatch(h["reshelve"], Reshelve(book, 10, missing), user=user))
    assert (problem["column"], problem["path"], problem["step"]) == (
        "cv_book.shelf_id",
        "$.shelf",
        '0 aggregate.update "book"',
    )
    problem = _problem(app.dispatch(h["reshelve"], Reshelve(book, 0, None), user=user))
    assert (problem["column"], problem["constraint"]) == ("cv_book.pages", "cv_book_pages_positive")
    assert _events(app) == before
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(CvBook.pages, CvBook.version)).one() == (412, 1)


def test_two_foreign_keys_that_may_be_the_broken_one_are_both_named(app_on: AppOn, user: User) -> None:
    """SQLite does not say which foreign key failed: with two set, both are named, on
    PostgreSQL too (the same answer for the same input); with one, exactly it."""
    f, h = _library()
    app = app_on([f])
    shelf = ok_data(app.dispatch(h["shelf"], AddShelf("A"), user=user))
    result = app.dispatch(h["crate"], AddCrate(1, shelf, uuid.uuid4()), user=user)
    failure = failure_of(result, "validation_error")
    assert isinstance(failure.details, list)
    assert [(d["column"], d["constraint"], d["path"]) for d in failure.details] == [
        ("cv_crate.shelf_id", "cv_crate_shelf_id_fkey", "$.shelf"),
        ("cv_crate.spare_id", "cv_crate_spare_id_fkey", "$.spare"),
    ]
    assert "one of cv_crate.shelf_id, cv_crate.spare_id must refer to an existing row" in failure.message
    problem = _problem(app.dispatch(h["crate"], AddCrate(1, None, uuid.uuid4()), user=user))
    assert (problem["column"], problem["path"]) == ("cv_crate.spare_id", "$.spare")


def test_a_write_through_the_session_in_a_compute_step_is_named_too(app_on: AppOn, user: User) -> None:
    f, h = _library()
    app = app_on([f])
    problem = _problem(app.dispatch(h["raw_book"], AddBook("Dune", 5, uuid.uuid4()), user=user))
    assert (problem["column"], problem["constraint"], problem["path"], problem["step"]) == (
        "cv_book.shelf_id",
        "cv_book_shelf_id_fkey",
        "$.shelf",
        '0 compute "raw"',
    )
    assert _rows(app, CvBook) == 0


def test_with_an_idempotency_key_the_refusal_is_the_keys_answer_and_nothing_is_written(
    app_on: AppOn, user: User
) -> None:
    """Like any validation_error of the steps, the key keeps the answer (its writes rolled
    back); PostgreSQL's aborted statement is undone by the savepoints, so the key's row
    can still be stored."""
    f, h = _library()
    app = app_on([f])
    payload = AddBook("Dune", 412, uuid.uuid4())
    first = app.dispatch(h["book"], payload, user=user, idempotency_key="k-1")
    again = app.dispatch(h["book"], payload, user=user, idempotency_key="k-1")
    assert failure_of(first, "validation_error") == failure_of(again, "validation_error")
    assert (_rows(app, CvBook), _events(app)) == (0, 0)
    with app.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM kumiko_idempotency_keys")) == 1


def test_a_workflow_step_that_breaks_a_foreign_key_fails_its_run_alone(app_on: AppOn, user: User) -> None:
    """A resumed segment in a worker's pass: its run fails with the same code and message,
    the worker goes on (a second run in the same pass completes)."""
    f, h = _library()
    clock = FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = app_on([f], clock=clock)
    shelve = h["shelve"]
    broken = app.start_workflow(shelve, AddBook("Dune", 412, uuid.uuid4()), user=user)
    fine = app.start_workflow(shelve, AddBook("Emma", 300), user=user)
    clock.advance(minutes=2)
    app.run_worker(once=True)
    run = run_info(app, broken)
    assert run.status == "failed", run
    assert run.error["code"] == "validation_error", run.error
    assert "cv_book.shelf_id (from $.shelf) must refer to an existing row of cv_shelf" in run.error["message"]
    # The message a handler's Failure has: the run's engine named the column again after it.
    assert run.error["message"].count("cv_book.shelf_id") == 1, run.error
    assert run_info(app, fine).status == "completed"
    assert _rows(app, CvBook) == 1


def test_deleting_a_row_others_refer_to_names_what_refers_to_it(app_on: AppOn, user: User) -> None:
    f, h = _library()

    def remove(c: Any) -> int:
        table = CvShelf.__table__
        stmt = sa.delete(table).where(table.c.id == c.payload.label, table.c.tenant_id == c.user.tenant_id)
        return int(c.db.execute(stmt).rowcount)

    drop = f.write_handler("drop", f.pipeline(AddShelf).compute("gone", remove).return_(lambda c: ok(c.steps["gone"])))
    app = app_on([f])
    shelf = ok_data(app.dispatch(h["shelf"], AddShelf("A"), user=user))
    ok_data(app.dispatch(h["book"], AddBook("Dune", 412, shelf), user=user))
    result = app.dispatch(drop, AddShelf(str(shelf)), user=user)
    failure = failure_of(result, "validation_error")
    assert isinstance(failure.details, list)
    assert [(d["column"], d["constraint"]) for d in failure.details] == [
        ("cv_book.shelf_id", "cv_book_shelf_id_fkey"),
        ("cv_crate.shelf_id", "cv_crate_shelf_id_fkey"),
        ("cv_crate.spare_id", "cv_crate_spare_id_fkey"),
    ]
    assert failure.message.startswith(
        'step 0 compute "gone": a row of cv_shelf is still referred to; remove what refers to it first'
    ), failure
    _safe(result, str(shelf))
    assert _rows(app, CvShelf) == 1


class CvTag(Entity):
    __tablename__ = "cv_tag"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "slug"),)
    slug: Mapped[str] = mapped_column(sa.String(40))


@attrs.frozen
class AddTag:
    slug: str


def test_a_unique_clash_of_a_write_through_the_session_is_a_unique_violation_like_a_creates(
    app_on: AppOn, user: User
) -> None:
    """The clash of a ``compute`` step's own write is answered as an aggregate write's:
    ``unique_violation`` naming the entity, its attributes and the payload field."""
    f: Feature[Any] = Feature("cv_tags")
    f.entity(CvTag)

    def raw(c: Any) -> int:
        row = {"id": uuid.uuid4(), "tenant_id": c.user.tenant_id, "version": 1, "created_at": c.now}
        stmt = sa.insert(CvTag.__table__).values(**row, updated_at=c.now, slug=c.payload.slug)
        return int(c.db.execute(stmt).rowcount)

    create = f.write_handler(
        "create",
        f.pipeline(AddTag)
        .create("t", CvTag, data=lambda c: CvTag(slug=c.payload.slug))
        .return_(lambda c: ok(c.steps["t"].version)),
    )
    insert = f.write_handler("insert", f.pipeline(AddTag).compute("t", raw).return_(lambda c: ok(c.steps["t"])))
    app = app_on([f])
    ok_data(app.dispatch(create, AddTag("red"), user=user))
    by_create = failure_of(app.dispatch(create, AddTag("red"), user=user), "unique_violation")
    by_insert = failure_of(app.dispatch(insert, AddTag("red"), user=user), "unique_violation")
    assert by_insert.details == by_create.details
    assert by_insert.details == {"entity": "CvTag", "columns": ["tenant_id", "slug"], "path": "$.slug"}
    # Each names its own step, then the same clash.
    clash = "CvTag violates a unique constraint on tenant_id, slug: another row holds those values;"
    assert by_create.message.startswith(f'step aggregate.create "t": {clash}')
    assert by_insert.message.startswith(f'step 0 compute "t": {clash}')
    assert by_insert.message.partition(": ")[2] == by_create.message.partition(": ")[2]
    assert _rows(app, CvTag) == 1


class CvMember(Entity):
    """Two unique indexes on expressions: neither database names a column of either."""

    __tablename__ = "cv_member"
    email: Mapped[str] = mapped_column(sa.String(80))
    handle: Mapped[str] = mapped_column(sa.String(40))


sa.Index("cv_member_email_ci", CvMember.tenant_id, sa.func.lower(CvMember.email), unique=True)
sa.Index("cv_member_handle_ci", CvMember.tenant_id, sa.func.lower(CvMember.handle), unique=True)


@attrs.frozen
class Join:
    email: str
    handle: str


def test_a_clash_on_a_unique_index_of_expressions_names_that_indexs_columns(app_on: AppOn, user: User) -> None:
    """SQLite says only ``index 'cv_member_email_ci'``, PostgreSQL quotes ``lower(email)``:
    the index is found by its name, and its columns are those its expressions read, so
    the two clashes are told apart, the same on both databases (both said no column)."""
    f: Feature[Any] = Feature("cv_members")
    f.entity(CvMember)
    join = f.write_handler(
        "join",
        f.pipeline(Join)
        .create("m", CvMember, data=lambda c: CvMember(email=c.payload.email, handle=c.payload.handle))
        .return_(lambda c: ok(c.steps["m"].version)),
    )

    def raw(c: Any) -> int:
        row = {"id": uuid.uuid4(), "tenant_id": c.user.tenant_id, "version": 1, "created_at": c.now}
        values = {**row, "updated_at": c.now, "email": c.payload.email, "handle": c.payload.handle}
        return int(c.db.execute(sa.insert(CvMember.__table__).values(**values)).rowcount)

    insert = f.write_handler("insert", f.pipeline(Join).compute("m", raw).return_(lambda c: ok(c.steps["m"])))
    app = app_on([f])
    ok_data(app.dispatch(join, Join("Ada@example.org", "ada"), user=user))
    for handler in (join, insert):
        email = failure_of(app.dispatch(handler, Join("ADA@example.org", "lovelace"), user=user), "unique_violation")
        assert email.details == {"entity": "CvMember", "columns": ["tenant_id", "email"], "path": "$.email"}
        assert "on tenant_id, email: another row holds those values; pass another value at $.email" in email.message
        handle = failure_of(app.dispatch(handler, Join("grace@example.org", "ADA"), user=user), "unique_violation")
        assert handle.details == {"entity": "CvMember", "columns": ["tenant_id", "handle"], "path": "$.handle"}
        _safe(email, "Ada@example.org", "ADA@example.org", "lower(")
        _safe(handle, "ADA", "lower(")
    assert _rows(app, CvMember) == 1


@attrs.frozen
class AddBooks:
    books: list[AddBook]


def test_a_write_of_many_rows_names_no_row_it_cannot_tell_broke_the_constraint(app_on: AppOn, user: User) -> None:
    """An executemany of several rows: neither database says which row broke the key
    (SQLite says nothing, PostgreSQL only quotes the values).  The first row's field was
    named — a book on a shelf that exists; a field is named only when the rows' values all
    come from it."""
    f, h = _library()

    def raw(c: Any) -> int:
        rows = [_raw_book(c, book) for book in c.payload.books]
        return int(c.db.execute(sa.insert(CvBook.__table__), rows).rowcount)

    many = f.write_handler("many", f.pipeline(AddBooks).compute("raw", raw).return_(lambda c: ok(c.steps["raw"])))
    app = app_on([f])
    shelf = ok_data(app.dispatch(h["shelf"], AddShelf("A"), user=user))
    books = [AddBook("Dune", 412, shelf), AddBook("Emma", 300, uuid.uuid4())]
    problem = _problem(app.dispatch(many, AddBooks(books), user=user))
    assert (problem["column"], problem["constraint"], problem["path"]) == (
        "cv_book.shelf_id",
        "cv_book_shelf_id_fkey",
        "$",
    )
    problem = _problem(app.dispatch(many, AddBooks([AddBook("Dune", 0, shelf), books[0]]), user=user))
    assert (problem["column"], problem["constraint"], problem["path"]) == (
        "cv_book.pages",
        "cv_book_pages_positive",
        "$",
    )
    # One row: its field.
    problem = _problem(app.dispatch(many, AddBooks(books[1:]), user=user))
    assert problem["path"] == "$.books[0].shelf"
    assert _rows(app, CvBook) == 0


@attrs.frozen
class AddTags:
    slugs: list[str]


def test_a_unique_clash_of_a_write_of_many_rows_names_the_columns_not_a_row(app_on: AppOn, user: User) -> None:
    """The first row's field was named although the second row clashed."""
    f: Feature[Any] = Feature("cv_many_tags")
    f.entity(CvTag)

    def raw(c: Any) -> int:
        rows = [
            {"id": uuid.uuid4(), "tenant_id": c.user.tenant_id, "version": 1, "created_at": c.now, "updated_at": c.now}
            | {"slug": slug}
            for slug in c.payload.slugs
        ]
        return int(c.db.execute(sa.insert(CvTag.__table__), rows).rowcount)

    insert = f.write_handler("insert", f.pipeline(AddTags).compute("t", raw).return_(lambda c: ok(c.steps["t"])))
    app = app_on([f])
    ok_data(app.dispatch(insert, AddTags(["red"]), user=user))
    clash = failure_of(app.dispatch(insert, AddTags(["blue", "red"]), user=user), "unique_violation")
    assert clash.details == {"entity": "CvTag", "columns": ["tenant_id", "slug"], "path": "$"}
    one = failure_of(app.dispatch(insert, AddTags(["red"]), user=user), "unique_violation")
    assert one.details == {"entity": "CvTag", "columns": ["tenant_id", "slug"], "path": "$.slugs[0]"}
    assert _rows(app, CvTag) == 1


def test_an_insert_of_values_it_does_not_bind_by_column_names_the_keys_not_a_delete(app_on: AppOn, user: User) -> None:
    """A multi-row VALUES insert binds ``shelf_id_m0``, ``shelf_id_m1``: no value of the
    statement was read as setting the key, and the insert was answered as a delete of a
    row others refer to (``a row of cv_book is still referred to; remove what refers to it
    first``).  An insert can only break the keys it writes."""
    f, _h = _library()

    def raw(c: Any) -> int:
        rows = [_raw_book(c, book) for book in c.payload.books]
        return int(c.db.execute(sa.insert(CvBook.__table__).values(rows)).rowcount)

    many = f.write_handler("many", f.pipeline(AddBooks).compute("raw", raw).return_(lambda c: ok(c.steps["raw"])))
    app = app_on([f])
    result = app.dispatch(many, AddBooks([AddBook("Emma", 300, uuid.uuid4())]), user=user)
    failure = failure_of(result, "validation_error")
    assert isinstance(failure.details, list)
    assert [(d["column"], d["constraint"], d["path"]) for d in failure.details] == [
        ("cv_book.shelf_id", "cv_book_shelf_id_fkey", "$")
    ]
    assert "must refer to an existing row of cv_shelf" in failure.message, failure
    assert _rows(app, CvBook) == 0


class _CvProjections(MappedAsDataclass, DeclarativeBase):
    pass


class CvStock(_CvProjections):
    """A read model with a CHECK, written by the unsafe projection steps."""

    __tablename__ = "cv_stock"
    __table_args__ = (sa.CheckConstraint("qty >= 0", name="cv_stock_qty_not_negative"),)
    sku: Mapped[str] = mapped_column(sa.String(40), primary_key=True)
    qty: Mapped[int]


@attrs.frozen
class Stock:
    sku: str
    qty: int


def test_a_projection_upsert_that_breaks_a_check_is_a_validation_error(app_on: AppOn, user: User) -> None:
    f: Feature[Any] = Feature("cv_stock", projections=[CvStock])
    put = f.write_handler(
        "put",
        f.pipeline(Stock)
        .unsafe_projection_upsert(CvStock, on=["sku"], row=lambda c: {"sku": c.payload.sku, "qty": c.payload.qty})
        .return_(lambda c: ok(1)),
    )
    app = app_on([f])
    ok_data(app.dispatch(put, Stock("a", 1), user=user))
    for sku in ("a", "b"):  # the update of an existing row, an insert
        assert _problem(app.dispatch(put, Stock(sku, -1), user=user)) == {
            "path": "$.qty",
            "column": "cv_stock.qty",
            "constraint": "cv_stock_qty_not_negative",
            "message": "must satisfy the check constraint cv_stock_qty_not_negative",
            "step": "0 unsafe_projection_upsert",
        }
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(CvStock.__table__)).all() == [("a", 1)]


class CvDesk(Entity):
    __tablename__ = "cv_desk"


class CvLoan(Entity):
    """A foreign key checked at COMMIT, not at the statement (both databases can defer)."""

    __tablename__ = "cv_loan"
    desk_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("cv_desk.id", deferrable=True, initially="DEFERRED"))


@attrs.frozen
class Lend:
    desk: uuid.UUID


def test_a_deferred_foreign_key_broken_at_commit_is_the_same_validation_error(app_on: AppOn, user: User) -> None:
    """The COMMIT fails, not a statement: no step and no statement's values to read, so
    no column is named; nothing is written, and a key keeps no answer (its claim was in
    the transaction that failed): the same call runs again."""
    f: Feature[Any] = Feature("cv_library")
    f.entity(CvDesk)
    f.entity(CvLoan)
    lend = f.write_handler(
        "lend",
        f.pipeline(Lend).create("loan", CvLoan, data=lambda c: CvLoan(desk_id=c.payload.desk)).return_(lambda c: ok(1)),
    )
    app = app_on([f])
    for key in (None, "k-1", "k-1"):
        result = app.dispatch(lend, Lend(uuid.uuid4()), user=user, idempotency_key=key)
        assert _problem(result) == {
            "path": "$",
            "column": "",
            "constraint": "",
            "message": "breaks a foreign key",
            "handler": "cv_library:lend",
        }
        assert failure_of(result).message.startswith(
            "handler cv_library:lend: a value refers to a row that does not exist; pass the id of a row that exists"
        )
        _safe(result)
    assert (_rows(app, CvLoan), _events(app)) == (0, 0)
    with app.engine.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM kumiko_idempotency_keys")) == 0
