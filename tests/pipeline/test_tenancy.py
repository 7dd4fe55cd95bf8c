"""Tenancy (DESIGN §5): reads of entities are filtered to the dispatching user's tenant, writes
to another tenant's aggregate are not_found — on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _support import NewDoc, Wrote, ok_data
from sqlalchemy.orm import Mapped, aliased, mapped_column, relationship

from kumiko_typed import App, Entity, Failure, Feature, Ok, User, ok

AppOn = Callable[..., App]


class T3tDoc(Entity):
    __tablename__ = "t3t_doc"
    title: Mapped[str] = mapped_column(sa.String(100))
    words: Mapped[int] = mapped_column(default=0)


DOCS: sa.Table = T3tDoc.__table__  # type: ignore[assignment]


@attrs.frozen
class DocRef:
    id: uuid.UUID
    version: int = 1


def _feature() -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("t3t", requires=["call_feature"])
    f.entity(T3tDoc)
    f.event(Wrote, name="t3t-wrote")

    @f.projector(T3tDoc, Wrote)
    def apply(row: T3tDoc, event: Wrote) -> None:
        row.words += event.words

    create = f.write_handler(
        "create",
        f.pipeline(NewDoc)
        .create("doc", T3tDoc, data=lambda c: T3tDoc(title=c.payload.title))
        .return_(lambda c: ok(c.steps["doc"].id)),
    )
    rename = f.write_handler(
        "rename",
        f.pipeline(DocRef)
        .update(
            "doc",
            T3tDoc,
            id=lambda c: c.payload.id,
            changes=lambda c: {"title": "renamed"},
            version=lambda c: c.payload.version,
        )
        .return_(lambda c: ok(c.steps["doc"].version)),
    )
    return f, create, rename


def _by_id(c: Any) -> sa.Select[tuple[T3tDoc]]:
    return sa.select(T3tDoc).where(T3tDoc.id == c.payload.id)


def _through_c_db(c: Any) -> dict[str, object]:
    """Queries a compute step runs through ``c.db`` (ORM selects: filtered like the read steps)."""
    db = c.db
    return {
        "entities": sorted(d.title for d in db.execute(sa.select(T3tDoc)).scalars()),
        "by_id": db.execute(_by_id(c)).scalars().first() is not None,
        "get": db.get(T3tDoc, c.payload.id) is not None,
        "columns": sorted(db.execute(sa.select(T3tDoc.title)).scalars()),
        "count": db.execute(sa.select(sa.func.count()).select_from(T3tDoc)).scalar_one(),
        "scalars": sorted(d.title for d in db.scalars(sa.select(T3tDoc).order_by(T3tDoc.title))),
    }


#: op → (add the op's steps to a DocRef pipeline; ends with return_)
OPS: dict[str, Callable[[Any, Any], Any]] = {
    "find_one": lambda p, _: p.find_one("r", _by_id).return_(lambda c: ok(None if c.steps["r"] is None else "seen")),
    "find_many": lambda p, _: p.find_many("r", lambda c: sa.select(T3tDoc).order_by(T3tDoc.title)).return_(
        lambda c: ok([d.title for d in c.steps["r"]])
    ),
    "get_one": lambda p, _: p.get_one("r", _by_id).return_(lambda c: ok(c.steps["r"].title)),
    "update": lambda p, _: p.update(
        "r", T3tDoc, id=lambda c: c.payload.id, changes=lambda c: {"title": "hijacked"}, version=1
    ).return_(lambda c: ok(c.steps["r"].version)),
    "update_unlocked": lambda p, _: p.update(
        "r", T3tDoc, id=lambda c: c.payload.id, changes=lambda c: {"words": 999}, skip_optimistic_lock=True
    ).return_(lambda c: ok(c.steps["r"].version)),
    "append_event": lambda p, _: p.append_event(T3tDoc, id=lambda c: c.payload.id, event=lambda c: Wrote(100)).return_(
        lambda c: ok("appended")
    ),
    "call_feature": lambda p, rename: p.call_feature("r", rename, payload=lambda c: c.payload).return_(
        lambda c: ok(c.steps["r"])
    ),
    "c_db": lambda p, _: p.compute("r", _through_c_db).return_(lambda c: ok(c.steps["r"])),
}

#: What tenant B gets for tenant A's document.
AS_OTHER_TENANT: dict[str, object] = {
    "find_one": Ok(None),
    "find_many": Ok([]),
    "get_one": "not_found",
    "update": "not_found",
    "update_unlocked": "not_found",
    "append_event": "not_found",
    "call_feature": "not_found",
    "c_db": Ok({"entities": [], "by_id": False, "get": False, "columns": [], "count": 0, "scalars": []}),
}

#: The control: what tenant A gets for its own document.
AS_OWNER: dict[str, object] = {
    "find_one": Ok("seen"),
    "find_many": Ok(["a-doc"]),
    "get_one": Ok("a-doc"),
    "update": Ok(2),
    "update_unlocked": Ok(2),
    "append_event": Ok("appended"),
    "call_feature": Ok(2),
    "c_db": Ok(
        {"entities": ["a-doc"], "by_id": True, "get": True, "columns": ["a-doc"], "count": 1, "scalars": ["a-doc"]}
    ),
}


def _rows(app: App) -> dict[str, list[dict[str, Any]]]:
    with app.engine.connect() as conn:
        return {t.name: sorted((dict(r._mapping) for r in conn.execute(sa.select(t))), key=repr) for t in app.tables()}


@pytest.mark.parametrize("op", list(OPS))
def test_another_tenant_cannot_see_or_change_the_aggregate(
    app_on: AppOn, make_user: Callable[..., User], op: str
) -> None:
    f, create, rename = _feature()
    h = f.write_handler("op", OPS[op](f.pipeline(DocRef), rename))
    app = app_on([f])
    alice, bob = make_user("Admin"), make_user("Admin")
    assert alice.tenant_id != bob.tenant_id
    doc_id = ok_data(app.dispatch(create, NewDoc("a-doc"), user=alice))
    before = _rows(app)

    result = app.dispatch(h, DocRef(doc_id), user=bob)

    expected = AS_OTHER_TENANT[op]
    if isinstance(expected, str):
        assert isinstance(result, Failure), result
        assert result.code == expected
        # get_one names its step; the writes name the aggregate they did not find.
        assert result.details == ({"step": "r"} if op == "get_one" else {"entity_id": str(doc_id)})
    else:
        assert result == expected
    assert _rows(app) == before  # A's data unchanged, nothing appended

    # The control: the owner's tenant sees and changes it.
    assert app.dispatch(h, DocRef(doc_id), user=alice) == AS_OWNER[op]


def test_a_user_of_the_same_tenant_sees_the_data(app_on: AppOn, make_user: Callable[..., User]) -> None:
    f, create, rename = _feature()
    h = f.write_handler("op", OPS["get_one"](f.pipeline(DocRef), rename))
    app = app_on([f])
    alice = make_user("Admin")
    colleague = User(id=uuid.uuid4(), tenant_id=alice.tenant_id, roles=frozenset({"Admin"}))
    doc_id = ok_data(app.dispatch(create, NewDoc("a-doc"), user=alice))
    assert app.dispatch(h, DocRef(doc_id), user=colleague) == Ok("a-doc")
    assert app.dispatch(rename, DocRef(doc_id, 1), user=colleague) == Ok(2)


def test_each_tenant_reads_only_its_own_rows_call_after_call(app_on: AppOn, make_user: Callable[..., User]) -> None:
    """The filter is per dispatch (no leak through cached statements), in both directions."""
    f, create, rename = _feature()
    many = f.write_handler("many", OPS["find_many"](f.pipeline(DocRef), rename))
    through_db = f.write_handler("db", OPS["c_db"](f.pipeline(DocRef), rename))
    app = app_on([f])
    alice, bob, carol = make_user(), make_user(), make_user()
    for title, who in [("a1", alice), ("b1", bob), ("a2", alice), ("b2", bob)]:
        ok_data(app.dispatch(create, NewDoc(title), user=who))
    probe = DocRef(uuid.uuid4())
    for _ in range(2):
        assert app.dispatch(many, probe, user=alice) == Ok(["a1", "a2"])
        assert app.dispatch(many, probe, user=bob) == Ok(["b1", "b2"])
        assert app.dispatch(many, probe, user=carol) == Ok([])
        seen = ok_data(app.dispatch(through_db, probe, user=bob))
        assert (seen["entities"], seen["count"]) == (["b1", "b2"], 2)
        seen = ok_data(app.dispatch(through_db, probe, user=alice))
        assert (seen["entities"], seen["count"]) == (["a1", "a2"], 2)


def test_created_rows_belong_to_the_creators_tenant(app_on: AppOn, make_user: Callable[..., User]) -> None:
    f, create, _rename = _feature()
    app = app_on([f])
    alice, bob = make_user(), make_user()
    a_id = ok_data(app.dispatch(create, NewDoc("a"), user=alice))
    b_id = ok_data(app.dispatch(create, NewDoc("b"), user=bob))
    rows = _rows(app)
    assert {r["id"]: r["tenant_id"] for r in rows["t3t_doc"]} == {a_id: alice.tenant_id, b_id: bob.tenant_id}
    assert {e["stream_id"]: e["tenant_id"] for e in rows["kumiko_events"]} == {
        a_id: alice.tenant_id,
        b_id: bob.tenant_id,
    }


def test_call_feature_as_a_user_of_another_tenant_switches_the_filter_and_restores_it(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    f, create, rename = _feature()
    titles = f.write_handler(
        "titles",
        f.pipeline(DocRef)
        .find_many("docs", lambda c: sa.select(T3tDoc).order_by(T3tDoc.title))
        .return_(lambda c: ok([d.title for d in c.steps["docs"]])),
    )
    admin_of_a = make_user("sysadmin")
    bob = make_user()
    outer = f.write_handler(
        "outer",
        f.pipeline(DocRef)
        .find_many("before", lambda c: sa.select(T3tDoc).order_by(T3tDoc.title))
        .call_feature("inner", titles, payload=lambda c: c.payload, as_user=bob)
        .call_feature("renamed", rename, payload=lambda c: c.payload, as_user=bob)
        .find_many("after", lambda c: sa.select(T3tDoc).order_by(T3tDoc.title))
        .compute("db_after", lambda c: sorted(c.db.execute(sa.select(T3tDoc.title)).scalars()))
        .return_(
            lambda c: ok(
                (
                    [d.title for d in c.steps["before"]],
                    c.steps["inner"],
                    c.steps["renamed"],
                    [d.title for d in c.steps["after"]],
                    c.steps["db_after"],
                )
            )
        ),
    )
    app = app_on([f])
    ok_data(app.dispatch(create, NewDoc("a-doc"), user=admin_of_a))
    b_id = ok_data(app.dispatch(create, NewDoc("b-doc"), user=bob))
    result = app.dispatch(outer, DocRef(b_id), user=admin_of_a)
    assert result == Ok((["a-doc"], ["b-doc"], 2, ["a-doc"], ["a-doc"]))
    # The rename ran as bob, in bob's tenant, and committed with the outer call...
    assert ok_data(app.dispatch(titles, DocRef(b_id), user=bob)) == ["renamed"]
    # ...which the sysadmin could not have done as itself.
    direct = app.dispatch(rename, DocRef(b_id, 2), user=admin_of_a)
    assert isinstance(direct, Failure)
    assert direct.code == "not_found"


# --- selects that name an entity's table as SQLAlchemy Core ---------------------------------------

_DOC_ALIAS = DOCS.alias("d")
_LIGHT = sa.table("t3t_doc", sa.column("title"))

#: Spellings of "the titles of t3t_doc" that carry no mapper: the tenant filter cannot see them.
CORE_SELECTS: dict[str, Callable[[Any], Any]] = {
    "table_column": lambda c: sa.select(DOCS.c.title),
    "select_from_table": lambda c: sa.select(sa.func.count()).select_from(DOCS),
    "table_select": lambda c: DOCS.select(),
    "alias": lambda c: sa.select(_DOC_ALIAS.c.title),
    "lightweight_table": lambda c: sa.select(_LIGHT.c.title),
    "in_subquery": lambda c: sa.select(T3tDoc.title).where(T3tDoc.id.in_(sa.select(DOCS.c.id))),
    "exists": lambda c: sa.select(sa.literal(1)).where(sa.exists().where(DOCS.c.words >= 0)),
    "union": lambda c: sa.select(sa.union(sa.select(T3tDoc.title), sa.select(DOCS.c.title)).subquery().c.title),
    "cte": lambda c: sa.select(sa.select(DOCS.c.title).cte("titles")),
    "join": lambda c: sa.select(T3tDoc.title).join(_DOC_ALIAS, _DOC_ALIAS.c.id == T3tDoc.id),
    # Beside the mapped class, but in an EXISTS that is not correlated to it: its own FROM.
    "exists_not_correlated": lambda c: sa.select(T3tDoc.title).where(
        sa.exists().where(DOCS.c.words >= 0).correlate(None)
    ),
    "exists_correlating_all_but_it": lambda c: sa.select(T3tDoc.title).where(
        sa.exists().where(DOCS.c.words >= 0).correlate_except(DOCS)
    ),
    # Correlated, to a select that has no mapped class of it to filter.
    "exists_correlated_to_no_mapped_class": lambda c: sa.select(sa.literal(1)).where(
        sa.exists().where(DOCS.c.words >= 0).correlate(DOCS)
    ),
}

#: How the query reaches the database: each read step, and c.db in a compute step.
READERS: dict[str, Callable[[Any, Callable[[Any], Any]], Any]] = {
    "find_one": lambda p, q: p.find_one("r", q).return_(lambda c: ok(repr(c.steps["r"]))),
    "find_many": lambda p, q: p.find_many("r", q).return_(lambda c: ok(repr(c.steps["r"]))),
    "get_one": lambda p, q: p.get_one("r", q).return_(lambda c: ok(repr(c.steps["r"]))),
    "c_db": lambda p, q: p.compute("r", lambda c: repr(c.db.execute(q(c)).all())).return_(lambda c: ok(c.steps["r"])),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("spelling", list(CORE_SELECTS))
def test_a_core_select_of_an_entity_table_is_refused_never_answered(
    app_on: AppOn, make_user: Callable[..., User], caplog: pytest.LogCaptureFixture, spelling: str, reader: str
) -> None:
    """Answering it would leak other tenants' rows (it did: the filter only sees mapped
    classes).  Refused for every user, with a log line that says what to write instead."""
    f, create, _rename = _feature()
    h = f.write_handler("core", READERS[reader](f.pipeline(DocRef), CORE_SELECTS[spelling]))
    app = app_on([f])
    alice, bob = make_user(), make_user()
    ok_data(app.dispatch(create, NewDoc("a-secret-title"), user=alice))
    for who in (bob, alice):
        result = app.dispatch(h, DocRef(uuid.uuid4()), user=who)
        assert isinstance(result, Failure), result
        assert result.code == "internal_error"
        assert "a-secret-title" not in repr(result)
        assert "UnscopedRead" in result.message
        assert "tenant filter" in result.message and "t3t_doc" in result.message
    assert "a-secret-title" not in caplog.text


def test_reading_every_tenant_through_core_is_possible_when_said(app_on: AppOn, make_user: Callable[..., User]) -> None:
    """The opt-out the refusal names: a select that reads across tenants on purpose."""
    f, create, _rename = _feature()
    h = f.write_handler(
        "all",
        f.pipeline(DocRef)
        .find_many(
            "r", lambda c: sa.select(DOCS.c.title).order_by(DOCS.c.title).execution_options(kumiko_all_tenants=True)
        )
        .return_(lambda c: ok(list(c.steps["r"]))),
    )
    app = app_on([f])
    alice, bob = make_user(), make_user()
    ok_data(app.dispatch(create, NewDoc("a"), user=alice))
    ok_data(app.dispatch(create, NewDoc("b"), user=bob))
    assert app.dispatch(h, DocRef(uuid.uuid4()), user=bob) == Ok(["a", "b"])


#: A plain column next to its mapped class in one SELECT: one FROM, which the filter restricts.
MIXED_SELECTS: dict[str, Callable[[Any], Any]] = {
    "plain_where": lambda c: sa.select(T3tDoc.title).where(DOCS.c.words >= 0),
    "plain_order": lambda c: sa.select(T3tDoc).order_by(DOCS.c.title),
    "plain_from_joined_to_alias": lambda c: sa.select(T3tDoc.title).select_from(
        DOCS.join(_ALIASED, _ALIASED.id == DOCS.c.id)
    ),
}
_ALIASED = aliased(T3tDoc)


@pytest.mark.parametrize("spelling", list(MIXED_SELECTS))
def test_a_plain_column_beside_its_mapped_class_is_filtered(
    app_on: AppOn, make_user: Callable[..., User], spelling: str
) -> None:
    f, create, _rename = _feature()
    h = f.write_handler("mixed", READERS["c_db"](f.pipeline(DocRef), MIXED_SELECTS[spelling]))
    app = app_on([f])
    alice, bob = make_user(), make_user()
    ok_data(app.dispatch(create, NewDoc("a-secret-title"), user=alice))
    assert app.dispatch(h, DocRef(uuid.uuid4()), user=bob) == Ok("[]")
    assert "a-secret-title" in ok_data(app.dispatch(h, DocRef(uuid.uuid4()), user=alice))


# --- a relationship's any() and has(): EXISTS subqueries the filter covers ---------------------


class T3rOwner(Entity):
    __tablename__ = "t3r_owner"
    name: Mapped[str] = mapped_column(sa.String(40))
    pets: Mapped[list[T3rPet]] = relationship(back_populates="owner", default_factory=list, init=False)


class T3rPet(Entity):
    __tablename__ = "t3r_pet"
    name: Mapped[str] = mapped_column(sa.String(40))
    owner_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("t3r_owner.id"))
    owner: Mapped[T3rOwner] = relationship(back_populates="pets", init=False)


@attrs.frozen
class Named:
    name: str


def _names(rows: Any) -> Any:
    return ok(sorted(row.name for row in rows))


def test_a_relationships_any_and_has_read_only_the_tenants_rows(app_on: AppOn, make_user: Callable[..., User]) -> None:
    """Before: refused as an UnscopedRead (``internal_error``): the EXISTS that ``any()`` and
    ``has()`` write names the table of the row it tests plainly, in its join condition,
    correlated to the select around it — which names the mapped class and is filtered, as
    is the EXISTS's own FROM."""
    f: Feature[Any] = Feature("t3r")
    f.entity(T3rOwner)
    f.entity(T3rPet)
    owning = f.query_handler(
        "owning",
        f.query_pipeline(Named)
        .find_many("o", lambda c: sa.select(T3rOwner).where(T3rOwner.pets.any(T3rPet.name == c.payload.name)))
        .return_(lambda c: _names(c.steps["o"])),
    )
    owned = f.query_handler(
        "owned",
        f.query_pipeline(Named)
        .compute("p", lambda c: list(c.db.scalars(sa.select(T3rPet).where(T3rPet.owner.has(name=c.payload.name)))))
        .return_(lambda c: _names(c.steps["p"])),
    )
    app = app_on([f])
    alice, bob = make_user(), make_user()
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    at = datetime(2024, 5, 6, tzinfo=UTC)

    def row(tenant: User, **values: object) -> dict[str, object]:
        return {
            "id": uuid.uuid4(),
            "tenant_id": tenant.tenant_id,
            "version": 1,
            "created_at": at,
            "updated_at": at,
            **values,
        }

    with app.engine.begin() as conn:  # written outside any run: rows that refer across tenants
        conn.execute(
            sa.insert(T3rOwner.__table__),
            [{**row(alice, name="shared"), "id": mine}, {**row(bob, name="shared"), "id": theirs}],
        )
        conn.execute(
            sa.insert(T3rPet.__table__),
            [
                row(alice, name="a-own", owner_id=mine),
                row(alice, name="a-astray", owner_id=theirs),
                row(bob, name="b-astray", owner_id=mine),
                row(bob, name="b-own", owner_id=theirs),
            ],
        )
    assert app.query(owning, Named("a-own"), user=alice) == Ok(["shared"])
    assert app.query(owning, Named("b-astray"), user=alice) == Ok([])  # bob's pet is not alice's to see
    assert app.query(owning, Named("b-astray"), user=bob) == Ok([])  # nor alice's owner bob's
    assert app.query(owned, Named("shared"), user=alice) == Ok(["a-own"])  # not the pet of bob's owner
    assert app.query(owned, Named("shared"), user=bob) == Ok(["b-own"])


#: A read model of Core, in the entities' metadata: no aggregate's table, so not filtered.
T3M_BOARD = sa.Table(
    "t3m_board",
    Entity.metadata,
    sa.Column("name", sa.String(40), primary_key=True),
    sa.Column("tenant_id", sa.Uuid, nullable=False),
)


#: One of a metadata of its own.
T3M_NOTES = sa.Table("t3m_notes", sa.MetaData(), sa.Column("note", sa.String(40), primary_key=True))


def test_a_read_models_core_table_is_read_as_it_is(app_on: AppOn, make_user: Callable[..., User]) -> None:
    """Before: refused as an UnscopedRead telling to "select its mapped class", which it has
    not: every table of the metadata counted as an aggregate's; and a read step of a Core
    table's columns raised KeyError (its plan looked for the ORM entity every select names).
    docs/steps.md: a read model is not filtered, the query filters it on its own tenant column."""
    f: Feature[Any] = Feature("t3m", projections=[T3M_BOARD])
    board = sa.select(T3M_BOARD.c.name).order_by(T3M_BOARD.c.name)
    everyone = f.query_handler(
        "everyone",
        f.query_pipeline(Named).find_many("n", lambda c: board).return_(lambda c: ok(list(c.steps["n"]))),
    )
    noted = f.query_handler(
        "noted",
        f.query_pipeline(Named)
        .find_one("n", lambda c: sa.select(T3M_NOTES.c.note).where(T3M_NOTES.c.note == c.payload.name))
        .return_(lambda c: ok(c.steps["n"])),
    )
    own = f.query_handler(
        "own",
        f.query_pipeline(Named)
        .compute("n", lambda c: list(c.db.scalars(board.where(T3M_BOARD.c.tenant_id == c.user.tenant_id))))
        .return_(lambda c: ok(c.steps["n"])),
    )
    app = app_on([f])
    alice, bob = make_user(), make_user()
    with app.engine.begin() as conn:
        conn.execute(
            sa.insert(T3M_BOARD),
            [{"name": "a", "tenant_id": alice.tenant_id}, {"name": "b", "tenant_id": bob.tenant_id}],
        )
    assert app.query(everyone, Named("x"), user=alice) == Ok(["a", "b"])
    assert app.query(own, Named("x"), user=alice) == Ok(["a"])
    assert app.query(own, Named("x"), user=bob) == Ok(["b"])
    T3M_NOTES.create(app.engine)
    with app.engine.begin() as conn:
        conn.execute(sa.insert(T3M_NOTES), [{"note": "hello"}])
    assert app.query(noted, Named("hello"), user=alice) == Ok("hello")
    assert app.query(noted, Named("bye"), user=alice) == Ok(None)
