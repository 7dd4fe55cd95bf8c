"""What running pipelines needs to know of the App's features, built once at boot:
which class is which aggregate and event, the projectors of each, and how to read a
stored event payload of an older schema version (its upcasters)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import cattrs

from ._awaitables import discard
from ._errors import UnreadableEvent, UnregisteredError
from ._structuring import Detail, structure

if TYPE_CHECKING:
    from ._eventstore import EventHead, EventRow
    from ._feature import Feature, Upcaster

T = TypeVar("T")

__all__ = ["Projector", "Registry"]

Projector = Callable[[Any, Any], None]


class Registry:
    def __init__(self, features: Sequence[Feature[Any]], converter: cattrs.Converter) -> None:
        self.converter = converter
        self.aggregate_types: dict[type[Any], str] = {}
        self.event_names: dict[type[Any], str] = {}
        #: Stored event type name → its class (boot refuses a name given to two classes).
        self.event_classes: dict[str, type[Any]] = {}
        self.event_schemas: dict[type[Any], tuple[int, dict[int, Upcaster]]] = {}
        self.projectors: dict[tuple[type[Any], type[Any]], list[Projector]] = {}
        for feature in features:
            self.aggregate_types.update(feature.entities)
            self.event_names.update(feature.events)
            self.event_classes.update({name: cls for cls, name in feature.events.items()})
            self.event_schemas.update(feature.event_schemas)
            for key, fns in feature.projectors.items():
                self.projectors.setdefault(key, []).extend(fns)

    def aggregate_type(self, entity: type[Any]) -> str:
        try:
            return self.aggregate_types[entity]
        except KeyError:
            raise UnregisteredError(
                f"{entity.__name__} is not an entity of any feature of this App; register it with feature.entity(...)"
            ) from None

    def event_name(self, event_type: type[Any]) -> str:
        try:
            return self.event_names[event_type]
        except KeyError:
            raise UnregisteredError(
                f"{event_type.__name__} is not a registered event; register it with feature.event(...)"
            ) from None

    def projectors_for(self, entity: type[Any], event_type: type[Any]) -> list[Projector]:
        return self.projectors.get((entity, event_type), [])

    def schema_version(self, event_type: type[Any]) -> int:
        """The schema version new events of ``event_type`` are stored with."""
        return self.event_schemas.get(event_type, (1, {}))[0]

    def load(self, row: EventRow | EventHead, event_type: type[T], event: str) -> T:
        """The stored event ``row`` as an ``event_type``: its payload upcast from the
        version it was stored in to the class's, then structured.  If this App cannot, an
        :class:`UnreadableEvent` says why after ``event`` (which event, in the caller's
        words), its type and the schema version it was stored at: a newer schema than the
        class's, an upcaster that raised, or the fields that do not fit; never a stored
        value.  ``read_stream``, rebuilds and workflows all say it so."""
        return self.load_payload(row.payload, row.schema_version, row.type, event_type, event)

    def load_payload(self, payload: Any, schema_version: int, type_name: str, event_type: type[T], event: str) -> T:
        """:meth:`load` of an event's stored JSON ``payload`` written at ``schema_version``
        (an event row's, or one a workflow run kept in its state)."""
        version, upcasters = self.event_schemas.get(event_type, (1, {}))
        if schema_version > version:
            what = _what(event, type_name, schema_version)
            raise UnreadableEvent(f"{what} is newer than {event_type.__name__}'s schema version {version}")
        # A payload that is no object (a row edited by hand) is not upcast: structuring
        # names it, at $.
        if isinstance(payload, Mapping) and schema_version < version:
            payload = dict(payload)
            for n in range(schema_version, version):
                # Named by the version it makes (in a chain, the one that failed, not the
                # class's), and never by its message, which may quote the payload.
                upcaster = f"an upcaster to schema version {n + 1}"
                try:
                    payload = upcasters[n](payload)
                except Exception as exc:
                    what = _what(event, type_name, schema_version)
                    raise UnreadableEvent(f"{what}: {upcaster} raised {type(exc).__name__}") from exc
                if not isinstance(payload, Mapping):
                    # An async function's, never to run: closed or cancelled, Python warns of
                    # none left open.
                    discard(payload)
                    # Else structuring would blame the stored payload: "expected a JSON object at $".
                    given = type(payload).__name__
                    what = _what(event, type_name, schema_version)
                    raise UnreadableEvent(f"{what}: {upcaster} returned a {given}, not the payload as a dict")
        try:
            return self.converter.structure(payload, event_type)
        except Exception as exc:
            name = event_type.__name__
            found = structure(self.converter, payload, event_type)
            unfit = "; ".join(_unfit(d, name) for d in found) if isinstance(found, list) else type(exc).__name__
            what = _what(event, type_name, schema_version)
            raise UnreadableEvent(f"{what} does not load as {name}: {unfit}") from exc


def _what(event: str, type_name: str, schema_version: int) -> str:
    """How an :class:`UnreadableEvent` names the event, made only when one is raised: at
    every load it was a microsecond of the feed's for each event of a waited type."""
    return f"{event} ({type_name!r}, stored at schema version {schema_version})"


def _unfit(detail: Detail, name: str) -> str:
    """One field of a stored event its class (``name``) does not read, by path: the
    framework's own words, never a stored value (a validator's message may quote one)."""
    message = detail["message"].partition(", got ")[0]
    if not (message.startswith("expected ") or message in ("unknown field", "required field is missing")):
        message = f"refused by {name}'s checks"
    return f"{message} at {detail['path']}"
