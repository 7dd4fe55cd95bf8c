"""The event store as an API (issue 14 item 4, with the tenancy of issue 18 item 1), on
SQLite and PostgreSQL: ``read_stream`` gives typed events, ``rebuild_projection`` replays
them into the table (or verifies it), upcasters read payloads stored by older event
schemas, ``create(event=...)`` stores a named creation event — and another tenant's
stream is ``not_found``, its rows out of reach, unless the user is a sysadmin."""

from __future__ import annotations

import base64
import enum
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from _sql_log import statements
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import (
    AggregateCreated,
    AggregateUpdated,
    App,
    BootError,
    Entity,
    Feature,
    ProjectionReport,
    User,
    manual,
    ok,
    on_event,
)
from kumiko_typed._tables import events
from kumiko_typed.testing import FakeClock

AppOn = Callable[..., App]
T0 = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)


class EsBooking(Entity):
    __tablename__ = "es_booking"
    guest: Mapped[str] = mapped_column(sa.String(100))
    nights: Mapped[int]
    status: Mapped[str] = mapped_column(sa.String(20), default="open")
    notes: Mapped[list[str]] = mapped_column(sa.JSON, default_factory=list)


BOOKINGS: sa.Table = EsBooking.__table__  # type: ignore[assignment]


@attrs.frozen
class Book:
    guest: str
    nights: int


@attrs.frozen
class BookingStarted:
    guest: str
    nights: int


@attrs.frozen
class Expect:
    """Wait for an ``Extended`` event with this ``reason``."""

    reason: str


@attrs.frozen
class Rename:
    id: uuid.UUID
    guest: str
    version: int


@attrs.frozen
class Extend:
    id: uuid.UUID
    nights: int


@attrs.frozen
class ExtendedV1:
    """The first schema of the "extended" event: ``days``."""

    days: int


@attrs.frozen
class Extended:
    """Its second schema: ``nights`` and a ``reason``."""

    nights: int
    reason: str


def _v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {"nights": payload["days"], "reason": "(before reasons)"}


def _feature(*, schema: int = 2) -> tuple[Feature[Any], dict[str, Any]]:
    """The booking feature; ``schema=1`` is its older code, storing ``ExtendedV1``."""
    f: Feature[Any] = Feature("es")
    f.entity(EsBooking)
    f.event(BookingStarted, name="booking-started")
    if schema == 1:
        f.event(ExtendedV1, name="extended")
    else:
        f.event(Extended, name="extended", version=2, upcasters={1: _v1_to_v2})

    @f.projector(EsBooking, BookingStarted)
    def started(row: EsBooking, event: BookingStarted) -> None:
        row.guest, row.nights = event.guest, event.nights

    @f.projector(EsBooking, ExtendedV1 if schema == 1 else Extended)
    def extended(row: EsBooking, event: Any) -> None:
        row.nights += event.days if schema == 1 else event.nights

    h: dict[str, Any] = {}
    h["book"] = f.write_handler(
        "book",
        f.pipeline(Book)
        .create(
            "b",
            EsBooking,
            data=lambda c: EsBooking(guest=c.payload.guest, nights=c.payload.nights),
            event=lambda c: BookingStarted(c.payload.guest, c.payload.nights),
        )
        .return_(lambda c: ok(c.steps["b"].id)),
    )
    h["plain"] = f.write_handler(
        "plain",
        f.pipeline(Book)
        .create("b", EsBooking, data=lambda c: EsBooking(guest=c.payload.guest, nights=c.payload.nights))
        .return_(lambda c: ok(c.steps["b"].id)),
    )
    h["rename"] = f.write_handler(
        "rename",
        f.pipeline(Rename)
        .update(
            "b",
            EsBooking,
            id=lambda c: c.payload.id,
            changes=lambda c: {"guest": c.payload.guest},
            version=lambda c: c.payload.version,
        )
        .return_(lambda c: ok(None)),
    )
    h["extend"] = f.write_handler(
        "extend",
        f.pipeline(Extend)
        .append_event(
            EsBooking,
            id=lambda c: c.payload.id,
            event=(
                (lambda c: ExtendedV1(c.payload.nights))
                if schema == 1
                else (lambda c: Extended(c.payload.nights, "asked"))
            ),
            headers={"source": "test"},
        )
        .return_(lambda c: ok(None)),
    )
    h["await"] = f.workflow(
        "await",
        trigger=manual(Expect),
        pipeline=f.workflow_pipeline(Expect).wait_for_event(  # the old code waits for its own class
            "ext",
            ExtendedV1 if schema == 1 else Extended,
            key=lambda c: c.payload.reason,
            event_key=lambda e: e.reason,
            timeout="PT1H",
        ),
    )
    h["welcome"] = f.workflow(
        "welcome",
        trigger=on_event(BookingStarted),
        pipeline=f.workflow_pipeline(BookingStarted).compute("guest", lambda c: c.payload.guest),
    )
    return f, h


@pytest.fixture
def two(app_on: AppOn, make_user: Callable[..., User]) -> tuple[App, dict[str, Any], User, User, User]:
    """The App, its handlers, a user of tenant A, one of tenant B and a sysadmin of a third."""
    f, h = _feature()
    return app_on([f], clock=lambda: T0), h, make_user(), make_user(), make_user("sysadmin")


def test_read_stream_gives_each_event_typed_with_its_metadata(two: Any) -> None:
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    correlation = uuid.uuid4()
    ok_data(app.dispatch(h["rename"], Rename(booking, "Anne", 1), user=alice, correlation_id=correlation))
    ok_data(app.dispatch(h["extend"], Extend(booking, 3), user=alice))

    stream = ok_data(app.read_stream(EsBooking, booking, user=alice))

    assert [(e.version, e.type, e.schema_version) for e in stream] == [
        (1, "es-booking.created", 1),
        (2, "es-booking.updated", 1),
        (3, "extended", 2),
    ]
    created, updated, extended = (e.event for e in stream)
    assert isinstance(created, AggregateCreated)
    assert created.values["guest"] == "Ann" and created.values["id"] == booking
    assert created.values["created_at"] == T0  # column values come back typed, not as JSON text
    assert updated == AggregateUpdated({"guest": "Anne"})
    assert extended == Extended(3, "asked")
    assert {(e.user_id, e.tenant_id, e.occurred_at, e.stream_id) for e in stream} == {
        (alice.id, alice.tenant_id, T0, booking)
    }
    assert stream[1].correlation_id == correlation
    assert stream[2].headers == {"source": "test"}
    assert stream[0].position < stream[1].position < stream[2].position


def test_another_tenants_stream_is_not_found_without_its_data_but_a_sysadmin_reads_it(two: Any) -> None:
    app, h, alice, bob, root = two
    booking = ok_data(app.dispatch(h["plain"], Book("Secret Guest", 1), user=alice))

    refused = failure_of(app.read_stream(EsBooking, booking, user=bob), "not_found")
    unknown = failure_of(app.read_stream(EsBooking, uuid.uuid4(), user=alice), "not_found")

    assert "Secret" not in f"{refused.message} {refused.details}"
    assert refused.message == f"EsBooking {booking} not found"  # as for a stream that does not exist:
    assert unknown.message.startswith("EsBooking ") and unknown.message.endswith(" not found")
    assert [e.type for e in ok_data(app.read_stream(EsBooking, booking, user=root))] == ["es-booking.created"]
    failure_of(app.read_stream(Book, booking, user=alice), "not_found")  # not an entity
    failure_of(app.read_stream(EsBooking, booking, user="alice"), "access_denied")  # type: ignore[arg-type]


def test_a_stream_id_that_is_no_uuid_is_a_validation_error_without_the_text(two: Any) -> None:
    """As cancel_run and requeue answer an id of the wrong type: the argument named, the
    caller's text (a URL segment, say) not echoed into the message."""
    app, _, alice, _, _ = two
    wrongs: tuple[Any, ...] = ("nope", "<script>alert(1)</script>", "", str(uuid.uuid4()), 7, None)
    for wrong in wrongs:
        refused = failure_of(app.read_stream(EsBooking, wrong, user=alice), "validation_error")
        name = type(wrong).__name__
        assert refused.message == f"id must be a UUID, not {name}"
        assert refused.details == [{"path": "id", "message": f"id must be a UUID, not {name}"}]
    # The entity and the user are checked first, as for a UUID.
    failure_of(app.read_stream(Book, wrongs[0], user=alice), "not_found")
    failure_of(app.read_stream(EsBooking, wrongs[0], user=wrongs[0]), "access_denied")


def test_a_long_stream_is_read_in_pages_from_a_version_with_a_limit(two: Any) -> None:
    """A stream of thousands of events is not read whole to show its latest ones: the
    page is cut by the database (LIMIT on the stream's index), a page past the end is
    empty rather than ``not_found``, and another tenant's stream stays ``not_found``."""
    app, h, alice, bob, root = two
    booking = ok_data(app.dispatch(h["book"], Book("Ann", 1), user=alice))
    for _ in range(4):
        ok_data(app.dispatch(h["extend"], Extend(booking, 1), user=alice))

    def versions(**page: Any) -> list[int]:
        return [e.version for e in ok_data(app.read_stream(EsBooking, booking, user=alice, **page))]

    with statements(app.engine) as sent:
        first = versions(limit=2)
    assert first == [1, 2]
    [read] = [s for s in sent if "FROM kumiko_events" in s]
    assert " LIMIT " in read
    assert versions(from_version=first[-1] + 1, limit=2) == [3, 4]
    assert versions(from_version=5, limit=2) == [5]
    assert versions(from_version=4) == [4, 5]
    assert versions(from_version=6) == []
    assert versions() == [1, 2, 3, 4, 5]
    assert [e.event for e in ok_data(app.read_stream(EsBooking, booking, user=alice, from_version=3, limit=1))] == [
        Extended(1, "asked")
    ]
    failure_of(app.read_stream(EsBooking, booking, user=bob, from_version=6), "not_found")
    failure_of(app.read_stream(EsBooking, uuid.uuid4(), user=alice, from_version=2), "not_found")
    assert len(ok_data(app.read_stream(EsBooking, booking, user=root, from_version=2, limit=3))) == 3
    assert versions(from_version=2**31 - 1, limit=2**31 - 1) == []


@pytest.mark.parametrize(
    ("page", "path", "given"),
    [
        ({"from_version": 0}, "from_version", "0"),
        ({"from_version": -3}, "from_version", "-3"),
        ({"from_version": "2"}, "from_version", "a str"),
        ({"from_version": True}, "from_version", "a bool"),
        ({"from_version": 2.0}, "from_version", "a float"),
        ({"limit": 0}, "limit", "0"),
        ({"limit": "10"}, "limit", "a str"),
        ({"limit": False}, "limit", "a bool"),
        ({"from_version": 2**31}, "from_version", "2147483648"),
        ({"limit": 2**63}, "limit", "9223372036854775808"),
        ({"from_version": 10**30}, "from_version", str(10**30)),
    ],
)
def test_a_page_that_is_no_integer_of_a_stream_versions_range_is_a_validation_error_naming_it(
    two: Any, page: dict[str, Any], path: str, given: str
) -> None:
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["book"], Book("Ann", 1), user=alice))

    refused = failure_of(app.read_stream(EsBooking, booking, user=alice, **page), "validation_error")

    message = f"{path} must be an integer from 1 to 2147483647, not {given}"
    assert (refused.message, refused.details) == (message, [{"path": path, "message": message}])


def test_a_named_creation_event_is_stored_replayed_and_read_as_its_class(two: Any) -> None:
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["book"], Book("Ann", 2), user=alice))

    (started,) = ok_data(app.read_stream(EsBooking, booking, user=alice))

    assert (started.type, started.event, started.version) == ("booking-started", BookingStarted("Ann", 2), 1)
    app.run_worker(once=True)  # the creation event starts the runs its class triggers
    assert [(r.status, r.steps["guest"]) for r in app.runs(h["welcome"])] == [("completed", "Ann")]
    with app.engine.begin() as conn:
        conn.execute(sa.update(BOOKINGS).values(guest="drifted", status="lost"))
    report = ok_data(app.rebuild_projection(EsBooking, user=alice))
    with app.engine.connect() as conn:
        row = conn.execute(sa.select(BOOKINGS.c.guest, BOOKINGS.c.nights, BOOKINGS.c.status)).one()
    assert report.changed == {booking: ("guest", "status")}
    assert tuple(row) == ("Ann", 2, "open")  # the projector's fields, the rest the entity's defaults


def _drift(app: App, booking: uuid.UUID, **values: object) -> None:
    with app.engine.begin() as conn:
        conn.execute(sa.update(BOOKINGS).where(BOOKINGS.c.id == booking).values(**values))


def _rows(app: App) -> dict[uuid.UUID, tuple[Any, ...]]:
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(BOOKINGS.c.id, BOOKINGS.c.guest, BOOKINGS.c.nights, BOOKINGS.c.version))
        return {r.id: (r.guest, r.nights, r.version) for r in rows}


def test_rebuild_verifies_then_repairs_one_tenants_rows_and_leaves_the_others(two: Any) -> None:
    app, h, alice, bob, _ = two
    a1 = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    a2 = ok_data(app.dispatch(h["book"], Book("Abe", 1), user=alice))
    b1 = ok_data(app.dispatch(h["plain"], Book("Bea", 5), user=bob))
    ok_data(app.dispatch(h["rename"], Rename(a1, "Anne", 1), user=alice))
    ok_data(app.dispatch(h["extend"], Extend(a1, 3), user=alice))
    truth = _rows(app)
    assert truth[a1] == ("Anne", 5, 3)
    assert ok_data(app.rebuild_projection(EsBooking, user=alice, verify=True)).matches

    _drift(app, a1, nights=99)
    _drift(app, b1, guest="Mallory")
    with app.engine.begin() as conn:
        conn.execute(sa.delete(BOOKINGS).where(BOOKINGS.c.id == a2))
    drifted = _rows(app)
    verified = ok_data(app.rebuild_projection(EsBooking, user=alice, verify=True))

    assert isinstance(verified, ProjectionReport) and verified.verified and not verified.matches
    assert (verified.streams, dict(verified.changed), verified.missing, verified.extra) == (
        2,
        {a1: ("nights",)},
        (a2,),
        (),
    )
    assert _rows(app) == drifted  # verify writes nothing

    repaired = ok_data(app.rebuild_projection(EsBooking, user=alice))
    assert not repaired.verified and repaired.changed == verified.changed and repaired.missing == (a2,)
    after = _rows(app)
    assert (after[a1], after[a2]) == (truth[a1], truth[a2])
    assert after[b1] == ("Mallory", 5, 1)  # tenant B's row is not alice's to rebuild
    assert ok_data(app.rebuild_projection(EsBooking, user=alice, verify=True)).matches


def test_rebuilding_other_tenants_needs_the_sysadmin_role(two: Any) -> None:
    app, h, alice, bob, root = two
    a1 = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    b1 = ok_data(app.dispatch(h["plain"], Book("Bea", 5), user=bob))
    _drift(app, a1, nights=0)
    _drift(app, b1, nights=0)
    with app.engine.begin() as conn:  # a row without any stream, in tenant B
        orphan = uuid.uuid4()
        conn.execute(
            sa.insert(BOOKINGS).values(
                id=orphan,
                tenant_id=bob.tenant_id,
                guest="ghost",
                nights=1,
                status="open",
                notes=[],
                version=1,
                created_at=T0,
                updated_at=T0,
            )
        )

    failure_of(app.rebuild_projection(EsBooking, user=alice, tenant=bob.tenant_id), "access_denied")
    failure_of(app.rebuild_projection(EsBooking, user=alice, tenant="all"), "access_denied")
    failure_of(app.rebuild_projection(EsBooking, user=root, tenant="everyone"), "validation_error")  # type: ignore[arg-type]
    assert _rows(app)[b1] == ("Bea", 0, 1)

    one = ok_data(app.rebuild_projection(EsBooking, user=root, tenant=bob.tenant_id))
    assert (dict(one.changed), one.extra) == ({b1: ("nights",)}, (orphan,))
    assert _rows(app)[a1] == ("Ann", 0, 1)
    every = ok_data(app.rebuild_projection(EsBooking, user=root, tenant="all"))
    assert (every.streams, dict(every.changed)) == (2, {a1: ("nights",)})
    assert _rows(app) == {a1: ("Ann", 2, 1), b1: ("Bea", 5, 1)}


def test_a_tenant_that_is_no_uuid_is_refused_naming_its_type_and_how_to_parse_text(two: Any) -> None:
    """Was "tenant= must be a tenant id, 'all' or None" for a tenant id's own text (from a
    URL, say): the type given and the fix named, as read_stream names a stream id's, and
    the text never echoed.  Refused before anything is read, as for every user."""
    app, _, alice, _, root = two
    wanted = "tenant= must be a tenant id (a UUID), 'all' or None (the user's tenant)"
    wrongs: tuple[tuple[Any, str], ...] = (
        (str(alice.tenant_id), f"{wanted}, not str (parse a tenant id's text with uuid.UUID(...))"),
        ("<script>", f"{wanted}, not str (parse a tenant id's text with uuid.UUID(...))"),
        (7, f"{wanted}, not int"),
        (alice.tenant_id.bytes, f"{wanted}, not bytes"),
    )
    for wrong, message in wrongs:
        for who in (alice, root):
            refused = failure_of(app.rebuild_projection(EsBooking, user=who, tenant=wrong), "validation_error")
            assert (refused.message, refused.details) == (message, [{"path": "tenant", "message": message}])


def test_events_stored_by_an_older_schema_are_upcast_in_streams_replays_and_waits(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """A rolling deploy: the new code (schema 2) waits for ``extended`` while old code
    (schema 1) still appends it; the new code reads the old payloads as version 2."""
    clock = FakeClock(T0)
    new_f, new = _feature()
    old_f, old = _feature(schema=1)
    new_app = app_on([new_f], clock=clock)
    old_app = app_on([old_f], clock=clock)
    alice = make_user()
    booking = ok_data(new_app.dispatch(new["book"], Book("Ann", 2), user=alice))
    # Its key is the reason only schema 2 has: the upcaster's, for an event stored as v1.
    run = new_app.start_workflow(new["await"], Expect("(before reasons)"), user=alice)
    ok_data(old_app.dispatch(old["extend"], Extend(booking, 4), user=alice))

    with new_app.engine.connect() as conn:
        stored = conn.execute(
            sa.select(events.c.schema_version, events.c.payload).where(events.c.type == "extended")
        ).one()
    assert tuple(stored) == (1, {"days": 4})
    old_event = ok_data(new_app.read_stream(EsBooking, booking, user=alice))[1]
    assert (old_event.schema_version, old_event.event) == (1, Extended(4, "(before reasons)"))

    new_app.run_worker(once=True)
    info = new_app.get_run(run)
    assert info is not None and info.status == "completed"
    assert info.steps["ext"] == Extended(4, "(before reasons)")
    _drift(new_app, booking, nights=0)
    report = ok_data(new_app.rebuild_projection(EsBooking, user=alice))
    assert report.changed == {booking: ("nights",)} and _rows(new_app)[booking] == ("Ann", 6, 2)


def test_boot_refuses_upcasters_that_cannot_read_every_older_version_and_shared_type_names() -> None:
    f: Feature[Any] = Feature("es-bad")
    f.entity(EsBooking)
    f.event(Extended, name="extended", version=3, upcasters={1: _v1_to_v2})
    f.event(ExtendedV1, name="extended", version=0)
    f.event(BookingStarted, name="es-booking.created")
    f.event(Expect, name="booking-started")
    f.event(Book, name="booking-started")

    with pytest.raises(BootError) as caught:
        App([f], database_url="sqlite://")

    assert sorted(caught.value.problems) == [
        "feature 'es-bad': event Book takes the type name 'booking-started' of Expect; give one of them another name=",
        "feature 'es-bad': event BookingStarted takes the framework's type name 'es-booking.created'",
        "feature 'es-bad': event(Extended): upcasters= needs one function per older version (1: fn, 2: fn), not [1]",
        "feature 'es-bad': event(ExtendedV1): version=0 must be an integer of at least 1",
    ]


def test_boot_refuses_two_entity_classes_of_one_aggregate_type() -> None:
    """``shop.Order`` and ``billing.Order`` are both ``"order"`` by default: each read
    the other's streams (``read_stream`` gave a billing order as a shop one), and a
    rebuild of one copied the other's aggregates into its table as "missing" rows."""
    shop: Feature[Any] = Feature("shop")
    shop.entity(EsBooking, name="order")
    rooms: Feature[Any] = Feature("rooms")
    rooms.entity(EsRoom, name="order")

    with pytest.raises(BootError) as caught:
        App([shop, rooms], database_url="sqlite://")

    assert caught.value.problems == [
        f"feature 'rooms': entity {__name__}.EsRoom takes the aggregate type 'order' of {__name__}.EsBooking; "
        "give one of them another name="
    ]
    renamed: Feature[Any] = Feature("rooms")
    renamed.entity(EsRoom, name="room")
    App([shop, renamed], database_url="sqlite://").dispose()


class _Plain:
    """Not an attrs class: JSON cannot be read into it."""


@attrs.frozen
class Rested:
    took: timedelta


@attrs.frozen
class Noted:
    by: _Plain


def test_boot_refuses_an_event_class_its_stored_json_could_never_be_read_back_into(db_url: str) -> None:
    """An event field of a type JSON cannot fill (a ``timedelta``, a plain class) was
    accepted: the append stored it and answered Ok, then every read of the stream — the
    ``read_stream``, a rebuild's replay, a trigger — was an ``internal_error``, for good,
    since stored events are never rewritten. Boot refuses the class instead, as it does a
    payload class, on either database and before anything is stored."""
    f: Feature[Any] = Feature("es-unreadable")
    f.entity(EsBooking)
    f.event(Rested, name="rested")
    f.event(Noted, name="noted")
    f.event(BookingStarted, name="booking-started")

    with pytest.raises(BootError) as caught:
        App([f], database_url=db_url)

    assert sorted(caught.value.problems) == [
        "feature 'es-unreadable': event Noted: no JSON value can be read into _Plain; use JSON-shaped "
        "field types (docs/http.md#payload-schemas)",
        "feature 'es-unreadable': event Rested: no JSON value can be read into timedelta; use JSON-shaped "
        "field types (docs/http.md#payload-schemas)",
    ]


@attrs.frozen
class Settled:
    at: datetime
    amount: Decimal
    receipt: bytes | None


@attrs.frozen
class Settle:
    id: uuid.UUID
    at: datetime
    amount: Decimal
    receipt: bytes | None


def _settling() -> tuple[Feature[Any], Any, Any]:
    f: Feature[Any] = Feature("es-settle")
    f.entity(EsBooking)
    f.event(Settled, name="settled")
    book = f.write_handler(
        "book",
        f.pipeline(Book)
        .create("b", EsBooking, data=lambda c: EsBooking(guest=c.payload.guest, nights=c.payload.nights))
        .return_(lambda c: ok(c.steps["b"].id)),
    )
    settle = f.write_handler(
        "settle",
        f.pipeline(Settle)
        .append_event(
            EsBooking,
            id=lambda c: c.payload.id,
            event=lambda c: Settled(c.payload.at, c.payload.amount, c.payload.receipt),
        )
        .return_(lambda c: ok(None)),
    )
    return f, book, settle


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("at", datetime(2026, 3, 2, 9, 1), "expected an ISO-8601 datetime with a UTC offset"),
        ("amount", Decimal("NaN"), "expected a finite decimal"),
    ],
)
def test_an_event_its_class_cannot_read_back_is_refused_at_the_append_naming_the_field(
    app_on: AppOn, user: User, field: str, value: object, problem: str
) -> None:
    """A naive datetime or a decimal NaN in an event's field were stored (Ok), and the
    stream's every read after was an ``internal_error``: its class reads a datetime only
    with an offset, a decimal only finite. The
    append is refused instead, naming the payload field and the event's, not the value;
    nothing is stored and the stream still reads."""
    f, book, settle = _settling()
    app = app_on([f])
    booking = ok_data(app.dispatch(book, Book("Ann", 2), user=user))
    good = {"at": T0, "amount": Decimal("12.50"), "receipt": None}
    refused = failure_of(app.dispatch(settle, Settle(booking, **{**good, field: value}), user=user))
    message = f"Settled could not read it back: {problem} (at $.{field})"
    assert refused.code == "validation_error"
    named = f"(kumiko_events.payload, from $.{field})"
    assert refused.message == f"step 0 aggregate.append_event: a value does not fit its column: {message} {named}"
    assert refused.details == [
        {
            "path": f"$.{field}",
            "message": message,
            "column": events.name + ".payload",
            "step": "0 aggregate.append_event",
        }
    ]
    assert repr(value) not in refused.message
    stream = ok_data(app.read_stream(EsBooking, booking, user=user))
    assert [e.version for e in stream] == [1]
    assert ok_data(app.dispatch(settle, Settle(booking, **good), user=user)) is None
    stream = ok_data(app.read_stream(EsBooking, booking, user=user))
    assert stream[-1].event == Settled(**good)


def test_bytes_in_an_event_are_stored_as_base64_and_read_back_as_bytes(app_on: AppOn, user: User) -> None:
    """Were refused at the append (the class read no bytes from the stored text): a
    digest or a signature is bytes. Stored as base64 text (jsonable), read back by the
    converter; a client sends them so too (dispatch_json)."""
    f, book, settle = _settling()
    app = app_on([f])
    booking = ok_data(app.dispatch(book, Book("Ann", 2), user=user))
    receipt = bytes(range(256))
    assert ok_data(app.dispatch(settle, Settle(booking, T0, Decimal("1.50"), receipt), user=user)) is None
    data = {"id": str(booking), "at": T0.isoformat(), "amount": "2", "receipt": "AP8="}
    assert ok_data(app.dispatch_json(settle.name, data, user=user)) is None
    stream = ok_data(app.read_stream(EsBooking, booking, user=user))
    assert [e.event.receipt for e in stream[1:]] == [receipt, b"\x00\xff"]
    with app.engine.connect() as conn:
        stored = conn.scalar(sa.select(events.c.payload).where(events.c.stream_version == 2))
    assert stored["receipt"] == base64.b64encode(receipt).decode()
    for bad in ("not base64!", "AP8", 5):
        failure = failure_of(app.dispatch_json(settle.name, {**data, "receipt": bad}, user=user), "validation_error")
        assert [d["path"] for d in failure.details] == ["$.receipt"]
        assert failure.details[0]["message"].startswith("expected a base64 string")


@attrs.frozen
class Logged:
    moments: list[datetime]


@attrs.frozen
class Log:
    id: uuid.UUID
    note: str | None
    moments: list[datetime]


class Floor(enum.IntEnum):
    GROUND = 0
    FIRST = 1


@attrs.frozen
class Seat:
    """An input whose maps are keyed by numbers: JSON can only write them as text."""

    id: uuid.UUID
    guests: dict[int, str]
    floors: dict[Floor, int]


@attrs.frozen
class Seated:
    guests: dict[int, str]
    floors: dict[Floor, int]


def test_maps_keyed_by_integers_are_stored_as_json_keys_and_read_back_as_integers(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """JSON writes ``{1: "Ann"}`` as ``{"1": "Ann"}``, and the reader took a key's text
    for a string given where an int goes: every append of such an event was refused
    ("could not read it back: expected an integer at $.guests['1']"), and a JSON
    payload could give such a map only empty.  Text that is no integer as JSON writes
    one (``"01"``) is still refused."""
    f: Feature[Any] = Feature("seat")
    f.entity(EsBooking)
    f.event(Seated, name="seated")
    plain = f.write_handler(
        "plain",
        f.pipeline(Book)
        .create("b", EsBooking, data=lambda c: EsBooking(guest=c.payload.guest, nights=c.payload.nights))
        .return_(lambda c: ok(c.steps["b"].id)),
    )
    f.write_handler(
        "seat",
        f.pipeline(Seat)
        .append_event(EsBooking, id=lambda c: c.payload.id, event=lambda c: Seated(c.payload.guests, c.payload.floors))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f], clock=lambda: T0)
    alice = make_user()
    booking = ok_data(app.dispatch(plain, Book("Ann", 2), user=alice))

    given = {"id": str(booking), "guests": {"1": "Ann", "-2": "Bob"}, "floors": {"1": 3}}
    ok_data(app.dispatch_json("seat:seat", given, user=alice))

    [*_, seated] = ok_data(app.read_stream(EsBooking, booking, user=alice))
    assert seated.event == Seated({1: "Ann", -2: "Bob"}, {Floor.FIRST: 3})
    with app.engine.connect() as conn:
        stored = conn.execute(sa.select(events.c.payload).where(events.c.type == "seated")).scalar_one()
    assert stored == {"guests": {"1": "Ann", "-2": "Bob"}, "floors": {"1": 3}}
    refused = failure_of(app.dispatch_json("seat:seat", {**given, "guests": {"01": "x"}}, user=alice))
    assert refused.details == [{"path": "$.guests['01']", "message": "expected an integer, got string"}]


def test_a_refused_event_value_in_a_list_is_named_by_its_own_payload_path_not_another_none(
    app_on: AppOn, user: User
) -> None:
    """The payload path of a value the event's class cannot read back is found by that
    value; past a list index the value was taken as ``None``, so the path named the
    first ``None`` in the payload (here ``$.note``), a field with nothing wrong."""
    f: Feature[Any] = Feature("es-log")
    f.entity(EsBooking)
    f.event(Logged, name="logged")
    book = f.write_handler(
        "book",
        f.pipeline(Book)
        .create("b", EsBooking, data=lambda c: EsBooking(guest=c.payload.guest, nights=c.payload.nights))
        .return_(lambda c: ok(c.steps["b"].id)),
    )
    log = f.write_handler(
        "log",
        f.pipeline(Log)
        .append_event(EsBooking, id=lambda c: c.payload.id, event=lambda c: Logged(c.payload.moments))
        .return_(lambda c: ok(None)),
    )
    app = app_on([f])
    booking = ok_data(app.dispatch(book, Book("Ann", 2), user=user))
    refused = failure_of(app.dispatch(log, Log(booking, None, [T0, datetime(2026, 3, 2, 9, 1)]), user=user))
    assert refused.code == "validation_error"
    assert [d["path"] for d in refused.details or ()] == ["$.moments[1]"]
    assert "(at $.moments[1])" in refused.message


def _moving_feature(moved: dict[str, object]) -> tuple[Feature[Any], dict[str, Any]]:
    """The booking feature with one more projector per domain event, which sets the
    columns in ``moved`` (the framework's own) on the row."""
    f, h = _feature()

    def move(row: EsBooking, event: object) -> None:
        for key, value in moved.items():
            setattr(row, key, value)

    f.projector(EsBooking, BookingStarted)(move)
    f.projector(EsBooking, Extended)(move)
    return f, h


@pytest.mark.parametrize("column", ["tenant_id", "id"])
def test_a_projector_setting_a_framework_column_is_refused_not_a_row_in_another_tenant(
    app_on: AppOn, make_user: Callable[..., User], column: str
) -> None:
    """A creation event's projector that set ``tenant_id`` inserted the row into that
    tenant (its event in the writer's); on an append the row's update found no row and
    the write was a false ``version_conflict`` "at version 1, not 1"."""
    alice, elsewhere = make_user(), uuid.uuid4()
    plain_f, plain = _feature()
    booking = ok_data(app_on([plain_f], clock=lambda: T0).dispatch(plain["plain"], Book("Ann", 2), user=alice))
    f, h = _moving_feature({column: elsewhere})
    app = app_on([f], clock=lambda: T0)

    created = failure_of(app.dispatch(h["book"], Book("Bo", 1), user=alice), "internal_error")
    appended = failure_of(app.dispatch(h["extend"], Extend(booking, 3), user=alice), "internal_error")

    for refused in (created, appended):
        assert f"set EsBooking.{column}: projectors may not set the framework's columns" in refused.message
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(BOOKINGS.c.id, BOOKINGS.c.tenant_id, BOOKINGS.c.nights)).all() == [
            (booking, alice.tenant_id, 2)
        ]
        assert conn.execute(sa.select(sa.func.count()).select_from(events)).scalar() == 1


def test_a_rebuild_whose_projector_sets_the_tenant_moves_no_row(app_on: AppOn, make_user: Callable[..., User]) -> None:
    """A projector changed since the events were stored: the replay would have moved the
    row into another tenant, out of reach of its own."""
    alice = make_user()
    f, h = _feature()
    booking = ok_data(app_on([f], clock=lambda: T0).dispatch(h["book"], Book("Ann", 2), user=alice))
    moving_f, _ = _moving_feature({"tenant_id": uuid.uuid4()})
    app = app_on([moving_f], clock=lambda: T0)

    for verify in (True, False):
        refused = failure_of(app.rebuild_projection(EsBooking, user=alice, verify=verify), "internal_error")
        assert "set EsBooking.tenant_id" in refused.message
    with app.engine.connect() as conn:
        assert conn.execute(sa.select(BOOKINGS.c.id, BOOKINGS.c.tenant_id)).all() == [(booking, alice.tenant_id)]


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        # The class gained a field without a default, and no new schema version.
        ({"payload": {"nights": 3}}, "does not load as Extended: required field is missing at $.reason"),
        # It lost one.
        ({"payload": {"nights": 3, "reason": "r", "days": 3}}, "does not load as Extended: unknown field at $.days"),
        # A field changed its type: the stored value is not quoted.
        ({"payload": {"nights": "three", "reason": "r"}}, "does not load as Extended: expected an integer at $.nights"),
        # Stored by a newer deploy.
        ({"schema_version": 3}, "stored at schema version 3) is newer than Extended's schema version 2"),
        # An older one whose upcaster cannot read it (its message may quote the payload).
        ({"schema_version": 1, "payload": {"weeks": 1}}, "an upcaster to schema version 2 raised KeyError"),
        # The class was renamed or removed.
        ({"type": "extended-old"}, "has the type 'extended-old', which no feature registers"),
    ],
)
def test_an_event_its_class_no_longer_reads_is_named_with_its_version_and_fields_and_nothing_is_rebuilt(
    two: Any, stored: dict[str, Any], reason: str
) -> None:
    """Was ``internal_error`` "raised ClassValidationError (error id …)" (or StateError):
    which event, stored how, and which field — the log alone said."""
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    ok_data(app.dispatch(h["extend"], Extend(booking, 3), user=alice))
    with app.engine.begin() as conn:
        conn.execute(sa.update(events).where(events.c.type == "extended").values(**stored))
    _drift(app, booking, nights=0)

    read = failure_of(app.read_stream(EsBooking, booking, user=alice), "internal_error")
    rebuilt = failure_of(app.rebuild_projection(EsBooking, user=alice), "internal_error")

    where = f"the event at version 2 of EsBooking {booking}"
    for refused in (read, rebuilt):
        assert where in refused.message and reason in refused.message, refused.message
        assert "three" not in refused.message and "error id" in refused.message
    if "type" not in stored:
        assert f"{where} ('extended', stored at schema version {stored.get('schema_version', 2)})" in read.message
    assert _rows(app)[booking] == ("Ann", 0, 2)  # nothing rebuilt


def test_an_unreadable_event_is_logged_with_its_reason_but_none_of_its_stored_values(
    two: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The cause of an event that does not read back quotes the stored value
    (``datetime.fromisoformat``'s "Invalid isoformat string: '…'", a field validator's
    message): it went to the log as the record's traceback, a token stored in an event
    with it, where the workflow feed logs only the event's reason."""
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    with app.engine.begin() as conn:
        stored = conn.execute(sa.select(events.c.payload)).scalar_one()
        payload = {**stored, "created_at": "sk-live-T0PSECRET"}
        conn.execute(sa.update(events).values(payload=payload))

    with caplog.at_level(logging.INFO, logger="kumiko_typed"):
        read = failure_of(app.read_stream(EsBooking, booking, user=alice), "internal_error")
        rebuilt = failure_of(app.rebuild_projection(EsBooking, user=alice, verify=True), "internal_error")

    logged = [logging.Formatter().format(r) for r in caplog.records if r.name == "kumiko_typed"]
    assert len(logged) == 2 and not any("T0PSECRET" in line for line in logged), logged
    for refused, line in zip((read, rebuilt), logged, strict=True):
        assert refused.details["error_id"] in line  # type: ignore[call-overload, index]
        assert "its value of EsBooking.created_at does not read as datetime" in line


def test_a_projector_that_raises_in_a_rebuild_is_logged_with_the_event_it_failed_on(
    two: Any, app_on: AppOn, caplog: pytest.LogCaptureFixture
) -> None:
    """A projector changed since the events were stored fails on one event of many
    streams: the log's traceback named the projector's line, not the stream or version."""
    app, h, alice, _, _ = two
    calm = ok_data(app.dispatch(h["book"], Book("Ann", 2), user=alice))
    ok_data(app.dispatch(h["extend"], Extend(calm, 3), user=alice))
    odd = ok_data(app.dispatch(h["book"], Book("Bob", 1), user=alice))
    ok_data(app.dispatch(h["extend"], Extend(odd, 5), user=alice))
    ok_data(app.dispatch(h["extend"], Extend(odd, 0), user=alice))
    changed: Feature[Any] = Feature("es")
    changed.entity(EsBooking)
    changed.event(BookingStarted, name="booking-started")
    changed.event(Extended, name="extended", version=2, upcasters={1: _v1_to_v2})

    @changed.projector(EsBooking, BookingStarted)
    def started(row: EsBooking, event: BookingStarted) -> None:
        row.guest, row.nights = event.guest, event.nights

    @changed.projector(EsBooking, Extended)
    def extended(row: EsBooking, event: Extended) -> None:
        row.nights = row.nights * 10 // event.nights  # the new release's bug

    new = app_on([changed], clock=lambda: T0)
    with caplog.at_level(logging.ERROR, logger="kumiko_typed"):
        refused = failure_of(new.rebuild_projection(EsBooking, user=alice), "internal_error")

    [record] = [r for r in caplog.records if refused.details["error_id"] in r.getMessage()]  # type: ignore[call-overload, index]
    assert f"replaying the event at version 3 of EsBooking {odd} ('extended')" in logging.Formatter().format(record)
    assert "ZeroDivisionError" in refused.message


class EsRoom(Entity):
    """Another aggregate of the App, whose ids are no bookings."""

    __tablename__ = "es_room"
    number: Mapped[int]


def test_an_entity_whose_stored_aggregate_type_changed_is_named_and_its_rows_are_not_rebuilt_away(
    two: Any, app_on: AppOn
) -> None:
    """Renaming an entity class changes its default aggregate type (``es-booking`` to
    ``es-reservation``: here by ``name=``).  Streams were read by type, so its events
    were left out: ``read_stream`` said ``not_found`` for a row that exists (a stream
    appended to since, only its new events), and a rebuild found no stream for its rows
    and deleted every one."""
    app, h, alice, bob, root = two
    ann = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    bob_s = ok_data(app.dispatch(h["plain"], Book("Bob", 1), user=bob))
    renamed: Feature[Any] = Feature("es")
    renamed.entity(EsBooking, name="es-reservation")
    new = app_on([renamed], clock=lambda: T0)

    read = failure_of(new.read_stream(EsBooking, ann, user=alice), "internal_error")
    rebuilds = [
        failure_of(new.rebuild_projection(EsBooking, user=user, tenant=tenant, verify=verify), "internal_error")
        for user, tenant in ((alice, None), (root, "all"))
        for verify in (True, False)
    ]

    said = "was stored for the aggregate type 'es-booking', not 'es-reservation': an entity class renamed keeps"
    assert f"the event at version 1 of EsBooking {ann} {said}" in read.message
    assert "feature.entity(EsBooking, name='es-booking')" in read.message
    assert f"the event at version 1 of EsBooking {ann} {said}" in rebuilds[0].message
    assert all(said in r.message for r in rebuilds)
    assert set(_rows(app)) == {ann, bob_s}  # nothing deleted
    assert ok_data(app.rebuild_projection(EsBooking, user=root, tenant="all", verify=True)).matches


def test_the_id_of_another_entitys_stream_is_not_found_as_this_ones(two: Any, app_on: AppOn) -> None:
    app, _, alice, _, _ = two
    rooms: Feature[Any] = Feature("rooms")
    rooms.entity(EsRoom)
    add = rooms.write_handler(
        "add",
        rooms.pipeline(Book)
        .create("r", EsRoom, data=lambda c: EsRoom(number=c.payload.nights))
        .return_(lambda c: ok(c.steps["r"].id)),
    )
    f, _ = _feature()
    both = app_on([f, rooms], clock=lambda: T0)
    room = ok_data(both.dispatch(add, Book("-", 101), user=alice))

    for page in ({}, {"from_version": 2}):
        refused = failure_of(both.read_stream(EsBooking, room, user=alice, **page), "not_found")
        assert refused.message == f"EsBooking {room} not found"
    assert [e.type for e in ok_data(both.read_stream(EsRoom, room, user=alice))] == ["es-room.created"]
    assert ok_data(app.rebuild_projection(EsBooking, user=alice, verify=True)).matches


@attrs.frozen
class ExtendLegacy:
    """An id of the old system: a number, given where the aggregate's UUID goes."""

    number: int
    nights: int


def test_an_aggregate_id_that_is_a_number_is_a_validation_error_naming_its_field(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """Was ``internal_error`` (SQLite: StatementError, PostgreSQL: ProgrammingError), as
    text that is no UUID is not."""
    f, h = _feature()
    legacy = f.write_handler(
        "legacy",
        f.pipeline(ExtendLegacy)
        .append_event(EsBooking, id=lambda c: c.payload.number, event=lambda c: Extended(c.payload.nights, "legacy"))
        .return_(lambda c: ok(None)),
    )
    rename = f.write_handler(
        "legacy-rename",
        f.pipeline(ExtendLegacy)
        .update("b", EsBooking, id=lambda c: c.payload.number, changes=lambda c: {"nights": 1}, version=lambda c: 1)
        .return_(lambda c: ok(None)),
    )
    app = app_on([f], clock=lambda: T0)
    alice = make_user()
    ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))

    for handler in (legacy, rename):
        refused = failure_of(app.dispatch(handler, ExtendLegacy(12345, 2), user=alice), "validation_error")
        assert refused.message.endswith(": must be a UUID (es_booking.id, from $.number)")
        assert isinstance(refused.details, list)
        assert (refused.details[0]["path"], refused.details[0]["column"]) == ("$.number", "es_booking.id")


@pytest.mark.parametrize("event_type", ["es-booking.created", "es-booking.updated"])
def test_a_column_value_its_column_no_longer_reads_is_named_by_column_not_value(two: Any, event_type: str) -> None:
    """A column whose type changed since its events were stored (text become a UUID, an
    enum member removed): was ``internal_error`` "raised ValueError (error id …)"."""
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    ok_data(app.dispatch(h["rename"], Rename(booking, "Anne", 1), user=alice))
    damaged = {"es-booking.created": {"id": str(booking), "created_at": "last tuesday"}}
    damaged["es-booking.updated"] = {"changes": {"created_at": "last tuesday"}}
    with app.engine.begin() as conn:
        conn.execute(sa.update(events).where(events.c.type == event_type).values(payload=damaged[event_type]))
    _drift(app, booking, nights=0)

    read = failure_of(app.read_stream(EsBooking, booking, user=alice), "internal_error")
    rebuilt = failure_of(app.rebuild_projection(EsBooking, user=alice), "internal_error")

    version = 1 if event_type.endswith("created") else 2
    for refused in (read, rebuilt):
        assert (
            f"the event at version {version} of EsBooking {booking} ('{event_type}'): "
            "its value of EsBooking.created_at does not read as datetime"
        ) in refused.message
        assert "tuesday" not in refused.message
    assert _rows(app)[booking] == ("Anne", 0, 2)


def test_a_rebuild_that_would_leave_a_not_null_column_empty_names_it_and_writes_nothing(two: Any) -> None:
    """A column added since the events were stored, without a default (here: a creation
    event that does not carry ``guest``): the repair was ``internal_error`` "raised
    IntegrityError", naming neither the row nor the column."""
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    other = ok_data(app.dispatch(h["plain"], Book("Abe", 1), user=alice))
    with app.engine.begin() as conn:
        stored = conn.execute(sa.select(events.c.payload).where(events.c.stream_id == booking)).scalar_one()
        without = {k: v for k, v in stored.items() if k != "guest"}
        conn.execute(sa.update(events).where(events.c.stream_id == booking).values(payload=without))
    _drift(app, other, nights=7)

    report = ok_data(app.rebuild_projection(EsBooking, user=alice, verify=True))
    assert report.changed == {booking: ("guest",), other: ("nights",)}  # verify tells, as documented
    expected = f"the events of EsBooking {booking} give no value to EsBooking.guest, which cannot be null"
    refused = failure_of(app.rebuild_projection(EsBooking, user=alice), "internal_error")
    assert expected in refused.message
    assert _rows(app) == {booking: ("Ann", 2, 1), other: ("Abe", 7, 1)}  # nothing repaired
    with app.engine.begin() as conn:  # the row missing too: refused, not inserted half
        conn.execute(sa.delete(BOOKINGS).where(BOOKINGS.c.id == booking))
    assert expected in failure_of(app.rebuild_projection(EsBooking, user=alice), "internal_error").message
    assert _rows(app) == {other: ("Abe", 7, 1)}


def test_a_wrong_entity_argument_is_not_found_naming_its_type_never_raised(two: Any) -> None:
    """A list raised ``TypeError`` (unhashable) out of both calls, which answer with a
    ``Failure``; a table's message was its whole ``repr``."""
    app, h, alice, _, _ = two
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))
    wrongs: tuple[Any, ...] = ([EsBooking], {"entity": "EsBooking"}, "EsBooking", BOOKINGS, None)
    for wrong in wrongs:
        for answer in (
            app.read_stream(wrong, booking, user=alice),
            app.rebuild_projection(wrong, user=alice, verify=True),
        ):
            refused = failure_of(answer, "not_found")
            assert refused.message == f"a {type(wrong).__name__} is not an entity of this App: pass its class"
    assert failure_of(app.read_stream(Book, booking, user=alice), "not_found").message == (
        "Book is not an entity of this App"
    )


def test_a_projector_putting_text_in_a_number_column_is_refused_alike_on_both_databases(
    app_on: AppOn, make_user: Callable[..., User]
) -> None:
    """SQLite stored ``"three"`` in ``nights`` (an ``Integer``) and the write succeeded;
    PostgreSQL refused it with a ``validation_error`` naming no column."""
    f, h = _feature()

    @f.projector(EsBooking, Extended)
    def as_text(row: EsBooking, event: Extended) -> None:
        row.nights = "three"  # type: ignore[assignment]  # what an untyped projector may do

    app = app_on([f], clock=lambda: T0)
    alice = make_user()
    booking = ok_data(app.dispatch(h["plain"], Book("Ann", 2), user=alice))

    refused = failure_of(app.dispatch(h["extend"], Extend(booking, 3), user=alice), "validation_error")

    assert isinstance(refused.details, list)
    problems = [(d["column"], d["message"]) for d in refused.details]
    assert problems == [("es_booking.nights", "must be a number, not text")]
    assert _rows(app)[booking] == ("Ann", 2, 1)
    assert len(ok_data(app.read_stream(EsBooking, booking, user=alice))) == 1
