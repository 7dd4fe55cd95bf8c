"""A payload class's own checks (attrs validators), one problem per field, in words a client reads.

attrs runs validators in ``__init__`` and stops at the first that raises, so the constructor
alone would name one field at a time, and only once every field had the right JSON type.
When structuring a class fails, :func:`with_validator_problems` runs the validator of every
field that did structure, against a stand-in instance, and puts each failure under its
field.  Only the failure path pays for this: a valid payload is built by cattrs as before.

:func:`said` words an exception for the client: attrs' built-in validators raise
``(message, Attribute, expected, value)``, whose ``str()`` is that tuple with the
Attribute's repr; the message is read from what was expected instead, without echoing the
refused value (which may be a secret the client mistyped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ClassValidationError, ForbiddenExtraKeysError

__all__ = ["json_type", "listed", "said", "validator_problems", "with_validator_problems"]

#: Longest message passed on from an exception's own words.
_MAX_MESSAGE: Final = 200
#: Allowed values listed in a message at most.
_MAX_LISTED: Final = 10


def json_type(value: object) -> str:
    """The JSON name of a value's type (a Python-only value by its class name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def listed(values: Iterable[object]) -> str:
    """``"a", "b", 3``: values as JSON spells them, at most :data:`_MAX_LISTED`."""
    shown = list(values)
    words = [json.dumps(v, ensure_ascii=False) if json_type(v) in _SCALARS else repr(v) for v in shown]
    if len(words) > _MAX_LISTED:
        return ", ".join(words[:_MAX_LISTED]) + f", ... ({len(words)} in all)"
    return ", ".join(words)


_SCALARS: Final = frozenset({"null", "boolean", "number", "string"})


def _clipped(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _expected(expected: object, value: object) -> str | None:
    """attrs' ``instance_of``, ``in_`` and ``matches_re``, worded from what they expected."""
    if isinstance(expected, re.Pattern):
        return f"expected a string matching the pattern {_clipped(repr(expected.pattern))}"
    if isinstance(expected, type) or (isinstance(expected, tuple) and all(isinstance(t, type) for t in expected)):
        types = expected if isinstance(expected, tuple) else (expected,)
        return f"expected {' or '.join(t.__name__ for t in types)}, got {json_type(value)}"
    if isinstance(expected, (set, frozenset)):
        return f"expected one of {listed(sorted(expected, key=repr))}"
    if isinstance(expected, (list, tuple, range, Mapping)):
        return f"expected one of {listed(expected)}"
    return None


def said(exc: BaseException) -> str:
    """What ``exc`` says to the client: its first argument if that is text (clipped), else
    its class name; for attrs' built-in validators, what they expected."""
    args = exc.args
    if len(args) == 4 and isinstance(args[1], attrs.Attribute):
        worded = _expected(args[2], args[3])
        if worded is not None:
            return worded
    if args and isinstance(args[0], str) and args[0].strip():
        return _clipped(args[0])
    return type(exc).__name__


def _failed_fields(exc: ClassValidationError) -> tuple[set[str], list[Exception]]:
    """The fields that failed to structure, and the errors that came from the constructor."""
    failed: set[str] = set()
    constructor: list[Exception] = []
    for sub in exc.exceptions:
        notes = [n for n in getattr(sub, "__notes__", ()) if isinstance(n, AttributeValidationNote)]
        if notes:
            failed.add(notes[-1].name)
        elif not isinstance(sub, ForbiddenExtraKeysError):
            constructor.append(sub)
    return failed, constructor


def _noted(exc: Exception, field: Any) -> Exception:
    exc.__notes__ = [AttributeValidationNote(f"Checking {field.name}", field.name, field.type)]
    return exc


def validator_problems(conv: cattrs.Converter, cls: type, data: Mapping[str, Any], skip: set[str]) -> list[Exception]:
    """The failure of each converter and validator on a field the client gave, noted with
    the field's name.

    The validators run against a stand-in made without ``__init__`` (so without them),
    holding every field's structured value or its default.  A validator that reads a field
    the stand-in lacks (one that failed to structure) cannot be judged yet and is left out."""
    instance: Any = object.__new__(cls)
    problems: list[Exception] = []
    given: list[Any] = []
    for field in attrs.fields(cls):
        if field.name in skip or isinstance(field.converter, attrs.Converter):
            continue  # failed already, or converted with the instance: left to the constructor
        if field.init and field.name in data:
            try:
                value = conv.structure(data[field.name], field.type)
            except Exception:  # a generic class's field: its type is only a TypeVar here
                continue
            if field.converter is not None:
                try:
                    value = field.converter(value)
                except Exception as exc:
                    problems.append(_noted(exc, field))
                    continue
            given.append(field)
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            if field.default.takes_self:
                continue
            value = field.default.factory()
        elif field.default is not attrs.NOTHING:
            value = field.default
        else:
            continue
        object.__setattr__(instance, field.name, value)
    for field in given:
        if field.validator is None:
            continue
        try:
            field.validator(instance, field, getattr(instance, field.name))
        except AttributeError:
            continue
        except Exception as exc:
            problems.append(_noted(exc, field))
    return problems


def _same_error(a: Exception, b: Exception) -> bool:
    try:
        return type(a) is type(b) and bool(a.args == b.args)
    except Exception:  # arguments whose comparison fails or is no truth value
        return False


def with_validator_problems(
    conv: cattrs.Converter, exc: ClassValidationError, cls: type, data: Mapping[str, Any]
) -> ClassValidationError:
    """``exc`` with the validator failures of every well-typed field added under their names.

    The constructor's own error (at the class's path) is kept unless a field's validator
    raised the same one: then it was that field's, and the field now names it."""
    failed, constructor = _failed_fields(exc)
    problems = validator_problems(conv, cls, data, failed)
    if not problems:
        return exc
    explained = [c for c in constructor if any(_same_error(p, c) for p in problems)]
    kept = [sub for sub in exc.exceptions if not any(sub is c for c in explained)]
    order = {field.name: i for i, field in enumerate(attrs.fields(cls))}

    def position(sub: Exception) -> int:  # the class's field order; unknown keys, then the rest, last
        notes = [n for n in getattr(sub, "__notes__", ()) if isinstance(n, AttributeValidationNote)]
        return order[notes[-1].name] if notes else len(order)

    return ClassValidationError(exc.message, sorted(kept + problems, key=position), exc.cl)
