"""A misspelt key: the closest keys that exist, added to mypy's own error.

Reading a key no step produced is mypy's error for an anonymous ``TypedDict``, which
lists at most five keys and, unlike its error for a named ``TypedDict``, suggests none;
in a pipeline of ten steps the key meant is often not among those five.  After mypy has
checked a step's lambdas, this hook appends ``did you mean "total"?`` to such an error
in that call, choosing among the keys of the steps or the scope its lambdas read (the
receiver's).  The closeness is difflib's (cutoff 0.6) rather than mypy's stricter one
for attributes (0.75), which misses a swap of two letters in a short key ("lien" for
"line").  The error's code and place stay mypy's.
"""

from __future__ import annotations

import re
from typing import Final

from mypy.messages import format_item_name_list
from mypy.plugin import MethodContext
from mypy.types import Instance, get_proper_type

from .._names import SCOPE_ARG, STEPS_ARG
from .._typeops.closest import did_you_mean
from .._typeops.keys import keys_of
from .._typeops.reported import recorded_in

_UNKNOWN_KEY: Final = re.compile(r'^"(?P<key>.*)" is not a valid TypedDict key; expected one of (?P<listed>\(.*\))$')


def _readable(ctx: MethodContext) -> list[list[str]]:
    """The key lists the call's lambdas read: the receiver's steps and its scope."""
    receiver = get_proper_type(ctx.type)
    if not (isinstance(receiver, Instance) and len(receiver.args) > SCOPE_ARG):
        return []
    out: list[list[str]] = []
    for index in (STEPS_ARG, SCOPE_ARG):
        keys = keys_of(receiver.args[index])
        if isinstance(keys, dict):
            out.append(list(keys))
    return out


def suggest(ctx: MethodContext) -> None:
    """Append the closest keys to this call's unknown-key errors that have none yet."""
    readable = _readable(ctx)
    if not readable:
        return
    for info in recorded_in(ctx.api.msg.errors, ctx.context):
        if info.severity != "error":
            continue
        match = _UNKNOWN_KEY.match(info.message)
        if match is None:
            continue
        for keys in readable:
            if format_item_name_list(keys) == match["listed"]:
                fix = did_you_mean(match["key"], keys)
                if fix is not None:
                    info.message += f"; {fix}"
                break
