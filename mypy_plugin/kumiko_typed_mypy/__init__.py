"""mypy plugin for kumiko-typed.  Enable it with ``plugins = ["kumiko_typed_mypy"]``.

It turns the builders' marker types into exact ``TypedDict``s, so ``c.steps["x"]``
has the type of the step that produced ``"x"``, and reports the DSL's rules under
``kumiko-*`` error codes.  It imports neither user code nor SQLAlchemy.

Importing this package imports only the standard library (mypy is imported when mypy
asks for the plugin), so ``scripts/generate_builders.py`` can share the rule table's
loader (``_table.py``) without mypy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy.plugin import Plugin


def plugin(version: str) -> type[Plugin]:
    from ._plugin import KumikoPlugin

    return KumikoPlugin
