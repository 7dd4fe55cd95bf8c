"""A suspended run's parts (``kumiko_workflow_parts``) read as a resumed segment reaches
them: a long step value when a step first asks for it (:class:`LazyValues`), a
``for_each``'s long items a page of :data:`PAGE` at a time as its iterations reach them
(:class:`PagedItems`).  A segment reads, decodes and encodes what it uses, not the run's
whole state, so a loop that suspends once per item costs its length once, not squared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeGuard, overload

from ._tables import workflow_parts

__all__ = [
    "PAGE",
    "Damage",
    "LateUnreadable",
    "LazyValues",
    "PagedItems",
    "Unread",
    "joined",
    "page_name",
    "pages",
    "paging",
]

#: Items per page: a segment reads (and, if they changed, writes) this many at most per
#: iteration it runs, whatever the loop's length.
PAGE: Final = 64


def page_name(name: str, k: int) -> str:
    """The part holding page ``k`` of the loop items stored as ``name`` (``i/<path>``)."""
    return f"{name}/{k}"


def pages(count: int, size: int) -> int:
    """How many pages ``count`` items take, ``size`` a page."""
    return -(-count // size)


class LateUnreadable(BaseException):  # not an error of a step: no step may catch it
    """A page of stored items that cannot be read (a class this deploy does not have as
    stored, or a damaged part), met only when an iteration reached it.  Not an
    ``Exception``: no step (a ``retry``) takes it for its own failure; the worker undoes
    the segment and strands or fails the run, as if it had found this before resuming."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Damage:
    """The first :class:`LateUnreadable` a segment's reads raised, kept apart from the
    raise: a step that catches ``BaseException`` (a bare ``except:``) cannot make the
    segment go on as if it had read; the engine raises it again before it stores the
    segment's outcome."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: LateUnreadable | None = None

    def late(self, cause: Exception) -> LateUnreadable:
        """The exception to raise for ``cause``, noted if it is the first."""
        late = LateUnreadable(cause)
        if self.found is None:
            self.found = late
        return late


class Unread:
    """A step value stored as the part ``name`` (``v/<key>``; or as pages, ``p/<key>``,
    which ``read`` joins), not read yet: read and decoded the first time a step asks for
    it.  What it read is kept (a ``retry`` that puts the values of before its attempt
    back gives the same object, as a plain dict of values does), and its encoding as
    read noted in ``seen``: a suspension writes the value again only if it now encodes
    otherwise."""

    __slots__ = ("_damage", "_decode", "_read", "loaded", "name", "seen", "value")

    def __init__(
        self,
        name: str,
        read: Callable[[str], Any],
        decode: Callable[[Any], Any],
        seen: dict[str, Any],
        damage: Damage,
    ) -> None:
        self.name, self._read, self._decode, self.seen, self._damage = name, read, decode, seen, damage
        self.loaded = False
        self.value: Any = None

    def get(self) -> Any:
        if not self.loaded:
            encoded = self._read(self.name)  # a database error is the worker pass's, as raised
            if encoded is None:
                raise self._damage.late(LookupError(f"its part {self.name} is missing from {workflow_parts.name}"))
            self.value = self._decode(encoded)  # raises LateUnreadable (``_stored_classes``)
            self.seen[self.name] = encoded
            self.loaded = True
        return self.value


class LazyValues(dict[str, Any]):
    """A resumed segment's step values, those stored as parts :class:`Unread` until a
    step asks for them (``c.steps`` is a view of this dict: a key is there whether read
    or not).  Whatever reads a value or all of them reads it; a plain ``dict()`` of it
    (the fast copy CPython makes of a dict whose iteration is a dict's) keeps what is
    unread unread: the engine's suspension, a retry's copy of the values."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) is Unread:
            value = value.get()
            dict.__setitem__(self, key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default  # noqa: SIM401  # dict.get would not read it

    def pop(self, key: str, *default: Any) -> Any:
        value = dict.pop(self, key, *default)
        return value.get() if type(value) is Unread else value

    def setdefault(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else dict.setdefault(self, key, default)

    def popitem(self) -> tuple[str, Any]:
        key, value = dict.popitem(self)
        return key, value.get() if type(value) is Unread else value

    def read_all(self) -> LazyValues:
        """Read every value not read yet; this dict."""
        for key, value in dict.items(self):
            if type(value) is Unread:
                dict.__setitem__(self, key, value.get())
        return self

    def values(self) -> Any:
        return dict.values(self.read_all())

    def items(self) -> Any:
        return dict.items(self.read_all())

    def copy(self) -> LazyValues:
        return LazyValues(self)

    def __eq__(self, other: object) -> bool:
        return dict.__eq__(self.read_all(), other.read_all() if isinstance(other, LazyValues) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        return dict.__repr__(self.read_all())


class PagedItems(Sequence[Any]):
    """The items of a loop stored as pages named ``name/<k>``: an item is read with its
    page, the first time an iteration asks for it.  ``pages`` holds the pages read
    (decoded: the objects the iterations saw, which a body may have changed in place),
    ``stored`` their encodings as read, so that a suspension writes a page again only if
    it now encodes otherwise."""

    __slots__ = ("_damage", "_decode", "_read", "length", "name", "pages", "size", "stored")

    def __init__(
        self,
        name: str,
        count: int,
        size: int,
        read: Callable[[str], Any],
        decode: Callable[[Any], Any],
        damage: Damage,
    ) -> None:
        self.name, self.length, self.size = name, count, size
        self._read, self._decode, self._damage = read, decode, damage
        self.pages: dict[int, list[Any]] = {}
        self.stored: dict[int, Any] = {}

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, n: int) -> Any: ...
    @overload
    def __getitem__(self, n: slice) -> list[Any]: ...
    def __getitem__(self, n: int | slice) -> Any:
        if isinstance(n, slice):
            return [self[i] for i in range(*n.indices(self.length))]
        if n < 0:
            n += self.length
        if not 0 <= n < self.length:
            raise IndexError(n)
        k, at = divmod(n, self.size)
        page = self.pages.get(k)
        if page is None:
            page = self._load(k)
        return page[at]

    def __iter__(self) -> Iterator[Any]:
        return (self[n] for n in range(self.length))

    def _load(self, k: int) -> list[Any]:
        name = page_name(self.name, k)
        encoded = self._read(name)  # a database error is the worker pass's, as raised
        if encoded is None:
            raise self._damage.late(LookupError(f"its part {name} is missing from {workflow_parts.name}"))
        if not isinstance(encoded, list) or len(encoded) != min(self.size, self.length - k * self.size):
            raise self._damage.late(ValueError(f"its part {name} is not a page of {self.size} loop items"))
        page: list[Any] = self._decode(encoded)  # raises LateUnreadable (``_stored_classes``)
        self.pages[k], self.stored[k] = page, encoded
        return page


def joined(name: str, count: int, size: int, part: Callable[[str], Any]) -> list[Any]:
    """The ``count`` items stored as the pages of ``name`` (encoded), one list: ``part``
    gives a page by its name (``None`` if missing: ``LookupError``)."""
    items: list[Any] = []
    for k in range(pages(count, size)):
        page = part(page_name(name, k))
        if not isinstance(page, list):
            raise LookupError(f"its part {page_name(name, k)} is missing from {workflow_parts.name}")
        items.extend(page)
    if len(items) != count:
        raise ValueError(f"the pages of {name} hold {len(items)} items, not {count}")
    return items


def paging(record: Mapping[str, Any]) -> tuple[str, int, int]:
    """The name, item count and page size of a loop record's ``pages``, or of a value's
    entry in a state's ``value_pages`` (``ValueError`` for one not of that shape: a
    damaged row)."""
    stored = record["pages"]
    if isinstance(stored, Mapping):
        name, count, size = stored.get("name"), stored.get("count"), stored.get("size")
        if isinstance(name, str) and _int(count) and _int(size) and count >= 0 and size > 0:
            return name, count, size
    raise ValueError('the "pages" of a loop record or value is not an object of a name, a count and a size')


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
