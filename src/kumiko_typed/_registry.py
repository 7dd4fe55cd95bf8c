"""What running pipelines needs to know of the App's features, built once at boot:
which class is which aggregate and event, and the projectors of each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import cattrs

from ._errors import UnregisteredError

if TYPE_CHECKING:
    from ._feature import Feature

__all__ = ["Projector", "Registry"]

Projector = Callable[[Any, Any], None]


class Registry:
    def __init__(self, features: Sequence[Feature[Any]], converter: cattrs.Converter) -> None:
        self.converter = converter
        self.aggregate_types: dict[type[Any], str] = {}
        self.event_names: dict[type[Any], str] = {}
        self.projectors: dict[tuple[type[Any], type[Any]], list[Projector]] = {}
        for feature in features:
            self.aggregate_types.update(feature.entities)
            self.event_names.update(feature.events)
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
