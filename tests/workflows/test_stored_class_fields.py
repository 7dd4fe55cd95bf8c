"""Stored attrs values whose attributes ``__init__`` names otherwise — a private attribute
(``_secret``, taken as ``secret=``) or a field ``__init__`` does not take — rebuild after
a suspension; and the reason a changed class cannot rebuild a stored value names fields,
never the stored data (it is shown to operators and groups the pre-deploy check).
Both databases."""

from __future__ import annotations

import enum
import typing
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, time
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, manual, ok
from kumiko_typed._stored_fit import check_of
from kumiko_typed.testing import FakeClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@attrs.frozen
class Begin:
    n: int


@attrs.define
class Account:
    """A private attribute and a field computed by the class itself."""

    owner: str
    _pin: str
    label: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.label = f"{self.owner}'s"


def _card(**fields: Any) -> type[Any]:
    """A version of the class ``Card`` (``fields``: its fields in that deploy)."""
    cls = attrs.make_class("Card", fields, frozen=True)
    cls.__module__, cls.__qualname__ = __name__, "Card"
    return cls


CARD = _card(number=attrs.field(type=str), holder=attrs.field(type=str))


def _deploy(app_on: Callable[..., App], clock: FakeClock, classes: list[type[Any]]) -> tuple[App, Any]:
    f: Feature[Any] = Feature("held")
    pipeline = (
        f.workflow_pipeline(Begin)
        .compute("account", lambda c: Account(f"owner {c.payload.n}", f"pin-{c.payload.n}"))
        .compute("card", lambda c: CARD(f"4111-{c.payload.n}", f"holder {c.payload.n}"))
        .wait("PT1M", name="hold")
        .compute("seen", lambda c: (c.steps["account"]._pin, c.steps["account"].label))
    )
    flow = f.workflow("keep", trigger=manual(Begin), pipeline=pipeline)
    return app_on([f], clock=clock, value_types=classes), flow


def test_private_and_computed_attributes_rebuild_after_a_suspension(app_on: Callable[..., App], user: User) -> None:
    clock = FakeClock(T0)
    app, flow = _deploy(app_on, clock, [Account, CARD])
    run_id = app.start_workflow(flow, Begin(7), user=user)
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(run_id)
    assert info is not None and info.status == "completed", info.error
    assert info.steps["seen"] == ("pin-7", "owner 7's")
    assert info.steps["account"] == Account("owner 7", "pin-7")


def test_a_changed_class_is_named_by_its_fields_never_by_the_stored_values(
    app_on: Callable[..., App], user: User
) -> None:
    clock = FakeClock(T0)
    v1, flow = _deploy(app_on, clock, [Account, CARD])
    runs = [v1.start_workflow(flow, Begin(n), user=user) for n in range(3)]
    cases = {
        "required field added": (
            _card(number=attrs.field(type=str), holder=attrs.field(type=str), cvc=attrs.field(type=str)),
            "Card now requires 'cvc', which it lacks",
        ),
        "field dropped": (_card(number=attrs.field(type=str)), "it has 'holder', which Card no longer has"),
        "validator refuses": (
            _card(number=attrs.field(type=int, validator=attrs.validators.instance_of(int)), holder=attrs.field()),
            "a stored field does not pass Card's checks (TypeError)",
        ),
    }
    for case, (card, words) in cases.items():
        later, _ = _deploy(app_on, clock, [Account, card])
        (group,) = later.check_runs()  # every run in one group: the reason quotes no run's values
        assert sorted(group.run_ids) == sorted(runs), case
        assert group.reason == (
            f"at step hold: the stored state cannot be read: stored {__name__}.Card cannot be rebuilt: {words}; "
            "a deploy with the class as the run stored it resumes the run"
        ), case
        assert "4111" not in group.reason and "holder 0" not in group.reason


# --- an entity value whose class lost a column ------------------------------------------------


class SceCrate(Entity):
    __tablename__ = "sce_crate"
    label: Mapped[str]
    holder: Mapped[str]


class SceCrateLater(Entity):
    """``SceCrate`` after a deploy dropped its ``holder`` column (its own table here: one
    process cannot map two versions of one table)."""

    __tablename__ = "sce_crate_later"
    label: Mapped[str]


SceCrateLater.__name__ = SceCrateLater.__qualname__ = "SceCrate"
OTHER_TENANT = User(id=uuid.UUID(int=2), tenant_id=uuid.UUID(int=22))


def _crate_deploy(app_on: Callable[..., App], clock: FakeClock, crate: type[Any]) -> App:
    """``sce:crated`` stores a ``crate`` entity before its wait; ``sce:plain`` stores only
    an attrs value (its class unchanged in every deploy)."""
    f: Feature[Any] = Feature("sce")
    f.entity(crate)
    fields = {"label": lambda n: f"crate {n}", "holder": lambda n: f"holder {n}"}

    def made(n: int) -> Any:
        return crate(**{name: fields[name](n) for name in ("label", "holder") if name in crate.__table__.columns})

    crated = (
        f.workflow_pipeline(Begin)
        .create("crate", crate, data=lambda c: made(c.payload.n))
        .wait("PT1M", name="hold")
        .compute("seen", lambda c: c.steps["crate"].entity.label)
    )
    f.workflow("crated", trigger=manual(Begin), pipeline=crated)
    plain = (
        f.workflow_pipeline(Begin)
        .compute("account", lambda c: Account(f"owner {c.payload.n}", "pin"))
        .wait("PT1M", name="hold")
        .compute("seen", lambda c: c.steps["account"].owner)
    )
    f.workflow("plain", trigger=manual(Begin), pipeline=plain)
    return app_on([f], clock=clock, value_types=[Account])


def test_an_entity_value_whose_class_dropped_a_stored_column_strands_its_runs_as_the_check_says(
    app_on: Callable[..., App], user: User
) -> None:
    """Not rebuilt with the dropped column set as a stray attribute: the run is stranded,
    its reason naming the column only, and the pre-deploy check lists it with that reason;
    a deploy with the column back resumes it."""
    clock = FakeClock(T0)
    v1 = _crate_deploy(app_on, clock, SceCrate)
    crated, plain = v1.workflows["sce:crated"], v1.workflows["sce:plain"]
    runs = [v1.start_workflow(crated, Begin(n), user=who) for n, who in ((1, user), (2, user), (3, OTHER_TENANT))]
    untouched = v1.start_workflow(plain, Begin(4), user=user)
    assert v1.check_runs() == []  # the classes that stored them: nothing to list

    v2 = _crate_deploy(app_on, clock, SceCrateLater)
    reason = (
        f"at step hold: the stored state cannot be read: stored {__name__}.SceCrate cannot be rebuilt: "
        "it has 'holder', which SceCrate no longer has; a deploy with the class as the run stored it resumes the run"
    )
    checked = v2.check_runs()
    assert [(g.workflow, g.path, g.reason, g.run_ids) for g in checked] == [
        ("sce:crated", "hold", reason, tuple(sorted(runs)))  # every tenant's, one group: no value in the reason
    ]
    clock.advance(minutes=2)
    assert v2.run_worker(once=True)["resumed"] == 1  # the plain run only
    for run_id in runs:
        info = v2.get_run(run_id)
        assert info is not None
        assert (info.status, info.path, info.error) == ("suspended", "hold", {"code": "stranded", "message": reason})
    done = v2.get_run(untouched)
    assert done is not None and (done.status, done.steps["seen"]) == ("completed", "owner 4")
    assert sorted(r.run_id for r in v2.runs(stranded=True)) == sorted(runs)
    assert v2.check_runs() == checked

    v3 = _crate_deploy(app_on, clock, SceCrate)
    assert v3.run_worker(once=True)["resumed"] == 3
    for n, run_id in enumerate(runs, start=1):
        info = v3.get_run(run_id)
        assert info is not None and (info.status, info.error, info.steps["seen"]) == ("completed", None, f"crate {n}")


# --- an entity value whose class gained a column ----------------------------------------------


class SceBox(Entity):
    __tablename__ = "sce_box"
    label: Mapped[str]


class SceBoxOptional(Entity):
    """``SceBox`` after a deploy added columns a stored value has a value for: a nullable
    one (``None``) and one with a constant default (the default)."""

    __tablename__ = "sce_box_optional"
    label: Mapped[str]
    note: Mapped[str | None]
    tier: Mapped[int] = mapped_column(default=3)


class SceBoxRequired(Entity):
    """``SceBox`` after a deploy added a column no stored value has a value for."""

    __tablename__ = "sce_box_required"
    label: Mapped[str]
    cvc: Mapped[str]
    stamp: Mapped[str] = mapped_column(server_default="x")


class SceBoxRetyped(Entity):
    """``SceBox`` after a deploy made its ``label`` column an integer."""

    __tablename__ = "sce_box_retyped"
    label: Mapped[int]


for _later in (SceBoxOptional, SceBoxRequired, SceBoxRetyped):
    _later.__name__ = _later.__qualname__ = "SceBox"


def _box_deploy(app_on: Callable[..., App], clock: FakeClock, box: type[Any]) -> App:
    """``sce:boxed`` stores a ``box`` entity before its wait, and reads it back after."""
    f: Feature[Any] = Feature("sce")
    f.entity(box)
    boxed = (
        f.workflow_pipeline(Begin)
        .create("box", box, data=lambda c: box(label=f"box {c.payload.n}"))
        .wait("PT1M", name="hold")
        .compute("seen", lambda c: [getattr(c.steps["box"].entity, k, "unset") for k in ("label", "note", "tier")])
    )
    f.workflow("boxed", trigger=manual(Begin), pipeline=boxed)
    return app_on([f], clock=clock)


def test_an_entity_value_whose_class_gained_columns_reads_them_as_none_or_default(
    app_on: Callable[..., App], user: User
) -> None:
    """A nullable column added since reads ``None`` and one with a constant default reads
    that default: the run resumes, and the check lists nothing."""
    clock = FakeClock(T0)
    v1 = _box_deploy(app_on, clock, SceBox)
    run_id = v1.start_workflow(v1.workflows["sce:boxed"], Begin(1), user=user)
    v2 = _box_deploy(app_on, clock, SceBoxOptional)
    assert v2.check_runs() == []
    clock.advance(minutes=2)
    assert v2.run_worker(once=True)["resumed"] == 1
    info = v2.get_run(run_id)
    assert info is not None and (info.status, info.error) == ("completed", None)
    assert info.steps["seen"] == ["box 1", None, 3]


def test_an_entity_value_whose_class_gained_a_required_column_strands_its_runs_as_the_check_says(
    app_on: Callable[..., App], user: User
) -> None:
    """A column added since that is not nullable and has no constant default (a server
    default is not one this process can know) has no value to read: not left unset (read
    as ``None`` where it never is), the run is stranded naming the columns, as the check
    says, in every tenant; the deploy of the class it stored resumes it."""
    clock = FakeClock(T0)
    v1 = _box_deploy(app_on, clock, SceBox)
    runs = [
        v1.start_workflow(v1.workflows["sce:boxed"], Begin(n), user=who) for n, who in ((1, user), (2, OTHER_TENANT))
    ]
    v2 = _box_deploy(app_on, clock, SceBoxRequired)
    reason = (
        f"at step hold: the stored state cannot be read: stored {__name__}.SceBox cannot be rebuilt: "
        "SceBox now requires 'cvc', 'stamp', which it lacks; "
        "a deploy with the class as the run stored it resumes the run"
    )
    assert [(g.path, g.reason, g.run_ids) for g in v2.check_runs()] == [("hold", reason, tuple(sorted(runs)))]
    clock.advance(minutes=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    for run_id in runs:
        info = v2.get_run(run_id)
        assert info is not None
        assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": reason})

    v3 = _box_deploy(app_on, clock, SceBox)
    assert v3.run_worker(once=True)["resumed"] == 2
    for n, run_id in enumerate(runs, start=1):
        info = v3.get_run(run_id)
        assert info is not None and (info.status, info.steps["seen"]) == ("completed", [f"box {n}", "unset", "unset"])


def test_an_entity_value_whose_column_a_deploy_retyped_strands_its_runs_as_the_check_says(
    app_on: Callable[..., App], user: User
) -> None:
    """An entity value is rebuilt without ``__init__`` and its columns set as stored: a
    deploy that made ``label: str`` an ``int`` handed the resumed steps the stored text,
    and the check listed nothing.  Its columns are judged by their annotations as an
    attrs value's fields are (one check, ``_stored_fit``): the run is stranded naming the
    column, as the check says, and the deploy of the class it stored resumes it."""
    clock = FakeClock(T0)
    v1 = _box_deploy(app_on, clock, SceBox)
    run_id = v1.start_workflow(v1.workflows["sce:boxed"], Begin(1), user=user)
    v2 = _box_deploy(app_on, clock, SceBoxRetyped)
    reason = (
        f"at step hold: the stored state cannot be read: stored {__name__}.SceBox cannot be rebuilt: "
        "its 'label' holds a str, and SceBox now says int; "
        "a deploy with the class as the run stored it resumes the run"
    )
    assert [(g.path, g.reason, g.run_ids) for g in v2.check_runs()] == [("hold", reason, (run_id,))]
    clock.advance(minutes=2)
    assert v2.run_worker(once=True)["resumed"] == 0
    info = v2.get_run(run_id)
    assert info is not None
    assert (info.status, info.error) == ("suspended", {"code": "stranded", "message": reason})

    v3 = _box_deploy(app_on, clock, SceBox)
    assert v3.check_runs() == []
    assert v3.run_worker(once=True)["resumed"] == 1
    info = v3.get_run(run_id)
    assert info is not None and (info.status, info.steps["seen"]) == ("completed", ["box 1", "unset", "unset"])


class SceTill(Entity):
    """Columns whose loaded value is not their annotation's type: a ``Numeric`` column
    annotated ``float`` loads a ``Decimal``, and a nullable one annotated ``str`` holds ``None``."""

    __tablename__ = "sce_till"
    amount: Mapped[float] = mapped_column(sa.Numeric(10, 2))
    memo: Mapped[str] = mapped_column(nullable=True)


def test_an_entity_row_holding_what_its_columns_load_resumes_under_the_release_that_stored_it(
    app_on: Callable[..., App], user: User
) -> None:
    """The column check takes what the database itself gives for a column (its SQL type's
    Python type, ``None`` where nullable), not the annotation alone: a row read before a
    wait is handed back after it by the same release, not stranded by its own check."""
    clock = FakeClock(T0)
    f: Feature[Any] = Feature("sce")
    f.entity(SceTill)
    f.write_handler(
        "open",
        f.pipeline(Begin)
        .create("made", SceTill, data=lambda c: SceTill(amount=1.5, memo=None))
        .return_(lambda c: ok(c.steps["made"].id)),
    )
    till = (
        f.workflow_pipeline(Begin)
        .get_one("row", lambda c: sa.select(SceTill))  # loaded from the database: a Decimal
        .wait("PT1M", name="hold")
        .compute("seen", lambda c: (type(c.steps["row"].amount).__name__, c.steps["row"].memo))
    )
    f.workflow("till", trigger=manual(Begin), pipeline=till)
    app = app_on([f], clock=clock)
    assert isinstance(app.dispatch(app.handlers["sce:open"], Begin(1), user=user), Ok)
    run_id = app.start_workflow(app.workflows["sce:till"], Begin(1), user=user)
    assert app.check_runs() == []
    clock.advance(minutes=2)
    assert app.run_worker(once=True)["resumed"] == 1
    info = app.get_run(run_id)
    assert info is not None and (info.status, info.steps["seen"]) == ("completed", ("Decimal", None))


class Shade(enum.Enum):
    LIGHT = "light"
    DARK = "dark"


class ScPaint(Entity):
    """An entity whose Enum column's class no event or payload names."""

    __tablename__ = "sc_paint"
    shade: Mapped[Shade] = mapped_column(sa.Enum(Shade), default=Shade.LIGHT)


def test_an_entity_with_an_enum_column_is_stored_across_a_wait(app_on: Callable[..., App]) -> None:
    """A run that read such an entity (``get_one``) and then waited failed with
    ``unstorable_state`` ('a ...Shade cannot be stored'): the codec knew the enums of
    events and payloads, not of entity columns."""
    f: Any = Feature("sc")
    f.entity(ScPaint)
    paint = f.write_handler(
        "paint",
        f.pipeline(Begin)
        .create("p", ScPaint, data=lambda c: ScPaint(shade=Shade.DARK))
        .return_(lambda c: ok(c.steps["p"].id)),
    )
    flow = f.workflow(
        "look",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .get_one("paint", lambda c: sa.select(ScPaint))
        .wait("PT1M")
        .compute("shade", lambda c: c.steps["paint"].shade),
    )
    run = _across_a_wait(app_on, f, paint, flow)
    assert run.status == "completed" and run.steps["shade"] is Shade.DARK


def _across_a_wait(app_on: Callable[..., App], f: Any, write: Any, flow: Any) -> Any:
    """The run of ``flow`` (one minute's wait) after ``write`` made its entity: it
    suspended with no error, then the worker resumed it."""
    clock = FakeClock(T0)
    app = app_on([f], clock=clock)
    user = User(id=uuid.uuid4(), tenant_id=uuid.uuid4())
    app.dispatch(write, Begin(1), user=user)
    run_id = app.start_workflow(flow, Begin(1), user=user)
    run = app.get_run(run_id)
    assert run is not None and (run.status, run.error) == ("suspended", None)
    clock.advance(minutes=1)
    app.run_worker(once=True)
    return app.get_run(run_id)


class ScScan(Entity):
    """An entity with a binary and a time-of-day column."""

    __tablename__ = "sc_scan"
    image: Mapped[bytes] = mapped_column(sa.LargeBinary)
    opens: Mapped[time] = mapped_column(sa.Time)


def test_bytes_and_times_of_day_are_stored_across_a_wait(app_on: Callable[..., App]) -> None:
    """A run holding bytes (a step's, or an entity's LargeBinary column) or a time of day
    (a Time column) failed with ``unstorable_state`` at its first wait: the state codec
    had no tag for either.  A bytearray comes back as bytes."""
    f: Any = Feature("scb")
    f.entity(ScScan)
    image = bytes(range(256))
    scan = f.write_handler(
        "scan",
        f.pipeline(Begin)
        .create("s", ScScan, data=lambda c: ScScan(image=image, opens=time(8, 30, 15, 250)))
        .return_(lambda c: ok(c.steps["s"].id)),
    )
    flow = f.workflow(
        "look",
        trigger=manual(Begin),
        pipeline=f.workflow_pipeline(Begin)
        .get_one("scan", lambda c: sa.select(ScScan))
        .compute("raw", lambda c: (b"\x00\xff", bytearray(b"ab"), time(23, 59, tzinfo=UTC)))
        .wait("PT1M")
        .compute("seen", lambda c: (c.steps["scan"].image, c.steps["scan"].opens, c.steps["raw"])),
    )
    run = _across_a_wait(app_on, f, scan, flow)
    assert run.status == "completed", run
    assert run.steps["seen"] == (image, time(8, 30, 15, 250), (b"\x00\xff", b"ab", time(23, 59, tzinfo=UTC)))
    assert type(run.steps["seen"][2][1]) is bytes


class _Tint(enum.StrEnum):
    RED = "red"


class _Plain(enum.Enum):
    RED = "red"


_Cents = typing.NewType("_Cents", int)


@pytest.mark.parametrize(
    ("value", "annotation", "fits"),
    [
        (1, float, True),  # PEP 484's numeric tower
        (True, int, True),  # a bool is an int to the checkers: no run strands over one
        (True, float, True),
        ("1", int, False),
        ("red", _Tint, True),  # a StrEnum member an earlier release stored as its plain value
        ("blue", _Tint, False),
        ("red", _Plain, False),  # a plain Enum's value is no member
        (3, _Cents, True),
        ("3", _Cents, False),
        (None, int | None, True),
        ("a", typing.Literal["a", "b"], True),
        (1, typing.Literal["a", "b"], False),
        ([1, "a"], list[int], False),
        ((1, "a"), tuple[int, str], True),
        ((1, 2, "a"), tuple[int, ...], False),
        ((), tuple[()], True),
        ({"a": 1}, dict[str, int], True),
        ({1: 1}, dict[str, int], False),
        ("abc", typing.Sequence[str], True),
        (frozenset({1}), frozenset[str], False),
        (object(), Any, True),
        (1, typing.Annotated[str, "note"], False),
    ],
)
def test_a_stored_field_fits_its_annotation_by_the_values_own_types(value: object, annotation: Any, fits: bool) -> None:
    """What the codec asks of each field of a rebuilt attrs value (``_stored_fit``)."""
    assert check_of(annotation)(value) is fits
