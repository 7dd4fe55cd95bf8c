"""A package's public names imported when first read (PEP 562 module ``__getattr__`` and
``__dir__``), for ``kumiko_typed`` and ``kumiko_typed.testing``.

Why: pytest loads the kit's plugin (a ``pytest11`` entry point) in every run of every
project whose environment has kumiko-typed installed, and importing the plugin imports
both packages.  Eager re-exports made that import the whole library, SQLAlchemy with it,
before any test asked for a fixture.

Stdlib only: importing this module must stay as cheap as the packages it serves.
Thread safety: ``importlib.import_module`` holds the module's import lock, so threads that
read a name at once get the one, fully executed module; storing the value in the package's
namespace stores the same object whichever thread does it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: MutableMapping[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``globals()`` as ``namespace``),
    whose public names ``where`` maps each to the module defining it (relative to
    ``package``).  A name read is imported from its module and stored in ``namespace``: the
    next read is a plain attribute lookup."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            # The interpreter's own message; name and obj let Python suggest a close name.
            raise AttributeError(f"module {package!r} has no attribute {name!r}", name=name, obj=sys.modules[package])
        try:
            value = getattr(importlib.import_module(module, package), name)
        except AttributeError as error:
            # Raised by the module's own code as it ran: as an AttributeError it would read
            # as "no such name" (``from package import name`` would swallow it).
            raise ImportError(f"cannot import name {name!r} from {package!r}: {error}", name=package) from error
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(namespace.keys() | where.keys())

    return __getattr__, __dir__
