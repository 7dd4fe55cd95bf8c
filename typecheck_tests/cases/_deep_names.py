"""An item name imported from another module: pyright types it ``str``, not its literal."""

from typing import Final

CH: Final[str] = "ch"
