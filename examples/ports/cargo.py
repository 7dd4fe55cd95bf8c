"""Cargo shipping, the sample of Evans' DDD book as the ``eventsourcing`` library's example
app has it: a cargo is booked from an origin to a destination by a deadline, routed along an
itinerary of voyage legs, and handled in ports (received, loaded, unloaded, claimed); each
handling report moves its transport status, last known location and next expected activity,
and one that does not fit the itinerary makes the cargo misdirected.

How the pieces map:

- ``Cargo`` is the aggregate; its row, the inline projection of its events, is the cargo
  details listing (``cargo:details``, ``cargo:list``).  The projectors only apply facts: every
  refusal (a report that cannot have happened, a route that does not connect) is a guard of
  the handler, so a replay never refuses an event that was stored.
- The route is stored in the row as JSON legs; ``RouteAssigned`` carries the legs and the
  estimated arrival the handler computed from the App's clock, so a replay gives the same row.
- A handling report that leaves the itinerary (an unload in a port no leg ends in, a load on
  a voyage no leg sails from there), and a destination change the route no longer reaches,
  append ``CargoNeedsRerouting``.  That event starts a run which tells the operations desk
  (a webhook through the outbox) and waits a day for a new route; none by then, it mails
  the desk.
- Booking and routing need the role ``Booking``, handling reports ``Handling``; any user of
  the tenant reads.  Another tenant's cargo is the same ``not_found`` as one never booked.
"""

from __future__ import annotations

import enum
import os
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs
from sqlalchemy import JSON, DateTime, String, select
from sqlalchemy.orm import Mapped, mapped_column

from kumiko_typed import Entity, Feature, fail, ok, on_event

#: How long after routing a cargo is expected to arrive (the original's fixed estimate).
ESTIMATE = timedelta(weeks=1)
#: How long the rerouting run waits for a new route before it mails the desk.
REROUTE_WITHIN = timedelta(days=1)
DESK = "operations@shipping.example"


def desk_url(path: str) -> str:
    return os.environ.get("CARGO_DESK_URL", "https://desk.shipping.example") + path


class Location(enum.StrEnum):
    HAMBURG = "HAMBURG"
    HONGKONG = "HONGKONG"
    NEWYORK = "NEWYORK"
    STOCKHOLM = "STOCKHOLM"
    TOKYO = "TOKYO"
    NLRTM = "NLRTM"
    USDAL = "USDAL"
    AUMEL = "AUMEL"


class Activity(enum.StrEnum):
    RECEIVE = "RECEIVE"
    LOAD = "LOAD"
    UNLOAD = "UNLOAD"
    CLAIM = "CLAIM"


class Transport(enum.StrEnum):
    NOT_RECEIVED = "NOT_RECEIVED"
    IN_PORT = "IN_PORT"
    ONBOARD_CARRIER = "ONBOARD_CARRIER"
    CLAIMED = "CLAIMED"


class Routing(enum.StrEnum):
    NOT_ROUTED = "NOT_ROUTED"
    ROUTED = "ROUTED"
    #: The route no longer ends at the cargo's destination (the destination changed).
    MISROUTED = "MISROUTED"


def _voyage(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not 1 <= len(value) <= 20 or not value.isalnum():
        raise ValueError(f"{attribute.name} must be 1 to 20 letters and digits")


@attrs.frozen
class Leg:
    origin: Location
    destination: Location
    voyage: str = attrs.field(validator=_voyage)


def _legs(_instance: object, attribute: attrs.Attribute[tuple[Leg, ...]], value: tuple[Leg, ...]) -> None:
    if not value:
        raise ValueError("an itinerary needs at least one leg")
    if len(value) > 20:
        raise ValueError("an itinerary has at most 20 legs")


@attrs.frozen
class Itinerary:
    legs: tuple[Leg, ...] = attrs.field(validator=_legs)


#: The routes the routing service knows, by (from, to).
ROUTES: dict[tuple[Location, Location], list[Itinerary]] = {
    (Location.HONGKONG, Location.STOCKHOLM): [
        Itinerary((Leg(Location.HONGKONG, Location.NEWYORK, "V1"), Leg(Location.NEWYORK, Location.STOCKHOLM, "V2")))
    ],
    (Location.TOKYO, Location.STOCKHOLM): [
        Itinerary((Leg(Location.TOKYO, Location.HAMBURG, "V3"), Leg(Location.HAMBURG, Location.STOCKHOLM, "V4")))
    ],
    (Location.NLRTM, Location.USDAL): [Itinerary((Leg(Location.NLRTM, Location.USDAL, "V5"),))],
}


class Cargo(Entity):
    __tablename__ = "cargo_cargo"
    origin: Mapped[Location]
    destination: Mapped[Location]
    arrival_deadline: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    transport_status: Mapped[Transport] = mapped_column(default=Transport.NOT_RECEIVED)
    routing_status: Mapped[Routing] = mapped_column(default=Routing.NOT_ROUTED)
    misdirected: Mapped[bool] = mapped_column(default=False)
    eta: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    #: The legs of the assigned route: ``{"origin", "destination", "voyage"}`` each.
    route: Mapped[list[dict[str, str]] | None] = mapped_column(JSON, default=None)
    last_location: Mapped[Location | None] = mapped_column(default=None)
    current_voyage: Mapped[str | None] = mapped_column(String(20), default=None)
    next_activity: Mapped[Activity | None] = mapped_column(default=None)
    next_location: Mapped[Location | None] = mapped_column(default=None)
    next_voyage: Mapped[str | None] = mapped_column(String(20), default=None)


# --- events --------------------------------------------------------------------------------


@attrs.frozen
class CargoBooked:
    cargo_id: uuid.UUID
    origin: Location
    destination: Location
    arrival_deadline: datetime


@attrs.frozen
class DestinationChanged:
    cargo_id: uuid.UUID
    destination: Location


@attrs.frozen
class RouteAssigned:
    cargo_id: uuid.UUID
    legs: tuple[Leg, ...]
    eta: datetime


@attrs.frozen
class HandlingRegistered:
    cargo_id: uuid.UUID
    activity: Activity
    location: Location
    voyage: str | None
    at: datetime


@attrs.frozen
class CargoNeedsRerouting:
    """Starts the rerouting run."""

    cargo_id: uuid.UUID
    #: misdirected | misrouted
    reason: str
    location: Location | None


# --- payloads and answers ------------------------------------------------------------------


@attrs.frozen
class BookCargo:
    origin: Location
    destination: Location
    arrival_deadline: datetime

    def __attrs_post_init__(self) -> None:
        if self.origin == self.destination:
            raise ValueError("origin and destination must differ")


@attrs.frozen
class ChangeDestination:
    cargo_id: uuid.UUID
    destination: Location


@attrs.frozen
class CargoId:
    cargo_id: uuid.UUID


@attrs.frozen
class AssignRoute:
    cargo_id: uuid.UUID
    legs: tuple[Leg, ...] = attrs.field(validator=_legs)


@attrs.frozen
class RegisterHandling:
    cargo_id: uuid.UUID
    activity: Activity
    location: Location
    #: The voyage a load or unload is of; none for a receive or a claim.
    voyage: str | None = attrs.field(default=None, validator=attrs.validators.optional(_voyage))


@attrs.frozen
class ListCargos:
    misdirected_only: bool = False


@attrs.frozen
class NextActivity:
    activity: Activity
    location: Location
    voyage: str | None


@attrs.frozen
class CargoDetails:
    id: uuid.UUID
    origin: Location
    destination: Location
    arrival_deadline: datetime
    transport_status: Transport
    routing_status: Routing
    misdirected: bool
    eta: datetime | None
    route: tuple[Leg, ...]
    last_location: Location | None
    current_voyage: str | None
    next_expected: NextActivity | None
    version: int


def _route_of(row: Cargo) -> tuple[Leg, ...]:
    return tuple(Leg(Location(d["origin"]), Location(d["destination"]), d["voyage"]) for d in row.route or [])


def details(row: Cargo) -> CargoDetails:
    expected = (
        NextActivity(row.next_activity, row.next_location, row.next_voyage)
        if row.next_activity is not None and row.next_location is not None
        else None
    )
    return CargoDetails(
        id=row.id,
        origin=row.origin,
        destination=row.destination,
        arrival_deadline=row.arrival_deadline,
        transport_status=row.transport_status,
        routing_status=row.routing_status,
        misdirected=row.misdirected,
        eta=row.eta,
        route=_route_of(row),
        last_location=row.last_location,
        current_voyage=row.current_voyage,
        next_expected=expected,
        version=row.version,
    )


# --- the feature ---------------------------------------------------------------------------

shipping = Feature("cargo", requires=["webhook.send", "mail.send"], value_types=[CargoDetails])
shipping.entity(Cargo)
shipping.event(CargoBooked, name="cargo-booked")
shipping.event(DestinationChanged, name="destination-changed")
shipping.event(RouteAssigned, name="route-assigned")
shipping.event(HandlingRegistered, name="handling-registered")
shipping.event(CargoNeedsRerouting, name="cargo-needs-rerouting")


def _expect(row: Cargo, activity: Activity | None, location: Location | None, voyage: str | None = None) -> None:
    row.next_activity, row.next_location, row.next_voyage = activity, location, voyage


@shipping.projector(Cargo, CargoBooked)
def _booked(row: Cargo, event: CargoBooked) -> None:
    row.origin, row.destination, row.arrival_deadline = event.origin, event.destination, event.arrival_deadline


@shipping.projector(Cargo, DestinationChanged)
def _destination_changed(row: Cargo, event: DestinationChanged) -> None:
    row.destination = event.destination
    if row.route:
        ends_there = row.route[-1]["destination"] == event.destination
        row.routing_status = Routing.ROUTED if ends_there else Routing.MISROUTED


@shipping.projector(Cargo, RouteAssigned)
def _route_assigned(row: Cargo, event: RouteAssigned) -> None:
    row.route = [{"origin": leg.origin, "destination": leg.destination, "voyage": leg.voyage} for leg in event.legs]
    row.routing_status, row.eta, row.misdirected = Routing.ROUTED, event.eta, False
    if row.transport_status == Transport.NOT_RECEIVED:
        _expect(row, Activity.RECEIVE, row.origin)
    else:  # rerouted in port: the handler checked that the first leg starts here
        _expect(row, Activity.LOAD, event.legs[0].origin, event.legs[0].voyage)


def _misdirected(row: Cargo) -> None:
    row.misdirected = True
    _expect(row, None, None)


@shipping.projector(Cargo, HandlingRegistered)
def _handled(row: Cargo, event: HandlingRegistered) -> None:
    legs = _route_of(row)
    where = event.location
    if event.activity == Activity.RECEIVE:
        row.transport_status, row.last_location = Transport.IN_PORT, where
        if legs and legs[0].origin == where:
            _expect(row, Activity.LOAD, where, legs[0].voyage)
        else:
            _misdirected(row)
    elif event.activity == Activity.LOAD:
        row.transport_status, row.last_location, row.current_voyage = Transport.ONBOARD_CARRIER, where, event.voyage
        leg = next((g for g in legs if g.origin == where and g.voyage == event.voyage), None)
        if leg is None:
            _misdirected(row)
        else:
            _expect(row, Activity.UNLOAD, leg.destination, leg.voyage)
    elif event.activity == Activity.UNLOAD:
        row.transport_status, row.last_location, row.current_voyage = Transport.IN_PORT, where, None
        at = next((i for i, g in enumerate(legs) if g.destination == where and g.voyage == event.voyage), None)
        if at is None:
            _misdirected(row)
        elif where == row.destination:
            _expect(row, Activity.CLAIM, where)
        elif at + 1 < len(legs):
            _expect(row, Activity.LOAD, where, legs[at + 1].voyage)
        else:
            _misdirected(row)
    else:
        row.transport_status = Transport.CLAIMED
        _expect(row, None, None)


# --- handlers ------------------------------------------------------------------------------


def _chain_breaks(legs: Sequence[Leg]) -> list[dict[str, str]]:
    """A detail per leg that does not start where the one before it ends."""
    return [
        {"path": f"$.legs[{i}].origin", "message": f"must be {legs[i - 1].destination}, where leg {i - 1} ends"}
        for i in range(1, len(legs))
        if legs[i].origin != legs[i - 1].destination
    ]


def _starts_at(row: Cargo) -> Location:
    """Where a new route must start: where the cargo is, or its origin before it is received."""
    return row.last_location if row.last_location is not None else row.origin


def _handling_refusal(row: Cargo, report: RegisterHandling) -> str | None:
    """Why the report cannot have happened to the cargo as it stands, or None."""
    if row.route is None:
        return "the cargo has no route yet"
    if row.transport_status == Transport.CLAIMED:
        return "the cargo has been claimed"
    if report.activity == Activity.RECEIVE and row.transport_status != Transport.NOT_RECEIVED:
        return "the cargo was received already"
    if report.activity != Activity.RECEIVE and row.transport_status == Transport.NOT_RECEIVED:
        return "the cargo has not been received"
    if report.activity == Activity.UNLOAD and row.current_voyage != report.voyage:
        return f"the cargo is not on board voyage {report.voyage}"
    if report.activity in (Activity.LOAD, Activity.CLAIM) and row.transport_status != Transport.IN_PORT:
        return "the cargo is not in port"
    if report.activity in (Activity.LOAD, Activity.CLAIM) and row.last_location != report.location:
        return f"the cargo is in {row.last_location}, not {report.location}"
    return None


book_cargo = shipping.write_handler(
    "cargo:book",
    shipping.pipeline(BookCargo)
    .compute("id", lambda c: uuid.uuid4())
    .guard(
        lambda c: c.payload.arrival_deadline > c.now,
        otherwise=lambda c: fail(
            "validation_error",
            "the arrival deadline has passed",
            [{"path": "$.arrival_deadline", "message": "must be in the future"}],
        ),
    )
    .create(
        "cargo",
        Cargo,
        data=lambda c: _new_cargo(c.steps["id"], c.payload),
        event=lambda c: CargoBooked(c.steps["id"], c.payload.origin, c.payload.destination, c.payload.arrival_deadline),
    )
    .return_(lambda c: ok(c.steps["cargo"].id)),
    roles=["Booking"],
)


def _new_cargo(cargo_id: uuid.UUID, booking: BookCargo) -> Cargo:
    row = Cargo(origin=booking.origin, destination=booking.destination, arrival_deadline=booking.arrival_deadline)
    row.id = cargo_id
    return row


change_destination = shipping.write_handler(
    "cargo:change-destination",
    shipping.pipeline(ChangeDestination)
    .get_one("cargo", lambda c: select(Cargo).where(Cargo.id == c.payload.cargo_id))
    .guard(
        lambda c: c.steps["cargo"].transport_status != Transport.CLAIMED,
        otherwise=lambda c: fail("unprocessable", "the cargo has been claimed"),
    )
    .append_event(
        Cargo,
        id=lambda c: c.payload.cargo_id,
        event=lambda c: DestinationChanged(c.payload.cargo_id, c.payload.destination),
    )
    .branch(
        when=lambda c: c.steps["cargo"].routing_status == Routing.MISROUTED,
        on_true=lambda b: b.append_event(
            Cargo,
            id=lambda c: c.payload.cargo_id,
            event=lambda c: CargoNeedsRerouting(c.payload.cargo_id, "misrouted", c.steps["cargo"].last_location),
        ),
    )
    .return_(lambda c: ok(details(c.steps["cargo"]))),
    roles=["Booking"],
)

assign_route = shipping.write_handler(
    "cargo:assign-route",
    shipping.pipeline(AssignRoute)
    .guard(
        lambda c: not _chain_breaks(c.payload.legs),
        otherwise=lambda c: fail("validation_error", "the legs do not connect", _chain_breaks(c.payload.legs)),
    )
    .get_one("cargo", lambda c: select(Cargo).where(Cargo.id == c.payload.cargo_id))
    .guard(
        lambda c: c.steps["cargo"].transport_status in (Transport.NOT_RECEIVED, Transport.IN_PORT),
        otherwise=lambda c: fail("unprocessable", f"a cargo {c.steps['cargo'].transport_status} cannot be rerouted"),
    )
    .guard(
        lambda c: c.payload.legs[0].origin == _starts_at(c.steps["cargo"]),
        otherwise=lambda c: fail(
            "unprocessable",
            "the route must start where the cargo is",
            [{"path": "$.legs[0].origin", "message": f"must be {_starts_at(c.steps['cargo'])}"}],
        ),
    )
    .guard(
        lambda c: c.payload.legs[-1].destination == c.steps["cargo"].destination,
        otherwise=lambda c: fail(
            "unprocessable",
            "the route must end at the cargo's destination",
            [
                {
                    "path": f"$.legs[{len(c.payload.legs) - 1}].destination",
                    "message": f"must be {c.steps['cargo'].destination}",
                }
            ],
        ),
    )
    .append_event(
        Cargo,
        id=lambda c: c.payload.cargo_id,
        event=lambda c: RouteAssigned(c.payload.cargo_id, c.payload.legs, c.now + ESTIMATE),
    )
    .return_(lambda c: ok(details(c.steps["cargo"]))),
    roles=["Booking"],
)

register_handling = shipping.write_handler(
    "cargo:register-handling",
    shipping.pipeline(RegisterHandling)
    .guard(
        lambda c: (c.payload.voyage is not None) == (c.payload.activity in (Activity.LOAD, Activity.UNLOAD)),
        otherwise=lambda c: fail(
            "validation_error",
            "a load or unload names its voyage, a receive or claim none",
            [
                {
                    "path": "$.voyage",
                    "message": f"{'required' if c.payload.voyage is None else 'not allowed'} for {c.payload.activity}",
                }
            ],
        ),
    )
    .get_one("cargo", lambda c: select(Cargo).where(Cargo.id == c.payload.cargo_id))
    .compute("refusal", lambda c: _handling_refusal(c.steps["cargo"], c.payload))
    .guard(
        lambda c: c.steps["refusal"] is None,
        otherwise=lambda c: fail(
            "unprocessable", c.steps["refusal"] or "", [{"path": "$.activity", "message": c.steps["refusal"] or ""}]
        ),
    )
    .compute("was_misdirected", lambda c: c.steps["cargo"].misdirected)
    .append_event(
        Cargo,
        id=lambda c: c.payload.cargo_id,
        event=lambda c: HandlingRegistered(
            c.payload.cargo_id, c.payload.activity, c.payload.location, c.payload.voyage, c.now
        ),
    )
    .branch(
        when=lambda c: c.steps["cargo"].misdirected and not c.steps["was_misdirected"],
        on_true=lambda b: b.append_event(
            Cargo,
            id=lambda c: c.payload.cargo_id,
            event=lambda c: CargoNeedsRerouting(c.payload.cargo_id, "misdirected", c.payload.location),
        ),
    )
    .return_(lambda c: ok(details(c.steps["cargo"]))),
    roles=["Handling"],
)

# --- queries -------------------------------------------------------------------------------

cargo_details = shipping.query_handler(
    "cargo:details",
    shipping.query_pipeline(CargoId)
    .get_one("cargo", lambda c: select(Cargo).where(Cargo.id == c.payload.cargo_id))
    .return_(lambda c: ok(details(c.steps["cargo"]))),
)

list_cargos = shipping.query_handler(
    "cargo:list",
    shipping.query_pipeline(ListCargos)
    .find_many(
        "cargos",
        lambda c: (
            select(Cargo)
            .where(Cargo.misdirected.is_(True) if c.payload.misdirected_only else Cargo.misdirected.is_not(None))
            .order_by(Cargo.arrival_deadline, Cargo.id)
        ),
        limit=500,
    )
    .return_(lambda c: ok([details(row) for row in c.steps["cargos"]])),
)

possible_routes = shipping.query_handler(
    "cargo:possible-routes",
    shipping.query_pipeline(CargoId)
    .get_one("cargo", lambda c: select(Cargo).where(Cargo.id == c.payload.cargo_id))
    .return_(lambda c: ok(ROUTES.get((_starts_at(c.steps["cargo"]), c.steps["cargo"].destination), []))),
)

# --- the rerouting run ---------------------------------------------------------------------


def _still_unrouted(alert: CargoNeedsRerouting) -> str:
    where = f"at {alert.location}" if alert.location is not None else "before it was received"
    return f"Cargo {alert.cargo_id} was {alert.reason} {where} a day ago and has no new route yet."


reroute = shipping.workflow(
    "reroute",
    trigger=on_event(CargoNeedsRerouting),
    pipeline=shipping.workflow_pipeline(CargoNeedsRerouting)
    .send_webhook(
        url=lambda c: desk_url("/needs-rerouting"),
        body=lambda c: {
            "cargo_id": str(c.payload.cargo_id),
            "reason": c.payload.reason,
            "location": c.payload.location,
        },
    )
    .wait_for_event(
        "rerouted",
        RouteAssigned,
        key=lambda c: c.payload.cargo_id,
        event_key=lambda e: e.cargo_id,
        timeout=REROUTE_WITHIN,
    )
    .branch(
        when=lambda c: c.steps["rerouted"] is None,
        on_true=lambda b: b.send_mail(
            to=DESK,
            subject=lambda c: f"Cargo {c.payload.cargo_id} still has no new route",
            body=lambda c: _still_unrouted(c.payload),
        ),
    ),
)
