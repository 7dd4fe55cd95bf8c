"""Boot validation of the storage rules (DESIGN §3.2, §6): unsafe projection writes only to
declared, non-aggregate tables; an aggregate belongs to one feature; aggregate steps and
projectors only for registered entities and events. One BootError lists every problem."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, BootError, Entity, Feature, Ok, User, ok

AppOn = Callable[..., App]


class T3bWidget(Entity):
    __tablename__ = "t3b_widget"
    sku: Mapped[str] = mapped_column(sa.String(40))


class T3bGhost(Entity):
    """Mapped, but registered by no feature."""

    __tablename__ = "t3b_ghost"
    label: Mapped[str] = mapped_column(sa.String(40))


class T3bAbstract(Entity):
    """A base for entities: no table of its own."""

    __abstract__ = True


_metadata = sa.MetaData()
TALLY = sa.Table(
    "t3b_tally",
    _metadata,
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("count", sa.Integer, nullable=False),
)
OTHER = sa.Table(
    "t3b_other",
    _metadata,
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("count", sa.Integer, nullable=False),
)


@attrs.frozen
class Poked:
    n: int


@attrs.frozen
class Unregistered:
    n: int


@attrs.frozen
class P:
    id: uuid.UUID


def _problems(features: list[Feature[Any]]) -> list[str]:
    with pytest.raises(BootError) as info:
        App(features, database_url="sqlite://")
    exc = info.value
    assert str(exc).startswith(f"{len(exc.problems)} problem(s) in the app definition:\n")
    for problem in exc.problems:
        assert f"\n  - {problem}" in str(exc)
    return exc.problems


def _handler(f: Feature[Any], name: str, build: Callable[[Any], Any]) -> Any:
    return f.write_handler(name, build(f.pipeline(P)).return_(lambda c: ok(None)))


def _upsert(table: object) -> Callable[[Any], Any]:
    return lambda p: p.unsafe_projection_upsert(table, on=["key"], row=lambda c: {"key": "k", "count": 1})


def _delete(table: object) -> Callable[[Any], Any]:
    return lambda p: p.unsafe_projection_delete(table, where=lambda c: TALLY.c.key == "k")


def _not_declared(handler: str, kind: str, table: str, feature: str, path: str = "0") -> str:
    return (
        f"handler {handler}, step {path} ({kind}): table {table!r} is not declared by feature {feature!r}; "
        "add it to Feature(..., projections=[...])"
    )


def _aggregate_table(handler: str, kind: str, table: str, path: str = "0") -> str:
    return (
        f"handler {handler}, step {path} ({kind}): {table!r} is an aggregate's table, written only through events; "
        "use create/update/append_event with a projector"
    )


def _unregistered_entity(handler: str, step: str, entity: str, path: str = "0") -> str:
    return (
        f"handler {handler}, step {path} ({step}): {entity} is not an entity of any feature; "
        "register it with feature.entity(...)"
    )


# --- a valid app --------------------------------------------------------------------------


def test_an_app_using_declared_projections_and_registered_entities_boots_and_runs(app_on: AppOn, admin: User) -> None:
    f: Feature[Any] = Feature("t3b", projections=[TALLY])
    f.entity(T3bWidget)
    f.event(Poked)

    @f.projector(T3bWidget, Poked)
    def apply(row: T3bWidget, event: Poked) -> None:
        row.sku += str(event.n)

    h = f.write_handler(
        "h",
        f.pipeline(P)
        .create("w", T3bWidget, data=lambda c: T3bWidget(sku="s"))
        .append_event(T3bWidget, id=lambda c: c.steps["w"].id, event=lambda c: Poked(7))
        .unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "k", "count": 1})
        .unsafe_projection_delete(TALLY, where=lambda c: TALLY.c.key == "gone")
        .get_one("again", lambda c: sa.select(T3bWidget))
        .return_(lambda c: ok(c.steps["again"].sku)),
    )
    app = app_on([f])
    assert app.dispatch(h, P(uuid.uuid4()), user=admin) == Ok("s7")
    assert {t.name for t in app.tables()} >= {"kumiko_events", "t3b_widget", "t3b_tally"}
    assert "t3b_ghost" not in {t.name for t in app.tables()}


# --- unsafe projection writes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make_step", "kind"),
    [(_upsert, "unsafe_projection_upsert"), (_delete, "unsafe_projection_delete")],
    ids=["upsert", "delete"],
)
def test_a_projection_write_to_an_undeclared_table_is_refused(
    make_step: Callable[[object], Callable[[Any], Any]], kind: str
) -> None:
    f: Feature[Any] = Feature("t3b", projections=[OTHER])
    _handler(f, "h", make_step(TALLY))
    assert _problems([f]) == [_not_declared("t3b:h", kind, "t3b_tally", "t3b")]


def test_a_table_declared_by_another_feature_is_not_declared_for_this_one() -> None:
    owner: Feature[Any] = Feature("t3b-owner", projections=[TALLY])
    _handler(owner, "fine", _upsert(TALLY))
    f: Feature[Any] = Feature("t3b")
    _handler(f, "h", _upsert(TALLY))
    assert _problems([owner, f]) == [_not_declared("t3b:h", "unsafe_projection_upsert", "t3b_tally", "t3b")]


@pytest.mark.parametrize("target", [T3bWidget, T3bWidget.__table__], ids=["entity-class", "entity-table"])
@pytest.mark.parametrize(
    ("make_step", "kind"),
    [(_upsert, "unsafe_projection_upsert"), (_delete, "unsafe_projection_delete")],
    ids=["upsert", "delete"],
)
def test_a_projection_write_to_an_aggregate_table_is_refused_even_when_declared(
    make_step: Callable[[object], Callable[[Any], Any]], kind: str, target: object
) -> None:
    f: Feature[Any] = Feature("t3b", projections=[TALLY, T3bWidget])
    f.entity(T3bWidget)
    _handler(f, "h", make_step(target))
    assert _problems([f]) == [_aggregate_table("t3b:h", kind, "t3b_widget")]


def test_a_projection_write_to_another_features_aggregate_table_is_refused() -> None:
    owner: Feature[Any] = Feature("t3b-owner")
    owner.entity(T3bWidget)
    f: Feature[Any] = Feature("t3b", projections=[TALLY])
    _handler(f, "h", _upsert(T3bWidget))
    assert _problems([owner, f]) == [_aggregate_table("t3b:h", "unsafe_projection_upsert", "t3b_widget")]


def test_a_projection_write_nested_in_a_branch_and_a_loop_is_checked_with_its_path() -> None:
    f: Feature[Any] = Feature("t3b")
    _handler(
        f,
        "h",
        lambda p: p.branch(
            when=lambda c: True,
            on_true=lambda b: b.for_each("x", over=lambda c: [1], do=_upsert(TALLY)),
            on_false=_delete(TALLY),
        ),
    )
    assert _problems([f]) == [
        _not_declared("t3b:h", "unsafe_projection_upsert", "t3b_tally", "t3b", path="0/on_true/0/do/0"),
        _not_declared("t3b:h", "unsafe_projection_delete", "t3b_tally", "t3b", path="0/on_false/0"),
    ]


def test_a_projection_write_to_something_that_is_not_a_table_is_refused() -> None:
    f: Feature[Any] = Feature("t3b")
    _handler(f, "h", _upsert(42))
    assert _problems([f]) == [
        "handler t3b:h, step 0 (unsafe_projection_upsert): 42 is neither a Table nor a mapped class"
    ]


def test_a_projections_entry_that_is_not_a_table_is_a_boot_problem() -> None:
    """Regression: the bad entry used to escape App() as a bare StepRefused (or crash create_all)."""
    f: Feature[Any] = Feature("t3b", projections=[TALLY, "t3b_other"])  # type: ignore[list-item]
    _handler(f, "h", _upsert(TALLY))
    g: Feature[Any] = Feature("t3b-idle", projections=["nothing"])  # type: ignore[list-item]
    assert _problems([f, g]) == [
        "feature 't3b': projections=[...] entry 1: 't3b_other' is neither a Table nor a mapped class",
        "feature 't3b-idle': projections=[...] entry 0: 'nothing' is neither a Table nor a mapped class",
    ]


def test_an_entity_without_a_table_is_a_boot_problem_not_a_crash() -> None:
    """Regression: an abstract Entity subclass used to escape App() as a bare StepRefused."""
    f: Feature[Any] = Feature("t3b")
    f.entity(T3bAbstract)
    _handler(f, "create", lambda p: p.create("w", T3bAbstract, data=lambda c: T3bAbstract()))
    assert _problems([f]) == [
        f"feature 't3b': entity T3bAbstract: {T3bAbstract!r} is neither a Table nor a mapped class (is it abstract?)"
    ]


# --- one aggregate, one feature -----------------------------------------------------------


def test_two_features_registering_one_entity_is_refused() -> None:
    a: Feature[Any] = Feature("t3b-a")
    a.entity(T3bWidget)
    b: Feature[Any] = Feature("t3b-b")
    b.entity(T3bWidget, name="other-name")
    c: Feature[Any] = Feature("t3b-c")
    c.entity(T3bWidget)
    assert _problems([a, b, c]) == [
        "feature 't3b-b': entity table 't3b_widget' is already owned by feature 't3b-a'; "
        "an aggregate belongs to one feature (call it through call_feature)",
        "feature 't3b-c': entity table 't3b_widget' is already owned by feature 't3b-b'; "
        "an aggregate belongs to one feature (call it through call_feature)",
    ]


def test_one_feature_registering_its_entity_twice_is_fine(app_on: AppOn) -> None:
    f: Feature[Any] = Feature("t3b")
    f.entity(T3bWidget)
    f.entity(T3bWidget)
    assert isinstance(app_on([f]), App)


# --- aggregate steps on unregistered entities ---------------------------------------------


def test_aggregate_steps_on_an_entity_no_feature_registered_are_refused() -> None:
    f: Feature[Any] = Feature("t3b")
    f.entity(T3bWidget)
    f.event(Poked)
    _handler(f, "create", lambda p: p.create("w", T3bGhost, data=lambda c: T3bGhost(label="x")))
    _handler(
        f,
        "update",
        lambda p: p.update("w", T3bGhost, id=lambda c: c.payload.id, changes=lambda c: {"label": "y"}, version=1),
    )
    _handler(f, "append", lambda p: p.append_event(T3bGhost, id=lambda c: c.payload.id, event=lambda c: Poked(1)))
    # The registered entity in the same handlers is fine.
    _handler(f, "fine", lambda p: p.create("w", T3bWidget, data=lambda c: T3bWidget(sku="s")))
    assert _problems([f]) == [
        _unregistered_entity("t3b:create", 'aggregate.create "w"', "T3bGhost"),
        _unregistered_entity("t3b:update", 'aggregate.update "w"', "T3bGhost"),
        _unregistered_entity("t3b:append", "aggregate.append_event", "T3bGhost"),
    ]


def test_an_entity_of_another_feature_is_written_only_through_call_feature() -> None:
    owner: Feature[Any] = Feature("t3b-owner")
    owner.entity(T3bWidget)
    f: Feature[Any] = Feature("t3b")
    _handler(f, "create", lambda p: p.create("w", T3bWidget, data=lambda c: T3bWidget(sku="s")))
    assert _problems([owner, f]) == [
        "handler t3b:create, step 0 (aggregate.create \"w\"): T3bWidget belongs to feature 't3b-owner'; "
        "change it through one of that feature's handlers with call_feature"
    ]
    # ...and without the owner in the App it is unknown.
    assert _problems([f]) == [_unregistered_entity("t3b:create", 'aggregate.create "w"', "T3bWidget")]


# --- projectors ---------------------------------------------------------------------------


def test_a_projector_for_an_unregistered_entity_or_event_is_refused() -> None:
    f: Feature[Any] = Feature("t3b")
    f.entity(T3bWidget)
    f.event(Poked)

    @f.projector(T3bGhost, Poked)
    def ghost(row: T3bGhost, event: Poked) -> None: ...

    @f.projector(T3bWidget, Unregistered)
    def unregistered(row: T3bWidget, event: Unregistered) -> None: ...

    @f.projector(T3bGhost, Unregistered)
    def both(row: T3bGhost, event: Unregistered) -> None: ...

    assert _problems([f]) == [
        "feature 't3b': projector for T3bGhost, which no feature registered with feature.entity(...)",
        "feature 't3b': projector for Unregistered, which no feature registered with feature.event(...)",
        "feature 't3b': projector for T3bGhost, which no feature registered with feature.entity(...)",
        "feature 't3b': projector for Unregistered, which no feature registered with feature.event(...)",
    ]


def test_a_projector_for_another_features_entity_and_event_is_fine(app_on: AppOn) -> None:
    owner: Feature[Any] = Feature("t3b-owner")
    owner.entity(T3bWidget)
    owner.event(Poked)
    f: Feature[Any] = Feature("t3b")

    @f.projector(T3bWidget, Poked)
    def apply(row: T3bWidget, event: Poked) -> None: ...

    assert isinstance(app_on([owner, f]), App)


# --- all at once --------------------------------------------------------------------------


def test_every_storage_problem_is_listed_in_one_boot_error() -> None:
    a: Feature[Any] = Feature("t3b-a")
    a.entity(T3bWidget)
    f: Feature[Any] = Feature("t3b", projections=[OTHER])
    f.entity(T3bWidget)

    @f.projector(T3bWidget, Unregistered)
    def apply(row: T3bWidget, event: Unregistered) -> None: ...

    _handler(
        f,
        "h",
        lambda p: (
            p.unsafe_projection_upsert(TALLY, on=["key"], row=lambda c: {"key": "k", "count": 1})
            .unsafe_projection_delete(T3bWidget, where=lambda c: T3bWidget.sku == "s")
            .create("g", T3bGhost, data=lambda c: T3bGhost(label="x"))
            .unsafe_projection_upsert(OTHER, on=["key"], row=lambda c: {"key": "k", "count": 1})
        ),
    )
    assert _problems([a, f]) == [
        "feature 't3b': entity table 't3b_widget' is already owned by feature 't3b-a'; "
        "an aggregate belongs to one feature (call it through call_feature)",
        "feature 't3b': projector for Unregistered, which no feature registered with feature.event(...)",
        _not_declared("t3b:h", "unsafe_projection_upsert", "t3b_tally", "t3b", path="0"),
        _aggregate_table("t3b:h", "unsafe_projection_delete", "t3b_widget", path="1"),
        _unregistered_entity("t3b:h", 'aggregate.create "g"', "T3bGhost", path="2"),
    ]


def test_call_feature_to_a_handler_outside_the_app_is_refused() -> None:
    outside: Feature[Any] = Feature("t3b-outside")
    target = outside.write_handler("noop", outside.pipeline(P).return_(lambda c: ok(1)))
    f: Feature[Any] = Feature("t3b", requires=["call_feature"])
    f.write_handler(
        "caller",
        f.pipeline(P).call_feature("r", target, payload=lambda c: c.payload).return_(lambda c: ok(1)),
    )
    assert _problems([f]) == [
        'handler t3b:caller, step 0 (call_feature "r"): call_feature targets t3b-outside:noop, '
        "which is not a handler of any feature of this App"
    ]


class T3bLedger(Entity):
    """Its table was created before ``note`` was added to the class."""

    __tablename__ = "t3b_ledger"
    label: Mapped[str] = mapped_column(sa.String(40))
    note: Mapped[str | None] = mapped_column(sa.String(40), default=None)
    shelf: Mapped[int] = mapped_column(default=0)


def test_create_all_names_every_column_an_existing_table_lacks(db_url: str) -> None:
    """A database made by an older release (``kumiko_consumers`` without ``tx``) and an
    entity that grew a field: ``create_all`` alters neither, and says so at once instead of
    every dispatch and worker pass failing on the first statement naming the column."""
    old = sa.MetaData()
    sa.Table(
        "kumiko_consumers",
        old,
        sa.Column("name", sa.String(400), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("tick", sa.DateTime),
    )
    sa.Table(
        "t3b_ledger",
        old,
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("tenant_id", sa.Uuid),
        sa.Column("version", sa.Integer),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("label", sa.String(40)),
    )
    engine = sa.create_engine(db_url)
    old.create_all(engine)
    engine.dispose()
    f = Feature("t3bl")
    f.entity(T3bLedger)
    app = App([f], database_url=db_url)
    try:
        with pytest.raises(BootError) as raised:
            app.create_all()
        collated = ' COLLATE "C"' if db_url.startswith("postgresql") else ""
        assert raised.value.problems == [
            "table kumiko_consumers has no column tx: the database was made by an older kumiko-typed;"
            " add it: ALTER TABLE kumiko_consumers ADD COLUMN tx BIGINT DEFAULT '0' NOT NULL"
            " (docs/operations.md, Tables and migrations)",
            "table t3b_ledger has no column note: the class has a column its table lacks;"
            f" add it with a migration: ALTER TABLE t3b_ledger ADD COLUMN note VARCHAR(40){collated}",
            "table t3b_ledger has no column shelf: the class has a column its table lacks;"
            " add it with a migration (NOT NULL with no default: the rows already there need a value)",
        ]
        # The statements named run as given; the last column is the migration's to fill.
        with app.engine.begin() as conn:
            for problem in raised.value.problems[:2]:
                conn.execute(
                    sa.text(problem.split(": ", 2)[2].removesuffix(" (docs/operations.md, Tables and migrations)"))
                )
            conn.execute(sa.text("ALTER TABLE t3b_ledger ADD COLUMN shelf INTEGER DEFAULT 0 NOT NULL"))
        app.create_all()
        with app.engine.connect() as conn:  # the other tables were created all the same
            assert sa.inspect(conn).has_table("kumiko_events")
    finally:
        app.dispose()
