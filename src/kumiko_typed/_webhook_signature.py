"""Signed webhooks as Standard Webhooks specifies them (https://www.standardwebhooks.com/).

A receiver that verifies the signature knows the request came from the holder of the key
and was not changed on the way, without the key travelling (a bearer token travels with
every request, to every receiver a URL names).  The spec's verifiers (Svix's and the
spec's own libraries, in many languages) read three headers: ``webhook-id``, the same on
every attempt (the outbox row's id, as the ``Idempotency-Key``); ``webhook-timestamp``,
the attempt's time in Unix seconds (a receiver refuses one far from its clock, so a
captured request cannot be replayed later); and ``webhook-signature``, ``v1,`` and the
base64 of HMAC-SHA256 over ``id.timestamp.body`` with the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

from ._errors import DeliveryError

__all__ = ["SIGNATURE_HEADERS", "signature_headers", "signing_keys"]

#: The headers a signed request carries; a step's own of these names is replaced.
SIGNATURE_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})

_KEY_PREFIX = "whsec_"


def signing_keys(secret: str, ref: str) -> list[bytes]:
    """The HMAC keys a secret holds: one, or several separated by blanks while a key is
    rotated (each signs, and a receiver knowing either accepts the request).  Each is
    base64, after the ``whsec_`` prefix the spec's tools print (prefix and padding
    optional here, as in the spec's libraries)."""
    keys = [_key(text.removeprefix(_KEY_PREFIX)) for text in secret.split()]
    if not keys or not all(keys):
        raise DeliveryError(
            f"secret {ref!r} is not a signing key: give it as whsec_ followed by base64 "
            "(the form Standard Webhooks' tools make, e.g. whsec_ + base64 of 32 random bytes; "
            "several separated by blanks while rotating)"
        )
    return keys


def _key(text: str) -> bytes:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return b""


def signature_headers(keys: list[bytes], message_id: str, body: bytes) -> dict[str, str]:
    """The three headers of a request with ``body`` (the exact bytes sent), signed now with
    each of ``keys`` (the spec's header holds one ``v1,`` signature per key).  Now is the
    real time, not the App's clock: the receiver compares it with its own."""
    stamp = str(int(time.time()))
    signed = b"%s.%s.%s" % (message_id.encode(), stamp.encode(), body)
    signatures = (base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode() for key in keys)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": stamp,
        "webhook-signature": " ".join(f"v1,{signature}" for signature in signatures),
    }
