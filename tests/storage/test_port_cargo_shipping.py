"""The ``eventsourcing`` library's cargo-shipping example (from the DDD book), ported: a cargo
is booked, routed and handled; its events carry value objects (an itinerary holding a tuple
of legs, enum locations, an optional voyage) and read back as the same objects.

Its projector stores the itinerary as ``attrs.asdict`` makes it, with the legs as a tuple
(``attrs.asdict`` keeps collection types).
The JSON column reads that back as a list. ``rebuild_projection(verify=True)`` compared
the replayed tuple with the stored list and reported every routed cargo as changed; a
rebuild rewrote each such row. Both databases."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import sqlalchemy as sa
from _support import failure_of, ok_data
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import App, Entity, Feature, Ok, User, ok

DEADLINE = datetime(2027, 1, 20, 12, 0, tzinfo=UTC)


class Location(enum.Enum):
    HONGKONG = "HONGKONG"
    NEWYORK = "NEWYORK"
    STOCKHOLM = "STOCKHOLM"


class Activity(enum.StrEnum):
    RECEIVE = "RECEIVE"
    LOAD = "LOAD"
    UNLOAD = "UNLOAD"
    CLAIM = "CLAIM"


@attrs.frozen
class Leg:
    origin: Location
    destination: Location
    voyage_number: str


@attrs.frozen
class Itinerary:
    legs: tuple[Leg, ...]


class CsCargo(Entity):
    __tablename__ = "cs_cargo"
    origin: Mapped[str] = mapped_column(sa.String(20))
    destination: Mapped[str] = mapped_column(sa.String(20))
    arrival_deadline: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    transport_status: Mapped[str] = mapped_column(sa.String(20), default="NOT_RECEIVED")
    route: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON, nullable=True, default=None)
    #: Legs per voyage: an int-keyed dict in the projector, str keys once stored.
    legs_by_number: Mapped[dict[int, str] | None] = mapped_column(sa.JSON, nullable=True, default=None)
    last_location: Mapped[str | None] = mapped_column(sa.String(20), nullable=True, default=None)


@attrs.frozen
class BookingStarted:
    origin: Location
    destination: Location
    arrival_deadline: datetime


@attrs.frozen
class RouteAssigned:
    route: Itinerary


@attrs.frozen
class HandlingRegistered:
    voyage_number: str | None
    location: Location
    activity: Activity


@attrs.frozen
class BookCargo:
    origin: Location
    destination: Location
    arrival_deadline: datetime


@attrs.frozen
class AssignRoute:
    cargo: uuid.UUID
    itinerary: Itinerary


@attrs.frozen
class RegisterHandling:
    cargo: uuid.UUID
    voyage_number: str | None
    location: Location
    activity: Activity


shipping = Feature("shipping")
shipping.entity(CsCargo)
shipping.event(BookingStarted, name="booking-started")
shipping.event(RouteAssigned, name="route-assigned")
shipping.event(HandlingRegistered, name="handling-registered")

_STATUS = {Activity.RECEIVE: "IN_PORT", Activity.LOAD: "ONBOARD_CARRIER", Activity.UNLOAD: "IN_PORT"}


@shipping.projector(CsCargo, BookingStarted)
def _booked(row: CsCargo, event: BookingStarted) -> None:
    row.origin, row.destination = event.origin.value, event.destination.value
    row.arrival_deadline = event.arrival_deadline


@shipping.projector(CsCargo, RouteAssigned)
def _routed(row: CsCargo, event: RouteAssigned) -> None:
    row.route = attrs.asdict(
        event.route,
        value_serializer=lambda _i, _a, v: v.value if isinstance(v, enum.Enum) else v,
    )
    row.legs_by_number = {n: leg.voyage_number for n, leg in enumerate(event.route.legs, 1)}


@shipping.projector(CsCargo, HandlingRegistered)
def _handled(row: CsCargo, event: HandlingRegistered) -> None:
    row.last_location = event.location.value
    row.transport_status = _STATUS.get(event.activity, "CLAIMED")


book = shipping.write_handler(
    "book",
    shipping.pipeline(BookCargo)
    .create(
        "cargo",
        CsCargo,
        data=lambda c: CsCargo(origin="", destination="", arrival_deadline=c.payload.arrival_deadline),
        event=lambda c: BookingStarted(c.payload.origin, c.payload.destination, c.payload.arrival_deadline),
    )
    .return_(lambda c: ok(c.steps["cargo"].id)),
)
assign_route = shipping.write_handler(
    "assign-route",
    shipping.pipeline(AssignRoute)
    .append_event(CsCargo, id=lambda c: c.payload.cargo, event=lambda c: RouteAssigned(c.payload.itinerary))
    .return_(lambda c: ok(None)),
)
register_handling = shipping.write_handler(
    "register-handling",
    shipping.pipeline(RegisterHandling)
    .append_event(
        CsCargo,
        id=lambda c: c.payload.cargo,
        event=lambda c: HandlingRegistered(c.payload.voyage_number, c.payload.location, c.payload.activity),
    )
    .return_(lambda c: ok(None)),
)

ROUTE = Itinerary(
    (Leg(Location.HONGKONG, Location.NEWYORK, "V1"), Leg(Location.NEWYORK, Location.STOCKHOLM, "V2")),
)


def _shipped(app: App, user: User) -> uuid.UUID:
    cargo: uuid.UUID = ok_data(
        app.dispatch(book, BookCargo(Location.HONGKONG, Location.STOCKHOLM, DEADLINE), user=user)
    )
    assert app.dispatch(assign_route, AssignRoute(cargo, ROUTE), user=user) == Ok(None)
    handling = RegisterHandling(cargo, None, Location.HONGKONG, Activity.RECEIVE)
    assert app.dispatch(register_handling, handling, user=user) == Ok(None)
    # The same command as JSON, as a client sends it.
    loaded = {"cargo": str(cargo), "voyage_number": "V1", "location": "HONGKONG", "activity": "LOAD"}
    assert app.dispatch_json("shipping:register-handling", loaded, user=user) == Ok(None)
    return cargo


def _row(app: App, cargo: uuid.UUID) -> sa.Row[Any]:
    table = CsCargo.__table__
    with app.engine.connect() as conn:
        return conn.execute(sa.select(table).where(table.c.id == cargo)).one()


def test_a_cargo_is_booked_routed_and_handled_and_its_events_read_back_as_value_objects(
    app_on: Callable[..., App], user: User
) -> None:
    app = app_on([shipping])
    cargo = _shipped(app, user)
    stream = ok_data(app.read_stream(CsCargo, cargo, user=user))
    assert [e.event for e in stream] == [
        BookingStarted(Location.HONGKONG, Location.STOCKHOLM, DEADLINE),
        RouteAssigned(ROUTE),
        HandlingRegistered(None, Location.HONGKONG, Activity.RECEIVE),
        HandlingRegistered("V1", Location.HONGKONG, Activity.LOAD),
    ]
    assert isinstance(stream[1].event, RouteAssigned) and type(stream[1].event.route.legs) is tuple
    row = _row(app, cargo)
    assert (row.transport_status, row.last_location, row.legs_by_number) == (
        "ONBOARD_CARRIER",
        "HONGKONG",
        {"1": "V1", "2": "V2"},
    )
    assert row.route == {
        "legs": [
            {"origin": "HONGKONG", "destination": "NEWYORK", "voyage_number": "V1"},
            {"origin": "NEWYORK", "destination": "STOCKHOLM", "voyage_number": "V2"},
        ]
    }


def test_verifying_the_projection_finds_the_stored_itinerary_equal_to_its_replay(
    app_on: Callable[..., App], user: User
) -> None:
    app = app_on([shipping])
    _shipped(app, user)
    report = ok_data(app.rebuild_projection(CsCargo, user=user, verify=True))
    assert (report.streams, report.changed, report.matches) == (1, {}, True), report
    assert ok_data(app.rebuild_projection(CsCargo, user=user)).changed == {}


def test_a_tampered_route_is_found_and_rebuilt_as_stored(app_on: Callable[..., App], user: User) -> None:
    app = app_on([shipping])
    cargo = _shipped(app, user)
    before = _row(app, cargo)
    table = CsCargo.__table__
    with app.engine.begin() as conn:
        conn.execute(sa.update(table).where(table.c.id == cargo).values(route={"legs": []}))
    report = ok_data(app.rebuild_projection(CsCargo, user=user, verify=True))
    assert report.changed == {cargo: ("route",)}
    assert ok_data(app.rebuild_projection(CsCargo, user=user)).changed == {cargo: ("route",)}
    assert _row(app, cargo) == before
    assert ok_data(app.rebuild_projection(CsCargo, user=user, verify=True)).matches


def test_hostile_handling_commands_are_refused_at_their_field(app_on: Callable[..., App], user: User) -> None:
    app = app_on([shipping])
    cargo = _shipped(app, user)
    unknown = {"cargo": str(cargo), "voyage_number": None, "location": "MARS", "activity": "LOAD"}
    refused = failure_of(app.dispatch_json("shipping:register-handling", unknown, user=user), "validation_error")
    assert refused.details == [{"path": "$.location", "message": 'expected one of "HONGKONG", "NEWYORK", "STOCKHOLM"'}]
    legless = {"cargo": str(cargo), "itinerary": {"legs": [{"origin": "HONGKONG", "destination": "NEWYORK"}]}}
    refused = failure_of(app.dispatch_json("shipping:assign-route", legless, user=user), "validation_error")
    assert [d["path"] for d in refused.details] == ["$.itinerary.legs[0].voyage_number"]
    # Another tenant's cargo is not found, and its stream is not shown.
    stranger = User(id=uuid.uuid4(), tenant_id=uuid.uuid4(), roles=frozenset())
    moved = RegisterHandling(cargo, None, Location.NEWYORK, Activity.UNLOAD)
    assert failure_of(app.dispatch(register_handling, moved, user=stranger)).code == "not_found"
    assert failure_of(app.read_stream(CsCargo, cargo, user=stranger)).code == "not_found"
    assert len(ok_data(app.read_stream(CsCargo, cargo, user=user))) == 4
    assert DEADLINE - timedelta(days=1) < _row(app, cargo).arrival_deadline
