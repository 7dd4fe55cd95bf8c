"""Which addresses a webhook may not reach under ``App(webhook_private_addresses=False)``.

A URL a tenant gives (a "notify me here" setting) would otherwise let the worker post to
whatever the worker's network reaches: the cloud's metadata service (169.254.169.254,
holding the host's credentials), the database, an admin port on localhost.  The check is
made on the addresses the connection is made to, after the lookup, so a name that
resolves to an inside address (or is made to, between a check and the connect) is
refused as the address literal is.
"""

from __future__ import annotations

import ipaddress

import httpcore

__all__ = ["PrivateHost", "is_private", "public_only", "refused"]

#: Prefixes whose last 32 bits are the IPv4 address reached: NAT64's well-known prefix
#: (RFC 6052), IPv4-compatible addresses (``::a.b.c.d``, RFC 4291, routed by a host's
#: automatic tunnel) and SIIT's IPv4-translated ones (``::ffff:0:a.b.c.d``, RFC 2765).
_EMBEDDING = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96"))
#: Local-use NAT64 (RFC 8215): the network's own translator, to whatever IPv4 address its
#: prefix length places where; all of it counts as inside.  Python's own tables know it
#: from 3.11.10 and 3.12.4 only, so a webhook's refusal hung on the interpreter's patch level.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


def is_private(address: str) -> bool:
    """Whether ``address`` is on no public network: loopback, private (RFC 1918, unique
    local), link-local, shared (100.64/10), multicast, reserved or unspecified; an IPv6
    address that embeds an IPv4 one (mapped, compatible, translated, 6to4, NAT64) counts as
    the IPv4 address, and local-use NAT64 as inside."""
    ip = ipaddress.ip_address(address)  # parses an IPv6 zone index (fe80::1%eth0) too
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _LOCAL_NAT64:
            return True
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif any(ip in prefix for prefix in _EMBEDDING):
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return not ip.is_global or ip.is_multicast


class PrivateHost(httpcore.ConnectError):
    """A webhook's host has no address it may be sent to: the attempt is not repeated."""


def public_only(host: str, found: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """``found`` (a lookup's (address, port) pairs) without the private ones; raises
    :class:`PrivateHost` naming them when none is left."""
    public = [pair for pair in found if not is_private(pair[0])]
    if public:
        return public
    raise refused(host, [address for address, _port in found])


def refused(host: str, private: list[str]) -> PrivateHost:
    """The error of a webhook to ``host``, whose ``private`` addresses it may not reach."""
    shown = ", ".join(sorted(set(private)))
    return PrivateHost(
        f"{host} resolves to {shown}: a private, loopback, link-local or reserved address, "
        "which App(webhook_private_addresses=False) sends no webhook to"
    )
