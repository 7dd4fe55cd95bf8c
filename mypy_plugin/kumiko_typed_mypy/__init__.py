"""mypy plugin for kumiko-typed.  Enable it with ``plugins = ["kumiko_typed_mypy"]``.

It turns the builders' marker types into exact ``TypedDict``s, so ``c.steps["x"]``
has the type of the step that produced ``"x"``, and reports the DSL's rules under
``kumiko-*`` error codes.  It imports neither user code nor SQLAlchemy.
"""

from __future__ import annotations

from mypy.plugin import Plugin


def plugin(version: str) -> type[Plugin]:
    from ._plugin import KumikoPlugin

    return KumikoPlugin
