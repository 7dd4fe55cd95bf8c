"""What a mail header, and one mail address, may hold: the one rule ``send_mail`` checks
its fields by, the transports check a row by, and :func:`mail_address` checks a payload
field by, so an address a handler took is one its workflow's mail will take."""

from __future__ import annotations

import email.errors
import email.policy
import re
from typing import Any

import attrs

from ._host_names import resolvable_name

__all__ = [
    "ENCODED_HEADER_PROBLEM",
    "HEADER_PROBLEM",
    "address_problem",
    "ascii_domain",
    "header_problem",
    "mail_address",
]

#: What a mail header field may not hold: a line break (what ``str.splitlines`` breaks at,
#: as the email package does) or another control character but the tab.
_NOT_IN_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
HEADER_PROBLEM = "must not contain line breaks or control characters"
ENCODED_HEADER_PROBLEM = (
    "must not hold an RFC 2047 encoded word (=?...?=) that decodes to a line break or control character; "
    "give the text itself"
)
_ONE_ADDRESS = "must be one mail address (name@example.com or Name <name@example.com>)"
_NO_DOMAIN = (
    "has a domain no mail server can be found for (an empty label, one longer than 63 characters, "
    "253 in all, or one IDNA cannot encode)"
)


def header_problem(value: str) -> str | None:
    """Why ``value`` cannot be a mail header field (it would add headers, ``Bcc:``, in a
    transport that writes them as given); ``None`` if it can.  The email package decodes
    the RFC 2047 encoded words of a field it is given (``=?utf-8?q?Hi=0D=0ABcc:...?=``)
    and wrote what they decode to as given: a subject of printable text added a ``Bcc:``
    to the message (before Python 3.11.10 and 3.12.5, CVE-2024-6923; after, writing the
    message fails at every attempt).  So the field is checked as the package reads it."""
    if _NOT_IN_HEADER.search(value):
        return HEADER_PROBLEM
    if "=?" in value and _NOT_IN_HEADER.search(_as_read(value)):
        return ENCODED_HEADER_PROBLEM
    return None


def _as_read(value: str) -> str:
    """``value`` as the email package reads an unstructured field (a subject): its
    encoded words decoded."""
    try:
        return str(email.policy.default.header_factory("subject", value))
    except Exception:  # not expected of an unstructured field; unreadable is refused
        return "\x00"


def address_problem(value: str) -> str | None:
    """Why ``value`` (a recipient or the sender) is not exactly one mail address; ``None``
    if it is.  A comma, a group (``list:a@x,b@y;``) or an RFC 2047 encoded word that
    decodes to one makes one field several addresses: whoever writes the value (a
    payload field) would add recipients, as a line break would add a ``Bcc:``."""
    if "=?" in value:
        return "must not hold an RFC 2047 encoded word (=?...?=); give a display name as plain text"
    try:
        field = email.policy.default.header_factory("to", value)
        addresses = field.addresses
    except Exception:  # the email package fails on some (IndexError on "a@")
        return _ONE_ADDRESS
    defects = [d for d in field.defects if not isinstance(d, email.errors.NonASCIILocalPartDefect)]
    if len(addresses) != 1 or defects or not addresses[0].username or not addresses[0].domain:
        return _ONE_ADDRESS
    if ascii_domain(addresses[0].domain) is None:
        return _NO_DOMAIN
    return None


def ascii_domain(domain: str) -> str | None:
    """``domain`` as a name server is asked for it: a non-ASCII one in its ASCII form
    (IDNA, as Django's mail does); ``None`` if there is none (a label empty or longer than
    63 characters, more than 253 in all, or one IDNA cannot encode).  Before, such a
    recipient was queued, the handler told ``Ok``, and the mail was dead at its first
    attempt.  A domain literal (``[192.0.2.1]``) is taken as it is."""
    if domain.startswith("["):
        return domain
    try:
        encoded = domain if domain.isascii() else domain.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    return encoded if resolvable_name(encoded) else None


def mail_address(_instance: Any, _attribute: attrs.Attribute[Any], value: str) -> None:
    """An attrs validator for a payload field that a mail will be sent to (or from):
    ``attrs.field(validator=mail_address)``.  It takes what ``send_mail`` takes as one
    address and refuses the rest with the message ``send_mail`` would give, so a bad
    address is the dispatch's ``validation_error`` at its field, not a workflow run that
    fails at its mail step, long after the request was answered ``Ok``."""
    if not isinstance(value, str):  # a field typed otherwise, or an instance built by hand
        raise TypeError(f"must be a text, not {type(value).__name__}")
    problem = header_problem(value) or address_problem(value)
    if problem is not None:
        raise ValueError(problem)
