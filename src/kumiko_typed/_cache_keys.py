"""Statements the framework builds once and runs on every write, found in SQLAlchemy's
compiled cache by a key of one token.

SQLAlchemy looks a statement's compiled form up by its cache key: a nested tuple of the
whole structure, hashed again on every execution (CPython does not keep a tuple's hash).
For the aggregate's ``UPDATE`` and a planned read's select that was a hundredth of a
``get_one -> update`` dispatch (bench/handler.py).  A statement kept and run as it is
compiles to the same SQL every time, so a token of its own identifies it as well: its key
keeps the bound parameters SQLAlchemy's key lists (the compiled form maps the values to
them), only the structure is replaced.  A copy of the statement (``.where()``,
``.options()``) drops the memoized key, as SQLAlchemy's own, and gets a key of its
structure again (pinned to SQLAlchemy 2.1: ``HasMemoized`` keeps it in the instance).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.sql.cache_key import CacheKey

__all__ = ["keyed_by_identity"]

S = TypeVar("S")


class _Token:
    """One statement's cache key: hashed by identity, equal only to itself."""

    __slots__ = ()


def keyed_by_identity(stmt: S) -> S:
    """``stmt``, whose cache key is a token of its own (``stmt`` as it is if SQLAlchemy
    cannot cache it)."""
    memoized: Any = stmt
    real = memoized._generate_cache_key()  # memoized now, and reset by any copy
    if real is None:
        return stmt
    key = CacheKey((_Token(),), real.bindparams, real.params)

    def token_key(*_args: object, **_kwargs: object) -> CacheKey:
        return key

    memoized.__dict__["_generate_cache_key"] = token_key
    return stmt
