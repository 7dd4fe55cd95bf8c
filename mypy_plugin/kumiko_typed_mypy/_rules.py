"""The rule table as the plugin reads it, typed by the table's own definitions.

At run time ``rules`` is ``kumiko_typed/_rules.py`` executed on its own (see
``_table.py``); for mypy it is that module itself.  So every read is typed as the
table declares it, and reading an entry the table does not have (``rules.STEP_RULEZ``)
fails ``mypy --strict`` on the plugin, with no second copy of the table to keep in
step.  (As a ``ModuleType`` every read was ``Any``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._table import PLUGIN_TABLE, installed, load

if TYPE_CHECKING:
    from kumiko_typed import _rules as rules
else:
    rules = load(installed(), PLUGIN_TABLE)

__all__ = ["rules"]
