"""Workflow state as JSON, with type tags resolved only against registered classes.

No pickle: a stored run names a class by its registered name, and decoding looks
that name up in the App's registry — an unknown name is an error, never an import.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import hashlib
import json
import math
import typing
import uuid
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Final

import attrs
from sqlalchemy import inspect
from sqlalchemy.orm import configure_mappers

from ._canonical import exact_number, utc_instant, utc_time_text
from ._entity import Entity
from ._errors import ClassMismatch, StateError, UnreadableEvent
from ._field_types import field_types
from ._jsonable import jsonable
from ._limits import MAX_DEPTH
from ._saved import Saved
from ._stored_fit import FieldTypes, misfit
from ._triggers import CronTick

if typing.TYPE_CHECKING:
    from ._registry import Registry

__all__ = ["Codec", "StateError"]

TAG = "$t"
#: The stored form this release writes with each run's state (its ``format`` member) and
#: the newest it reads.  Raise it with every tag a release adds: a worker of an older
#: release (from this one on) then leaves a run a newer one wrote, as stranded, instead of
#: failing it for a tag it does not know.  A state without it is of an older release.
#: 2: a state may name parts stored beside it (``_stored_classes.PARTS``), which a worker
#: of form 1 would take for a damaged state.  3: a loop record may hold its items as pages
#: (``_lazy_parts``), which a worker of form 2 would take for a damaged record.  4: a
#: dict keyed by other than text is stored as pairs (``"map"``).  5: a value may be
#: stored as pages that a loop over it reads as its items (``_stored_classes.VALUE_PAGES``),
#: which a worker of form 4 would read as a value missing from the state.
FORMAT = 5
#: The form stamped on a state that holds no value stored as pages, form 5's one addition:
#: a worker of form 4 reads such a state as it was written, so a rollback to that release
#: strands only the runs that hold one, not every run this release touched.
WITHOUT_VALUE_PAGES = 4
FORMAT_KEY = "format"
#: The member of a stored event value naming it by its registered name (``feature.event(...,
#: name=)``), beside its module and class name (``"c"``), which an earlier release reads it by:
#: a member an older reader ignores, so no new stored form.
EVENT: Final = "e"
#: The member of a stored entity value naming it by its aggregate type (``feature.entity(...,
#: name=)``), as its events' streams name it, beside ``"c"`` (read by earlier releases).
AGGREGATE: Final = "a"


def _attrs_classes(roots: Iterable[type[Any]]) -> set[type[Any]]:
    """``roots`` and every attrs class and enum their fields mention, recursively."""
    found = {r for r in roots if attrs.has(r) or _is_enum(r)}
    for _cls, _field, t in field_types(list(found)):
        origin = typing.get_origin(t) or t
        if attrs.has(origin) or _is_enum(origin):
            found.add(origin)
    return found


def _column_enums(entities: Iterable[type[Any]]) -> list[type[Any]]:
    """The enum classes of the entities' ``Enum`` columns: a run that stores an entity
    (a ``get_one``'s row) stores their members, which no event or payload may name."""
    found: list[type[Any]] = []
    for cls in entities:
        table = getattr(cls, "__table__", None)
        for column in () if table is None else table.columns:
            enum_class = getattr(column.type, "enum_class", None)
            if isinstance(enum_class, type) and issubclass(enum_class, enum.Enum):
                found.append(enum_class)
    return found


def _plain_text(key: object, ordered: bool | None) -> bool:
    """Whether ``key`` is stored as a JSON object's key: text, but a StrEnum member only
    in a fingerprint (as a value is, ``Codec._encode``)."""
    return isinstance(key, str) and not (ordered and isinstance(key, enum.Enum))


def _is_enum(t: object) -> bool:
    return isinstance(t, type) and issubclass(t, enum.Enum)


def _shape(cls: type[Any]) -> tuple[object, ...]:
    """What decoding a stored value of ``cls`` depends on: its fields, their types and
    which have no default (attrs), its members (enum), its columns and their types
    (entity).  A deploy that changes only a field's type reads another set of values:
    with the same shape, a run one deploy could not read was passed by for good by the
    deploy that can (its mark was the same)."""
    if attrs.has(cls):
        try:
            hints: dict[str, object] = typing.get_type_hints(cls)
        except Exception:  # unresolvable annotations: the annotation's text
            hints = {}
        return tuple(
            (f.name, f.default is attrs.NOTHING, _type_text(hints.get(f.name, f.type))) for f in attrs.fields(cls)
        )
    if _is_enum(cls):
        return tuple(repr(m.value) for m in cls)
    table = getattr(cls, "__table__", None)
    if table is None:
        return ()
    return tuple(sorted((c.key, type(c.type).__qualname__) for c in table.columns))


def _type_text(t: object) -> str:
    """A type annotation as text that is the same in every process: a class by its
    module and name, a generic by its origin and arguments, nothing that holds an
    address (the digest of a repr with one would differ per worker, and each would take
    the others' stranded runs for another deploy's)."""
    if isinstance(t, str):
        return t
    args = typing.get_args(t)
    origin = typing.get_origin(t)
    if origin is not None:
        return f"{_type_text(origin)}[{', '.join(_type_text(a) for a in args)}]"
    if isinstance(t, type):
        return f"{t.__module__}.{t.__qualname__}"
    shown = repr(t)
    return type(t).__qualname__ if " at 0x" in shown else shown


def _canonical(encoded: Any) -> str:
    """A sort key that orders a set's items the same in every process (string hashes,
    and so a set's iteration order, differ between processes)."""
    return json.dumps(encoded, sort_keys=True, default=repr)


class Codec:
    def __init__(
        self, attrs_roots: Iterable[type[Any]], entities: Mapping[type[Any], str], registry: Registry | None = None
    ) -> None:
        """``entities``: the App's entity classes and their aggregate types, by which a
        stored entity is named; ``registry``: the App's events, whose values are stored
        with their schema version and read back through their upcasters, as the event
        store reads them."""
        self.registry = registry
        #: An entity's aggregate type, and back (boot refuses one type for two classes).
        self.aggregates: dict[type[Any], str] = dict(entities)
        self.entities: dict[str, type[Any]] = {name: cls for cls, name in self.aggregates.items()}
        classes = _attrs_classes([*attrs_roots, CronTick, *_column_enums(self.aggregates)])
        self.by_name: dict[str, type[Any]] = {}
        self.names: dict[type[Any], str] = {}
        for cls in [*classes, *self.aggregates]:
            name = f"{cls.__module__}.{cls.__qualname__}"
            self.by_name[name] = cls
            self.names[cls] = name
        #: What this codec can rebuild, in a few characters: a deploy that changes it may
        #: read a run an earlier one could not (:class:`ClassMismatch`).
        shapes = repr(
            sorted(
                (name, _shape(cls), self._schema_version(cls), self._event_name(cls), self.aggregates.get(cls))
                for name, cls in self.by_name.items()
            )
        )
        self.digest = hashlib.sha256(shapes.encode()).hexdigest()[:12]
        #: The resolved field annotations of the attrs classes rebuilt so far.
        self._field_types: FieldTypes = {}

    def encode(self, value: Any, *, ordered: bool = True, canonical: bool = False) -> Any:
        """``value`` as JSON with type tags; ``StateError`` for what cannot be stored, and
        for a value nested deeper than ``MAX_DEPTH`` containers: one that holds itself is
        nested without end, and recursing into it would raise ``RecursionError`` from
        wherever the value is stored (an idempotency key's fingerprint, a run's state).

        A dict of two or more keys also stores its keys' order (``"k"``): PostgreSQL's
        ``jsonb`` keeps an object's keys sorted, so a dict read back from it came in
        another order than from SQLite.  ``ordered=False`` leaves it out, for a value
        compared as equal dicts compare (a payload's fingerprint).

        ``canonical=True`` (unordered, whatever ``ordered``): values equal under ``==`` give one
        encoding, for a ``wait_for_event`` key compared as text (module ``_canonical``): numbers
        (``1``, ``1.0``, ``True``, ``Decimal("1.0")``) in one exact form, an aware datetime in
        UTC, a set and a frozenset alike.  Not decoded: a key is only compared."""
        return self._encode(value, MAX_DEPTH, None if canonical else ordered)

    def _encode(self, value: Any, room: int, ordered: bool | None) -> Any:
        """``encode``, with ``room`` levels of containers left; ``ordered`` ``None``: the
        canonical form (unordered too).  One argument, not two: each container's item
        passes it on, and a second one cost encoding a run's state some 4% more instructions."""
        if ordered and isinstance(value, enum.Enum) and (name := self.names.get(type(value))) is not None:
            # Before the str/int test: a StrEnum or IntEnum member is a str or int too, and
            # stored as one it read back as a plain str or int.  A fingerprint (unordered)
            # keeps the plain value: the member equals it, and keys stored before match.
            return {TAG: "enum", "c": name, "v": self._encode(value.value, room, ordered)}
        if value is None or isinstance(value, (bool, int, str)):
            if ordered is None and isinstance(value, int) and type(value) is not int:
                return int(value)  # True == 1, an IntEnum member equals its value
            return value
        if isinstance(value, float):
            if ordered is None and not math.isnan(value):
                return exact_number(Decimal(value), TAG)  # exact: 0.5 is Decimal("0.5"), 0.1 is not
            if not math.isfinite(value):  # JSON has none; PostgreSQL refuses Python's NaN
                raise StateError(f"the float {value} cannot be stored: JSON has no NaN or Infinity")
            return {TAG: "float", "v": repr(value)} if _not_kept_by_jsonb(value) else value
        if isinstance(value, uuid.UUID):
            return {TAG: "uuid", "v": str(value)}
        if isinstance(value, dt.datetime):
            return {TAG: "datetime", "v": (value if ordered is not None else utc_instant(value)).isoformat()}
        if isinstance(value, dt.date):
            return {TAG: "date", "v": value.isoformat()}
        if isinstance(value, dt.time):
            return {TAG: "time", "v": value.isoformat() if ordered is not None else utc_time_text(value)}
        if isinstance(value, dt.timedelta):
            seconds = value.total_seconds()
            if _kept_as_seconds(value, seconds):
                return {TAG: "timedelta", "v": seconds}
            # Its float seconds lose microseconds (past some 300 years) or round up past
            # timedelta.max, which raised OverflowError out of every worker pass that read
            # it.  The exact parts beside them; an older release reads "v" as before.
            return {TAG: "timedelta", "v": seconds, "x": [value.days, value.seconds, value.microseconds]}
        if isinstance(value, Decimal):
            if ordered is None:
                return exact_number(value, TAG)
            return {TAG: "decimal", "v": str(value)}
        if isinstance(value, (bytes, bytearray)):  # an entity's LargeBinary, an event's digest
            return {TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
        if not room:  # whatever is left holds values of its own
            raise StateError(f"a value nested deeper than {MAX_DEPTH} levels cannot be stored (does it hold itself?)")
        room -= 1
        if isinstance(value, list):
            return [self._encode(v, room, ordered) for v in value]
        if isinstance(value, tuple):
            return {TAG: "tuple", "v": [self._encode(v, room, ordered) for v in value]}
        if isinstance(value, (set, frozenset)):
            tag = (
                "frozenset" if isinstance(value, frozenset) and ordered is not None else "set"
            )  # {1} == frozenset({1})
            return {TAG: tag, "v": sorted((self._encode(v, room, ordered) for v in value), key=_canonical)}
        if isinstance(value, Mapping) and not all(_plain_text(k, ordered) for k in value):
            # Keys a payload or an event reads from JSON's text (UUIDs, ints, dates, enum
            # members), stored as pairs; a fingerprint's in one order, as equal dicts compare.
            pairs = [[self._encode(k, room, ordered), self._encode(v, room, ordered)] for k, v in value.items()]
            return {TAG: "map", "v": pairs if ordered else sorted(pairs, key=lambda p: _canonical(p[0]))}
        if isinstance(value, Mapping):
            encoded = {k: self._encode(v, room, ordered) for k, v in value.items()}
            if ordered and len(encoded) > 1:
                return {TAG: "dict", "v": encoded, "k": list(encoded)}
            return {TAG: "dict", "v": encoded}
        if isinstance(value, Saved):
            return {
                TAG: "saved",
                "v": {f.name: self._encode(getattr(value, f.name), room, ordered) for f in attrs.fields(Saved)},
            }
        cls = type(value)
        name = self.names.get(cls)
        if name is None:
            raise StateError(
                f"a {cls.__module__}.{cls.__qualname__} cannot be stored: only JSON values, UUIDs, dates and "
                "times, decimals, bytes, sets and registered payload, event and entity classes (and enums "
                "they name) can; name another attrs class or enum in its Feature(value_types=[...]) or "
                "App(value_types=[...])"
            )
        if isinstance(value, enum.Enum):
            return {TAG: "enum", "c": name, "v": self._encode(value.value, room, ordered)}
        if isinstance(value, Entity):
            columns = {a.key: self._encode(getattr(value, a.key), room, ordered) for a in inspect(cls).column_attrs}
            stored = {TAG: "entity", "c": name, "v": columns}
            # Its aggregate type is how it was stored, not part of its value, as an
            # event's name (a fingerprint, a wait's key: ``ordered`` false, leave it out).
            if ordered and cls in self.aggregates:
                stored[AGGREGATE] = self.aggregates[cls]
            return stored
        encoded = {
            TAG: "attrs",
            "c": name,
            "v": {f.name: self._encode(getattr(value, f.name), room, ordered) for f in attrs.fields(cls)},
        }
        # An event's registered name and schema version are how it was stored, not part of
        # its value: a payload's fingerprint (``ordered=False``) leaves them out.
        event = self._event_name(cls) if ordered else None
        if event is not None:
            encoded[EVENT] = event
            encoded["s"] = self._schema_version(cls)
        return encoded

    def _event_name(self, cls: type[Any]) -> str | None:
        """The name ``cls`` is registered under, if it is one of the App's events."""
        return None if self.registry is None else self.registry.event_names.get(cls)

    def _schema_version(self, cls: type[Any]) -> int | None:
        """The schema version ``cls`` is stored at, if it is one of the App's events."""
        if self.registry is None or cls not in self.registry.event_names:
            return None
        return self.registry.schema_version(cls)

    def decode(self, data: Any) -> Any:
        if isinstance(data, list):
            return [self.decode(v) for v in data]
        if not isinstance(data, dict):
            return data
        tag = data.get(TAG)
        v: Any = data.get("v")
        if tag == "uuid":
            return uuid.UUID(v)
        if tag == "datetime":
            return dt.datetime.fromisoformat(v)
        if tag == "date":
            return dt.date.fromisoformat(v)
        if tag == "time":
            return dt.time.fromisoformat(v)
        if tag == "bytes":
            return base64.b64decode(v, validate=True)
        if tag == "timedelta":
            return _timedelta(v, data.get("x"))
        if tag == "decimal":
            try:
                return Decimal(v)
            except ArithmeticError:  # InvalidOperation, whose text is a list of signal classes
                raise ValueError("a stored decimal is no number") from None
        if tag == "float":
            return float(v)
        if tag == "tuple":
            return tuple(self.decode(x) for x in v)
        if tag == "set":
            return {self.decode(x) for x in v}
        if tag == "frozenset":
            return frozenset(self.decode(x) for x in v)
        if tag == "dict":
            order = data.get("k", v)
            return {k: self.decode(v[k]) for k in order}
        if tag == "map":
            return {self.decode(k): self.decode(x) for k, x in v}
        if tag == "saved":
            return Saved(**{k: self.decode(x) for k, x in v.items()})
        if tag in ("attrs", "entity", "enum"):
            cls = self._stored_class(data)
            if tag == "enum":
                try:
                    return cls(self.decode(v))
                except ValueError as exc:  # a member since removed
                    why = f"its member is no longer one of {cls.__name__}'s"
                    raise ClassMismatch(f"stored {data['c']} cannot be rebuilt: {why}") from exc
            stored_version, version = data.get("s"), self._schema_version(cls)
            if tag == "attrs" and stored_version is not None and version is not None:
                return self._read_as_event(cls, data["c"], stored_version, v)
            fields = {k: self.decode(x) for k, x in v.items()}
            if tag == "attrs":
                fields = _init_arguments(cls, fields)
            try:
                value = cls(**fields) if tag == "attrs" else _entity(cls, fields)
            except (TypeError, ValueError, AttributeError) as exc:  # the class changed since
                why = _unfit(cls, tag, fields, exc)
                raise ClassMismatch(f"stored {data['c']} cannot be rebuilt: {why}") from exc
            # Neither __init__ nor an entity's stored columns check types: a field whose type
            # a deploy changed would hand the resumed steps a value of the old one (an int
            # where the class says str).
            misfits = misfit(cls, value, self._field_types)
            if misfits is not None:
                raise ClassMismatch(f"stored {data['c']} cannot be rebuilt: {misfits}")
            return value
        raise StateError(f"unknown stored value tag {tag!r}")

    def _stored_class(self, data: Mapping[str, Any]) -> type[Any]:
        """The class of a stored class value: an event's by its registered name (``"e"``),
        as the event store names it, and an entity's by its aggregate type (``"a"``), as
        its stream names it, so a deploy that renames or moves the class but registers it
        under the old name still reads it; anything else (and an event or entity an
        earlier release stored, without that member) by its module and class name (``"c"``)."""
        event = data.get(EVENT) if self.registry is not None else None
        if event is not None:
            assert self.registry is not None
            cls = self.registry.event_classes.get(event)
            if cls is None:
                raise ClassMismatch(f"stored event {event!r} is not registered in this App")
            return cls
        aggregate = data.get(AGGREGATE) if data.get(TAG) == "entity" else None
        if aggregate is not None:
            found = self.entities.get(aggregate)
            if found is None:
                raise ClassMismatch(f"stored entity {aggregate!r} is not registered in this App")
            return found
        cls = self.by_name.get(data["c"])
        if cls is None:
            raise ClassMismatch(f"stored class {data['c']!r} is not registered in this App")
        return cls

    def _read_as_event(self, cls: type[Any], name: str, version: object, stored: Mapping[str, Any]) -> Any:
        """An event a run stored: read as the event store reads one, its stored JSON
        through the class's upcasters and its field types, so a field whose type a deploy
        changed without a new schema version strands the run as ``read_stream`` refuses
        the event (rebuilt by ``__init__`` alone, it held a value of the old type).  One of
        a newer version is refused before its fields are read (this release may lack their
        classes), with the reason the event store gives."""
        assert self.registry is not None  # only an event of the registry has a schema version
        if type(version) is not int:
            raise StateError(f"stored {name} has a schema version that is no whole number")
        newer = version > self.registry.schema_version(cls)
        fields = {} if newer else {k: self.decode(x) for k, x in stored.items()}
        payload = jsonable(self.registry.converter.unstructure(fields))
        try:
            return self.registry.load_payload(payload, version, self.registry.event_names[cls], cls, f"stored {name}")
        except UnreadableEvent as exc:  # a deploy made it so, and a deploy can undo it
            raise ClassMismatch(str(exc)) from exc


def _kept_as_seconds(value: dt.timedelta, seconds: float) -> bool:
    """Whether ``seconds`` (``value.total_seconds()``) reads back as ``value``."""
    try:
        return dt.timedelta(seconds=seconds) == value
    except OverflowError:
        return False


#: ``timedelta.max.total_seconds()``: the float rounds up to a billion days, one past the
#: largest a timedelta holds.  So stored an earlier release's timedelta.max (and those
#: within 8 ms of it, which it cannot tell apart).
_MAX_SECONDS: Final = dt.timedelta.max.total_seconds()


def _timedelta(seconds: Any, parts: Any) -> dt.timedelta:
    """A stored timedelta: its exact parts if stored, else its seconds."""
    if parts is not None:
        if not (isinstance(parts, list) and len(parts) == 3 and all(type(p) is int for p in parts)):
            raise ValueError("a stored timedelta's parts are not three integers")
        try:
            return dt.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])
        except OverflowError:
            raise ValueError("a stored timedelta's parts are beyond what a timedelta holds") from None
    try:
        return dt.timedelta(seconds=seconds)
    except OverflowError:
        if seconds == _MAX_SECONDS:
            return dt.timedelta.max
        raise ValueError(f"a stored timedelta of {seconds!r} seconds is beyond what a timedelta holds") from None


def _not_kept_by_jsonb(value: float) -> bool:
    """Whether PostgreSQL's ``jsonb`` would give ``value`` back as something else: it holds
    a number as a ``numeric`` and writes it without an exponent or the sign of a zero, so
    a whole float that Python writes with an exponent (``1e+20``, from 1e16 up) came back
    as an int, and ``-0.0`` as ``0.0``.  Any other float is written with a point or an
    exponent that reads back as the same float.  SQLite keeps the text; tagged on both, the
    stored value is the same."""
    return value.is_integer() and (abs(value) >= 1e16 or math.copysign(1.0, value) < 0)


def _init_arguments(cls: type[Any], stored: Mapping[str, object]) -> dict[str, object]:
    """An attrs value's stored fields (keyed by attribute name, as encoded) as ``cls``'s
    ``__init__`` arguments: a private attribute's under its alias (``_secret`` is
    ``secret=``), none for a field ``__init__`` does not take (it computes it again), and
    an unknown name as it is, for ``__init__`` to refuse (the class changed since)."""
    by_name = {f.name: f for f in attrs.fields(cls)}
    arguments: dict[str, object] = {}
    for key, value in stored.items():
        field = by_name.get(key)
        if field is None:
            arguments[key] = value
        elif field.init:
            arguments[field.alias or field.name] = value
    return arguments


def _entity(cls: type[Any], columns: Mapping[str, object]) -> Any:
    """A stored entity value, rebuilt as loaded, without ``__init__``: its stored columns
    set.  A ``TypeError`` for a column ``cls`` no longer maps (the class changed since):
    set anyway it would be a stray attribute, read back as if the column were there.  A
    column added since is ``None`` if nullable, its default if that is a constant, and
    else a ``TypeError`` too: read unset it would be ``None`` where it never is."""
    # A fresh worker process may decode before its first ORM query: the mapped
    # attributes have no implementation until the mappers are configured.
    configure_mappers()
    mapper = inspect(cls)
    mapped = mapper.column_attrs
    if not columns.keys() <= set(mapped.keys()):
        raise TypeError("a stored column is not mapped")
    entity = mapper.class_manager.new_instance()
    for key, value in columns.items():
        setattr(entity, key, value)
    for attr in mapped:
        if attr.key not in columns:
            column = attr.columns[0]
            if _required(column):
                raise TypeError(f"the stored value lacks the column {attr.key!r}")
            if not column.nullable:
                setattr(entity, attr.key, column.default.arg)
    return entity


def _required(column: Any) -> bool:
    """Whether a column a stored entity value lacks (added since) has no value to read
    for it: not nullable, and no constant default."""
    default = column.default
    return not column.nullable and not (default is not None and default.is_scalar)


def _unfit(cls: type[Any], tag: str, stored: Mapping[str, object], exc: Exception) -> str:
    """How a stored value's fields (``__init__`` arguments for an attrs class) no longer
    fit ``cls``, in field names only: a
    validator's own message may quote the stored data, and a reason that did would also
    give each stored value a group of its own in the pre-deploy check."""
    if tag == "attrs":
        accepted = {f.alias or f.name for f in attrs.fields(cls) if f.init}
        required = {f.alias or f.name for f in attrs.fields(cls) if f.init and f.default is attrs.NOTHING}
    else:
        mapped = inspect(cls).column_attrs
        accepted = set(mapped.keys())
        required = {a.key for a in mapped if _required(a.columns[0])}
    missing, extra = sorted(required - stored.keys()), sorted(stored.keys() - accepted)
    if missing:
        return f"{cls.__name__} now requires {_names(missing)}, which it lacks"
    if extra:
        return f"it has {_names(extra)}, which {cls.__name__} no longer has"
    return f"a stored field does not pass {cls.__name__}'s checks ({type(exc).__name__})"


def _names(fields: list[str]) -> str:
    return ", ".join(repr(f) for f in fields)
