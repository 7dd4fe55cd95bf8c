"""A read step's query resolver run once, not on every call: its select as a template.

``lambda c: select(Counter).where(Counter.id == c.payload.id)`` builds the same statement
on every call, only with another value; building the select and its cache key was half of
a planned read's Python cost (``_entity_reads``).  So a resolver is run once with a
*probe* for ``c``: each value it reads from ``c`` is a stand-in that records where it
came from (``c.payload.id``).  Later calls take those values from the real ``c`` and run
the statement's plan with them, without calling the resolver.

That is only done for a resolver shown to build one statement whatever the values; any
other runs on every call, as before.  Shown means:

* straight-line code: no branch, loop, ``is`` / ``in`` test, comprehension, nested
  function or stored variable, so nothing it does depends on a value it reads;
* it calls nothing but SQLAlchemy (traced while the probe runs): no helper of the
  application's (which might decide on a value) and no builtin (``datetime.now()``,
  ``len``), and SQLAlchemy calls no application code for it (a hybrid, a type's hook);
* every value read from ``c`` is bound as it is, in a parameter of its own, and every
  other bound value is a constant of the resolver's own code (a global or closure
  variable may change between calls);
* the first real call builds the very same statement (SQLAlchemy's cache key, which
  holds each parameter's type) with the values the recorded places give.

A later value of another Python type than the first call's (``None`` where a ``UUID``
was, a ``bool`` for an ``int``) may make SQLAlchemy build another statement (``IS
NULL``), so that call runs the resolver.
"""

from __future__ import annotations

import dis
import gc
import sys
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from types import FrameType, FunctionType
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Select
from sqlalchemy.sql.expression import FromClause

from .._access import TENANT_PARAM, ShapeMemo, refuse_unscoped
from .._errors import StepRefused, Unfit
from .._kinds import refuse_mismatched
from .._limits import Check, bound_values, read_check, refuse_compared, row_count_problems
from ._base import called
from ._entity_reads import plain_tenant, planned, run_plan, select_entities

if TYPE_CHECKING:
    from sqlalchemy.sql.elements import BindParameter

    from .._interpreter import Run
    from ._entity_reads import _Plan

__all__ = ["read_entities"]

#: Instructions of straight-line code that reads, calls and compares (3.11 to 3.13).
_STRAIGHT: Final = frozenset(
    {
        "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "PUSH_NULL", "COPY_FREE_VARS",
        "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_DEREF", "LOAD_GLOBAL",
        "LOAD_ATTR", "LOAD_METHOD", "LOAD_CONST", "PRECALL", "CALL", "CALL_KW", "KW_NAMES",
        "BINARY_SUBSCR", "COMPARE_OP", "BINARY_OP", "UNARY_INVERT", "UNARY_NEGATIVE",
        "BUILD_TUPLE", "BUILD_LIST", "LIST_EXTEND", "RETURN_VALUE", "RETURN_CONST",
    }
)  # fmt: skip

Getter = Callable[[Any], object]
#: ``*args``, ``**kwargs``, a generator or coroutine of any kind.
_NOT_PLAIN: Final = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200


class _Probe:
    """The stand-ins of one probe run: each one's place (a path from ``c``) and whether
    something was read from it (then it is not a value the resolver used)."""

    __slots__ = ("inner", "made", "paths")

    def __init__(self) -> None:
        self.paths: dict[int, tuple[tuple[bool, object], ...]] = {}
        self.inner: set[int] = set()
        #: Every stand-in, alive until the probe is done (``paths`` is keyed by ``id``).
        self.made: list[_Stand] = []

    def stand(self, parent: _Stand | None, step: tuple[bool, object] | None) -> _Stand:
        made = _Stand(self)
        self.made.append(made)
        if parent is None:
            self.paths[id(made)] = ()
        else:
            self.inner.add(id(parent))
            self.paths[id(made)] = (*self.paths[id(parent)], step)  # type: ignore[arg-type]
        return made


class _Stand:
    """A value read from ``c`` during the probe: reading an attribute or item of it makes
    another; anything else (truth, arithmetic, iteration, a call) raises, which makes the
    resolver one that runs on every call."""

    __slots__ = ("_probe",)

    def __init__(self, probe: _Probe) -> None:
        self._probe = probe

    def __getattr__(self, name: str) -> _Stand:
        if name.startswith("_"):  # SQLAlchemy's protocols (__clause_element__, _sa_...)
            raise AttributeError(name)
        return self._probe.stand(self, (True, name))

    def __getitem__(self, key: object) -> _Stand:
        if type(key) not in (str, int):
            raise TypeError("a probe takes str and int keys only")
        return self._probe.stand(self, (False, key))

    def __bool__(self) -> bool:
        raise TypeError("a probed value has no truth")

    __iter__ = None


class _Template:
    """A resolver's statement plan, and per bound parameter where its value comes from:
    a getter on ``c`` (and the value's type at the first call), or a constant."""

    __slots__ = ("checked", "consts", "plan", "quick", "sources")

    def __init__(self, plan: _Plan, sources: list[tuple[str, Getter, type[Any]]], consts: dict[str, object]) -> None:
        self.plan, self.sources, self.consts = plan, sources, consts
        #: The parameters whose values :func:`read_problems` checks (text, integers, times).
        self.checked = tuple(b for b in plan.binds if read_check(b.type) is not None)
        #: Each checked parameter's key and check, when all are single values read_problems
        #: checks one by one (no ``IN`` list, no limit or offset); else ``None``.
        self.quick: tuple[tuple[str, Check], ...] | None = tuple(
            (b.key, check) for b in self.checked if (check := read_check(b.type)) is not None
        )
        if any(b.expanding or hasattr(b, "_limit_offset_value") for b in self.checked):
            self.quick = None

    def fits(self, params: dict[str, object]) -> bool:
        """Whether :func:`read_problems` would find nothing in ``params``, told without
        building its pairs: ``False`` sends any doubt (a problem, a text ending in a
        backslash it looks at closer) to it, which words the refusal."""
        quick = self.quick
        if quick is None:
            return False
        for key, check in quick:
            value = params[key]
            if value is not None and (check(value) is not None or (isinstance(value, str) and value.endswith("\\"))):
                return False
        return True

    def params(self, ctx: object, tenant: object) -> dict[str, object] | None:
        """The parameters for ``ctx``, or ``None`` if a value's type differs from the first call's."""
        params = dict(self.consts)
        for key, get, kind in self.sources:
            value = get(ctx)
            if type(value) is not kind:
                return None
            params[key] = value
        params[TENANT_PARAM] = tenant
        return params


#: Resolver → its template, or ``None`` for one that runs on every call.
_TEMPLATES: Final = ShapeMemo()
_UNTRIED: Final = object()


def read_entities(run: Run, query: Callable[[Any], object], first: bool, limit: int | None = None) -> list[Any]:
    """The entities ``query``'s select reads (the first, or none, with ``first``), from
    its template when it has one."""
    session = run.db
    templates = _TEMPLATES.entries()
    template = templates.get(query, _UNTRIED)
    if isinstance(template, _Template):
        tenant = plain_tenant(session)
        params = None if tenant is None else template.params(run, tenant)
        if params is not None:
            if template.checked and not template.fits(params):
                checked = [(b, params[b.key]) for b in template.checked]
                refuse_compared(checked, template.plan.stmt, getattr(run, "payload", None))
            found = run_plan(session, template.plan, params, first)
            if found is not None:
                return found
    stmt = build(query, run, limit)
    found = select_entities(session, stmt, first)
    if template is _UNTRIED:
        made = _template(query, run, stmt, limit)
        if made is not _UNTRIED:
            templates[query] = made
    return found


def build(query: Callable[[Any], object], ctx: object, limit: int | None) -> Select[Any]:
    """``query``'s select for ``ctx`` (with the step's ``limit``)."""
    stmt = called(query, ctx, "query=")
    if not isinstance(stmt, Select):
        raise StepRefused(f"the query must return a select(...), not {type(stmt).__name__}")
    width = _width(stmt)
    if width != 1:
        if not stmt._execution_options.get("kumiko_all_tenants"):
            refuse_unscoped(stmt)  # an aggregate's Core table: its refusal says what matters more
        # A read step keeps one value per row (``scalars()``): the other columns of
        # select(Incident.status, func.count()) would be dropped without a word.
        raise StepRefused(
            f"the query selects {width} entities or columns, and a read step keeps "
            "one per row: select one entity or column, or read rows of several in a compute step "
            "with c.db.execute(...).all()"
        )
    stmt = _capped(stmt, limit)
    payload = getattr(ctx, "payload", None)
    problems = row_count_problems(stmt, payload)
    if problems:
        negative = problems[0]["message"].startswith("must not be negative")
        raise Unfit(problems, "a row count is negative" if negative else "a row count is too large")
    key = stmt._generate_cache_key()  # kept by the statement: its execution reuses it
    binds = bound_values(stmt) if key is None else [(b, b.effective_value) for b in key.bindparams]
    refuse_mismatched(stmt, binds, payload, key)
    refuse_compared(binds, stmt, payload)
    return stmt


def _capped(stmt: Select[Any], limit: int | None) -> Select[Any]:
    """``stmt`` reading at most ``limit`` rows (the step's ``limit=``, a cap): its own
    LIMIT stays when it is no larger (it was replaced, so ``.limit(5)`` under ``limit=100``
    read 100 rows, and a page past its size)."""
    if limit is None:
        return stmt
    own = getattr(stmt._limit_clause, "_limit_offset_value", None)
    if isinstance(own, int) and own <= limit:
        return stmt  # a negative one too: row_count_problems refuses it
    return stmt.limit(limit)


def _width(stmt: Select[Any]) -> int:
    """How many values a row of ``stmt`` has: one per entity or column it names, and each
    column of a Core table (or alias, subquery) it names whole — ``select(notes)`` reads
    every column of ``notes``, where ``select(Note)`` reads one entity per row."""
    raw = stmt._raw_columns
    if len(raw) == 1 and isinstance(raw[0], FromClause) and "parententity" not in raw[0]._annotations:
        return len(raw[0].c)
    return len(raw)


def _template(query: Callable[[Any], object], ctx: object, stmt: Select[Any], limit: int | None) -> object:
    """The template of ``query``, whose select for ``ctx`` is ``stmt``; ``None`` if it
    has none, ``_UNTRIED`` if that cannot be told now (the statement ran as no plan, or
    a profiler is on: the probe traces calls with ``sys.setprofile``)."""
    if not isinstance(query, FunctionType) or stmt._execution_options or not _straight(query):
        return None
    if sys.getprofile() is not None:
        return _UNTRIED
    probe = _Probe()
    probed = _traced(query, probe)
    if not isinstance(probed, Select):
        return None
    probed = _capped(probed, limit)
    key, real = probed._generate_cache_key(), stmt._generate_cache_key()
    if key is None or real is None or key != real:
        return None
    plan = planned(real)
    if plan is None:
        return _UNTRIED
    return _sources(query, probe, plan, key.bindparams, real.bindparams, ctx, limit)


def _sources(
    query: FunctionType,
    probe: _Probe,
    plan: _Plan,
    probed: Sequence[BindParameter[Any]],
    real: Sequence[BindParameter[Any]],
    ctx: object,
    limit: int | None,
) -> _Template | None:
    """Where each parameter's value comes from, checked against the real call's values."""
    constants = [*query.__code__.co_consts, limit]
    sources: list[tuple[str, Getter, type[Any]]] = []
    consts: dict[str, object] = {}
    used: set[int] = set()
    for bind, p, r in zip(plan.binds, probed, real, strict=True):
        value, given = p.effective_value, r.effective_value
        if isinstance(value, _Stand):
            path = probe.paths[id(value)]
            if id(value) in probe.inner or id(value) in used or not path:
                return None
            used.add(id(value))
            get = _getter(path)
            try:
                if get(ctx) is not given:
                    return None
            except Exception:
                return None
            sources.append((bind.key, get, type(given)))
        elif any(value is c for c in constants) and given is value:
            consts[bind.key] = value
        else:
            return None
    values_read = {made for made, path in probe.paths.items() if path} - probe.inner
    return _Template(plan, sources, consts) if values_read == used else None


def _straight(fn: FunctionType) -> bool:
    code = fn.__code__
    if code.co_argcount != 1 or code.co_kwonlyargcount or code.co_nlocals != 1 or code.co_cellvars:
        return False  # one argument and no variables or cells of its own
    if code.co_flags & _NOT_PLAIN:
        return False
    if any(hasattr(c, "co_code") for c in code.co_consts):
        return False
    return all(i.opname in _STRAIGHT for i in dis.get_instructions(code))


def _traced(fn: FunctionType, probe: _Probe) -> object:
    """``fn(probe)`` while every call it makes is watched: ``None`` if it raised or called
    anything but SQLAlchemy (and, from inside SQLAlchemy, the standard library)."""
    code = fn.__code__
    foreign: list[object] = []

    def watch(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            if frame.f_code is not code and not _allowed(frame, code):
                foreign.append(frame.f_code)
        elif event == "c_call" and frame.f_code is code and not _sqlalchemy(getattr(arg, "__module__", None)):
            foreign.append(arg)

    # A collection inside the watch would run finalizers that read as the resolver's
    # calls, and cost it its template for good: none runs meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    sys.setprofile(watch)
    try:
        made = fn(probe.stand(None, None))
    except Exception:
        return None
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return None if foreign else made


def _sqlalchemy(module: object) -> bool:
    return isinstance(module, str) and (module == "sqlalchemy" or module.startswith("sqlalchemy."))


def _allowed(frame: FrameType, resolver: object) -> bool:
    """SQLAlchemy's code, a stand-in's, or the standard library's called by either."""
    module = frame.f_globals.get("__name__")
    if _sqlalchemy(module) or module == __name__:
        return True
    caller = frame.f_back
    top = module.partition(".")[0] if isinstance(module, str) else ""
    return caller is not None and caller.f_code is not resolver and top in sys.stdlib_module_names


def _getter(path: tuple[tuple[bool, object], ...]) -> Getter:
    """One call per run of attributes (``attrgetter("payload.id")``), one per item."""
    getters: list[Getter] = []
    names: list[str] = []
    for is_attribute, key in path:
        if is_attribute:
            names.append(str(key))
            continue
        if names:
            getters.append(attrgetter(".".join(names)))
            names = []
        getters.append(itemgetter(key))
    if names:
        getters.append(attrgetter(".".join(names)))
    if len(getters) == 1:
        return getters[0]

    def chained(value: object) -> object:
        for get in getters:
            value = get(value)
        return value

    return chained
