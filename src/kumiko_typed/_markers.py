"""Marker types that the builders' signatures return and the mypy plugin rewrites.

Each marker subclasses ``Any``: without the plugin (plain mypy, pyright, an IDE)
``c.steps["x"]`` is simply ``Any`` — no false errors, no precision.  With the
plugin, the marker is replaced by an exact ``TypedDict`` (DESIGN §4.1–4.2).
They are never instantiated.

pyright never sees the start markers ``NoSteps``/``NoScope``: for it they are the
empty key list of the generated builders, which the builders grow one exact key per
step (DESIGN §4.8).  The other markers stay its fallback where a shape has no exact
encoding.

For pyright an ``Any`` base alone is not enough: it types a member found only
through that base as *Unknown*, which ``strict`` mode reports on every key read
(``reportUnknownMemberType`` and its follow-ons).  So the markers also declare
their item and attribute access as returning an explicit ``Any``, which strict
mode accepts.  mypy sees no difference (both are ``Any`` to it), and with the
plugin the marker is gone before any access is checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

__all__ = ["AddScope", "AddStep", "Branch", "Loop", "NoScope", "NoSteps", "Retry", "SomeSteps"]

S = TypeVar("S", covariant=True)
S1 = TypeVar("S1", covariant=True)
S2 = TypeVar("S2", covariant=True)
R = TypeVar("R", covariant=True)
I = TypeVar("I", covariant=True)  # noqa: E741 - the item type of a loop


class _Marker(Any):
    def __init__(self) -> None:
        raise TypeError("marker types exist for the type checker only")

    if TYPE_CHECKING:
        # c.steps["x"] and c.steps.get("x") are explicit Any (see the module docstring).
        def __getitem__(self, key: str, /) -> Any: ...
        def __getattr__(self, name: str, /) -> Any: ...


#: mypy takes ``MYPY`` as always true, the interpreter as ``False``; pyright reads both
#: branches and keeps the last definition, so the ``else`` branch is its view.
MYPY = False

if TYPE_CHECKING and not MYPY:
    from ._builders import Keys, Scope

if MYPY:

    class NoSteps(_Marker):
        """No step has produced a key yet."""

    class NoScope(_Marker):
        """No ``for_each`` item is in scope."""

else:
    # pyright's view (DESIGN §4.8): the generated key list of ``_builders``, empty.
    NoSteps: TypeAlias = "Keys[()]"
    NoScope: TypeAlias = "Scope[()]"


class AddStep(_Marker, Generic[S, R]):
    """``S`` plus one key (named by the step's literal name) of type ``R``."""


class Branch(_Marker, Generic[S1, S2]):
    """The keys before the branch plus those of both arms (``T | None`` where only
    one arm sets them).  The keys before are read from the receiver, not repeated
    here, so that marker types stay linear in size without the plugin."""


class Loop(_Marker, Generic[S1]):
    """The keys before the loop plus those of its body, each ``T | None`` (zero
    iterations leave them unset)."""


class Retry(_Marker, Generic[S1]):
    """The keys before the retry plus those of its body, plain (the body completed)."""


class AddScope(_Marker, Generic[S, I]):
    """A scope plus the loop item (named by ``for_each``'s literal name) of type ``I``."""


class SomeSteps(_Marker, Generic[S]):
    """Keys ``S`` known exactly, plus keys the plugin cannot know (a branch arm or loop
    body typed ``Any``): with the plugin, a known key reads as its type and any other as
    ``Any``.  Only the plugin produces it; the builders never name it."""

    def __getitem__(self, key: str) -> Any: ...
