"""What running pipelines needs to know of the App's features, built once at boot:
which class is which aggregate and event, the projectors of each, and how to read a
stored event payload of an older schema version (its upcasters)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import cattrs

from ._errors import StateError, UnregisteredError

if TYPE_CHECKING:
    from ._eventstore import EventRow
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

    def load(self, row: EventRow, event_type: type[T]) -> T:
        """The stored event ``row`` as an ``event_type``: its payload upcast from the
        version it was stored in to the class's, then structured."""
        return self.converter.structure(self.upcast(row, event_type), event_type)

    def upcast(self, row: EventRow, event_type: type[Any]) -> dict[str, Any]:
        """The payload of the stored event ``row`` upcast to ``event_type``'s schema
        version: a ``StateError`` if it was stored at a newer one; what an upcaster
        raises, raised."""
        version, upcasters = self.event_schemas.get(event_type, (1, {}))
        stored = row.schema_version
        if stored > version:
            raise StateError(
                f"event {row.event_id} is stored at schema version {stored}, "
                f"newer than {event_type.__name__}'s {version}"
            )
        payload = dict(row.payload)
        for n in range(stored, version):
            payload = upcasters[n](payload)
        return payload
