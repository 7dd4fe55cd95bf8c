"""Whether a name server could ever answer for a host name: the one length rule a webhook's
URL host and a mail address's domain are both held to, so that neither is queued, told
``Ok``, and then dead at its first attempt's lookup."""

from __future__ import annotations

__all__ = ["resolvable_name"]


def resolvable_name(name: str) -> bool:
    """Whether the ASCII host ``name`` fits a lookup (RFC 1035): every dot-separated label
    1 to 63 characters, 253 in all, a last dot allowed (``a..b.example``, a 64-character
    label or a longer name fails every lookup with ``label empty or too long``)."""
    bare = name[:-1] if name.endswith(".") else name
    return len(bare) <= 253 and all(1 <= len(label) <= 63 for label in bare.split("."))
