"""A subclass of ``Feature`` gets ``Feature``'s hooks.

mypy names a method call by the class of its receiver, not by the class that defines
the method: ``team.pipeline(P)`` on ``class Team(Feature[C])`` is ``shop.Team.pipeline``,
and a constructor call is the subclass's own name.  Looked up by those names alone, a
subclass's pipelines started with ``Any`` keys (a typo in a first step passed) and its
registrations and capabilities went unchecked.  So a name the tables miss is resolved to
``Feature``'s when the subclass inherits that method (or ``__init__``) from it; a method
the subclass defines itself is its own (its signature may differ), as are builders'
subclasses (their type arguments need not be a builder's).
"""

from __future__ import annotations

from collections.abc import Collection

from mypy.nodes import TypeInfo
from mypy.plugin import Plugin

from ._names import FEATURE


def _subclass(plugin: Plugin, fullname: str) -> TypeInfo | None:
    """The class named ``fullname`` when it derives from ``Feature`` (``None`` otherwise)."""
    node = plugin.lookup_fully_qualified(fullname)
    info = node.node if node is not None else None
    return info if isinstance(info, TypeInfo) and info.fullname != FEATURE and info.has_base(FEATURE) else None


def feature_method(plugin: Plugin, fullname: str, hooked: Collection[str]) -> str | None:
    """``Feature``'s full name of the method ``fullname`` (``module.Sub.method``) calls,
    when ``Sub`` derives from ``Feature`` and inherits that method; ``hooked`` are the
    method names ``Feature`` has hooks for (a cheap test that most calls fail first)."""
    owner, _, name = fullname.rpartition(".")
    if name not in hooked or not owner:
        return None
    info = _subclass(plugin, owner)
    defining = info.get_containing_type_info(name) if info is not None else None
    return f"{FEATURE}.{name}" if defining is not None and defining.fullname == FEATURE else None


def inherits_init(plugin: Plugin, fullname: str) -> bool:
    """Whether ``fullname`` is a subclass of ``Feature`` constructed by ``Feature.__init__``.

    Asked of every function a program calls.  A built-in's name and mypy's own names of a
    display or comprehension (``<list>``) are no such class, without a lookup; any other
    name is looked up, a class named in lower case too (skipping every lower-case name, as
    before, gave ``class team(Feature[C])`` no capabilities: each of its declared tier-2
    steps was a false ``kumiko-tier``).  The lookup is a few dictionary reads: over the
    type-check cases' 15,500 calls the lookups of this filter took 0.10-0.14 s, those of
    the lower-case one it replaces 0.09-0.16 s, timed side by side in one process."""
    if fullname.startswith(("builtins.", "<")):
        return False
    info = _subclass(plugin, fullname)
    defining = info.get_containing_type_info("__init__") if info is not None else None
    return defining is not None and defining.fullname == FEATURE
