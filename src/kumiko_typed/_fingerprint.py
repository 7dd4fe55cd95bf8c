"""A workflow definition's fingerprint: its step structure and its resolvers' code.

A run resumed under a different definition would mix old and new steps; comparing
fingerprints turns that into a clear ``workflow_definition_changed`` failure.

Workers are separate processes, so nothing that varies between processes of the same
program may enter the hash: the iteration order of a set constant (string hashing is
randomized per process) and object addresses (the default ``repr``).
"""

from __future__ import annotations

import functools
import hashlib
import re
import types
from collections.abc import Sequence
from typing import Any

import attrs

from ._steps import LATER, Block, Step, walk

__all__ = ["fingerprint"]

_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def _const(const: object) -> str:
    """``repr`` of a code constant, the same in every process."""
    if isinstance(const, frozenset):
        return "frozenset({" + ", ".join(sorted(_const(c) for c in const)) + "})"
    if isinstance(const, tuple):
        return "(" + ", ".join(_const(c) for c in const) + ",)"
    return _ADDRESS.sub("", repr(const))


def _code(code: types.CodeType, out: list[bytes]) -> None:
    out.append(code.co_code)
    out.append(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code(const, out)
        else:
            out.append(_const(const).encode())


def _value(value: Any, out: list[bytes]) -> None:
    if isinstance(value, Block):
        out.append(b"block")  # its steps come from the walk, under their own paths
    elif isinstance(value, types.FunctionType):
        _code(value.__code__, out)
    elif isinstance(value, types.MethodType):
        out.append(f"method of {type(value.__self__).__module__}.{type(value.__self__).__qualname__}".encode())
        _value(value.__func__, out)
    elif isinstance(value, functools.partial):
        out.append(b"partial")
        _value(value.func, out)
        for arg in (*value.args, *sorted(value.keywords.items())):
            _value(arg, out)
    elif isinstance(value, type):
        out.append(f"{value.__module__}.{value.__qualname__}".encode())
    elif isinstance(value, (list, tuple)):
        out.append(f"{type(value).__name__}[{len(value)}]".encode())
        for item in value:
            _value(item, out)
    else:
        out.append(_const(value).encode())


def fingerprint(steps: Sequence[Step], builder: str) -> str:
    """The hash of every step of the tree: its path, kind and fields."""
    out: list[bytes] = []
    for path, step, _inside in walk(steps, builder):
        out.append(f"[{path} {step.kind}".encode())
        for field in attrs.fields(type(step)):
            if field.metadata.get(LATER) and getattr(step, field.name) == field.default:
                continue  # an argument added in a later release, not given: the old hash
            out.append(field.name.encode())
            _value(getattr(step, field.name), out)
        out.append(b"]")
    return hashlib.sha256(b"\x00".join(out)).hexdigest()
