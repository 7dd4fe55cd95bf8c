"""Why a handler, query or workflow an App was handed is not one of its own, with the fix.

"not registered in this App" left a new user to guess among three different mistakes:
the feature was never passed to ``App([...])``; the handler was added to the feature after
the App was built (an App takes its features' handlers once, when it is built); or the
module defining it was loaded twice (run as a script and imported by name: two ``Feature``
objects with one name, and the App holds the other one's handler).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._feature import Feature

__all__ = ["not_registered"]


def not_registered(kind: str, name: str, feature: Feature[Any], features: Sequence[Feature[Any]]) -> str:
    """The message for a ``kind`` ("handler", "query", "workflow") called ``name``, of
    ``feature``, that an App of ``features`` does not hold."""
    lead = f"{kind} {name} is not registered in this App"
    if any(f is feature for f in features):
        return f"{lead}: it was added to feature {feature.name!r} after the App was built; build the App afterwards"
    if any(f.name == feature.name for f in features):
        return (
            f"{lead}: the App holds another Feature named {feature.name!r}; was its module loaded twice"
            " (run as a script and imported by name)? Import the one module everywhere"
        )
    held = ", ".join(repr(f.name) for f in features) or "none"
    return f"{lead}: its feature {feature.name!r} is not among the App's features ({held}); pass it to App([...])"
