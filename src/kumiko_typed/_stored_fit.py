"""Whether a stored attrs value's fields (or a stored entity's columns) still hold what
their class's annotations say.

A run keeps its payload and the attrs values its steps computed as JSON, rebuilt by the
class's ``__init__``, which checks no types; an entity it holds (a ``create``'s ``Saved``,
a read's row) is rebuilt with its stored columns set, which checks none either.  A deploy
that changes a field's type (``n: int`` now ``str``; a column's ``Mapped[str]`` now
``Mapped[int]``) would hand the resumed steps a value of the old type, and the first
resolver that used it as the new one (``c.payload.n.upper()``) would fail the run with
``internal_error``: a run lost to a deploy the pre-deploy check called safe.  The codec asks
this module instead, so the worker strands such a run and ``check_runs`` lists it, with a
reason in field and type names (never the value).  Only the value's own types are read:
the numeric tower of PEP 484 (an ``int`` is a ``float``) holds, and what cannot be judged
(``Any``, a type variable, a protocol, an annotation that does not
resolve) fits.  Each annotation is turned into a check once per class (a resumed run's
payload is rebuilt at every resume).
"""

from __future__ import annotations

import enum
import types
import typing
from collections import abc
from collections.abc import Callable
from typing import Any, Final

import attrs
from sqlalchemy import inspect
from sqlalchemy.orm import Mapped

__all__ = ["FieldTypes", "check_of", "misfit"]

Check = Callable[[object], bool]
#: Per class: ``(attribute, annotation, its check)`` of its fields, or ``None`` when its
#: annotations do not resolve (nothing to judge by).
FieldTypes = dict[type[Any], tuple[tuple[str, Any, Check], ...] | None]

_UNIONS: Final = (typing.Union, types.UnionType)
#: Origins whose one argument types every item.
_ITEMS: Final = (list, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Set, abc.MutableSet, abc.Collection)
#: Origins whose two arguments type the keys and the values.
_PAIRS: Final = (dict, abc.Mapping, abc.MutableMapping)


def misfit(cls: type[Any], value: object, known: FieldTypes) -> str | None:
    """The first field of ``value`` (an instance of the attrs class or entity ``cls``) whose value
    its annotation no longer takes, as a reason (``its 'n' holds an int, and Order now says
    str``); ``None`` if every field fits.  ``known`` caches the checks per class."""
    fields = known.get(cls, ())
    if fields == ():
        fields = known[cls] = _fields(cls)
    for name, annotation, check in fields or ():
        held = getattr(value, name, None)
        if not check(held):
            return f"its {name!r} holds {_a(type(held).__name__)}, and {cls.__name__} now says {_shown(annotation)}"
    return None


def _fields(cls: type[Any]) -> tuple[tuple[str, Any, Check], ...] | None:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # an annotation that does not resolve in this process: not judged
        return None
    if not attrs.has(cls):  # an entity: its mapped columns, by their ``Mapped[...]`` annotations
        columns = inspect(cls).column_attrs
        return tuple((a.key, t, _column(a.columns[0], t)) for a in columns for t in [_unmapped(hints.get(a.key, Any))])
    out = []
    for f in attrs.fields(cls):
        t = hints.get(f.name, f.type)
        out.append((f.name, t, check_of(t)))
    return tuple(out)


def _column(column: Any, t: Any) -> Check:
    """A column's check: its annotation's, or what the database itself gives for it — the
    Python type of its SQL type (a ``Numeric`` column annotated ``float`` loads a
    ``Decimal``) — so a value the release that checks it loads itself is never judged a
    misfit; and ``None``, which an entity not saved yet holds in any column it has not
    set (its ``tenant_id``, a column the database fills)."""
    by_hint = check_of(t)
    try:
        loaded: type[Any] | None = column.type.python_type
    except NotImplementedError:  # a type that does not say (a user-defined one)
        loaded = None
    return lambda v: v is None or by_hint(v) or (loaded is not None and isinstance(v, loaded))


def _unmapped(t: Any) -> Any:
    """A column's Python type: ``Mapped[int]`` is ``int`` (a column declared without
    an annotation is not judged)."""
    return typing.get_args(t)[0] if typing.get_origin(t) is Mapped else t


def _any(_: object) -> bool:
    return True


def check_of(t: Any) -> Check:
    """A function telling whether a value is of the type ``t`` says, items of its
    containers included."""
    origin = typing.get_origin(t)
    if origin is None:
        return _plain(t)
    args = typing.get_args(t)
    if origin is typing.Annotated:
        return check_of(args[0])
    if origin in _UNIONS:
        checks = [check_of(a) for a in args]
        return lambda v: any(c(v) for c in checks)
    if origin is typing.Literal:
        return lambda v: any(type(v) is type(a) and v == a for a in args)
    if not isinstance(origin, type):
        return _any  # a special form this module does not judge
    if origin is tuple:
        return _tuple(args)
    if origin in _ITEMS and len(args) == 1:
        item = check_of(args[0])
        return lambda v: isinstance(v, origin) and (isinstance(v, str) or all(item(x) for x in v))
    if origin in _PAIRS and len(args) == 2:
        key, val = check_of(args[0]), check_of(args[1])
        return lambda v: isinstance(v, origin) and all(key(k) and val(x) for k, x in v.items())
    return _instance(origin)


def _tuple(args: tuple[Any, ...]) -> Check:
    if len(args) == 2 and args[1] is Ellipsis:
        item = check_of(args[0])
        return lambda v: isinstance(v, tuple) and all(item(x) for x in v)
    if args == ((),):
        return lambda v: v == ()
    checks = [check_of(a) for a in args]
    return lambda v: (
        isinstance(v, tuple)
        and (not checks or (len(v) == len(checks) and all(c(x) for c, x in zip(checks, v, strict=True))))
    )


def _plain(t: Any) -> Check:
    if t is Any or t is object or isinstance(t, (typing.TypeVar, str, typing.ForwardRef)):
        return _any
    if t is None or t is type(None):
        return lambda v: v is None
    supertype = getattr(t, "__supertype__", None)  # a NewType
    if supertype is not None:
        return check_of(supertype)
    if not isinstance(t, type):
        return _any
    # PEP 484: an int is accepted where a float is; and a bool is an int to every checker
    # (Order(n=True) passes mypy), so a run holding one is no deploy's misfit to strand.
    if t is float:
        return lambda v: isinstance(v, (int, float))
    if t is complex:
        return lambda v: isinstance(v, (int, float, complex))
    if issubclass(t, enum.Enum):
        # A StrEnum or IntEnum member stored by a release before the enum tag reads back
        # as its plain value, which equals the member (a plain Enum's value equals none).
        return lambda v: isinstance(v, t) or any(member == v for member in t)
    return _instance(t)


def _instance(t: type[Any]) -> Check:
    try:
        isinstance(None, t)
    except TypeError:  # a protocol not checkable at run time
        return _any
    return lambda v: isinstance(v, t)


def _a(name: str) -> str:
    return f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name}"


def _shown(t: Any) -> str:
    """An annotation as it reads in source: ``str``, ``list[int]``, ``int | None``."""
    if isinstance(t, type) and not typing.get_args(t):
        return t.__qualname__
    return str(t).replace("typing.", "")
