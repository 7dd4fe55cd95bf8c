"""Generate ``src/kumiko_typed/_builders.py``: the typed builder facades.

The builders differ only in which step methods they offer and what those return
(DESIGN §4.4), so the signatures are written once here, the rule table
(``kumiko_typed/_rules.py``) decides where each goes, and this script writes the
classes.  ``tests/tooling/test_generated.py`` fails when the committed file is stale.

    python scripts/generate_builders.py          # rewrite the file
    python scripts/generate_builders.py --check  # exit 1 and print a diff if it is stale

The output is ``ruff format``ted with the repository's settings, so the committed file
reads like hand-written code and the repository-wide format check holds for it too.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "src" / "kumiko_typed" / "_builders.py"

# The plugin's loader (stdlib only): the table is executed by path, like the plugin does,
# because generating must not import the library itself.
sys.path.insert(0, str(ROOT / "mypy_plugin"))
import _arm_keys  # noqa: E402 - beside this script
from kumiko_typed_mypy._table import load  # noqa: E402

rules = load(ROOT / "src" / "kumiko_typed" / "_rules.py", "_kumiko_rules")

#: What a resolver receives; ``{CTX}`` is filled per builder (``_fill``): a workflow's
#: resolvers get ``WorkflowCtx``, whose ``c.workflow`` is never ``None``.
CTX = "{CTX}[P, S, Sc]"


def _resolver(t: str) -> str:
    """A fixed-type argument: a plain value or a resolver giving it."""
    return f"{t} | Callable[[{CTX}], {t}]"


@dataclass(frozen=True)
class Method:
    """One step method.  ``{SELF}``/``{SUB}``/``{RB}``/``{CTX}`` are filled per builder."""

    params: str
    returns: str
    body: str
    key: str
    example: str
    #: mypy's return type where it differs from ``returns`` (pyright's keys read the latter).
    mypy_returns: str | None = None


SAME = "{SELF}[P, S, Sc, C]"
#: mypy's return type of a step whose key's type the plugin reads from the arguments: mypy
#: infers a call's type variables from the type expected of its result first, so with the
#: key's type variable there, a reassignment ``p = p.create("b", Shelf, ...)`` after a
#: ``Product`` step would solve it from ``p``'s earlier type and refuse ``Shelf``.
DETACHED = "{SELF}[P, AddStep[S, Any], Sc, C]"
DETACHED_SAVED = "{SELF}[P, AddStep[S, Saved[Any]], Sc, C]"

METHODS: dict[str, Method] = {
    "compute": Method(
        f"name: str, fn: Callable[[{CTX}], R]",
        "{SELF}[P, AddStep[S, R], Sc, C]",
        "self._then({SELF}, _steps.Compute(name, fn))",
        "``name``: the resolver's return type.",
        '.compute("total", lambda c: c.payload.quantity * c.payload.unit_price)',
        mypy_returns=DETACHED,
    ),
    "read.find_one": Method(
        f"name: str, query: Callable[[{CTX}], Select[T]]",
        "{SELF}[P, AddStep[S, T | None], Sc, C]",
        "self._then({SELF}, _steps.FindOne(name, query))",
        "``name``: the selected entity, or ``None`` when no row matches.",
        '.find_one("product", lambda c: select(Product).where(Product.sku == c.payload.sku))',
    ),
    "read.get_one": Method(
        f"name: str, query: Callable[[{CTX}], Select[T]]",
        "{SELF}[P, AddStep[S, T], Sc, C]",
        "self._then({SELF}, _steps.GetOne(name, query))",
        "``name``: the selected entity; no row ends the pipeline with ``not_found``.",
        '.get_one("product", lambda c: select(Product).where(Product.id == c.payload.id))',
    ),
    "read.find_many": Method(
        f"name: str, query: Callable[[{CTX}], Select[T]], *, limit: int | None = None",
        "{SELF}[P, AddStep[S, list[T]], Sc, C]",
        "self._then({SELF}, _steps.FindMany(name, query, limit))",
        "``name``: a list of the selected entities.",
        '.find_many("low", lambda c: select(Product).where(Product.stock < 5), limit=100)',
    ),
    "aggregate.create": Method(
        f"name: str, entity: type[E], *, data: Callable[[{CTX}], E], event: Callable[[{CTX}], object] | None = None",
        "{SELF}[P, AddStep[S, Saved[E]], Sc, C]",
        "self._then({SELF}, _steps.Create(name, entity, data, event))",
        "``name``: ``Saved[E]`` (id, entity, version, event...).",
        '.create("product", Product, data=lambda c: Product(sku=c.payload.sku, name=c.payload.name))',
        mypy_returns=DETACHED_SAVED,
    ),
    "aggregate.update": Method(
        f"name: str, entity: type[E], *, id: {_resolver('UUID')}, "
        f"changes: Callable[[{CTX}], Mapping[str, object]], version: {_resolver('int')} | None = None, "
        "skip_optimistic_lock: bool = False",
        "{SELF}[P, AddStep[S, Saved[E]], Sc, C]",
        "self._then({SELF}, _steps.Update(name, entity, id, changes, version, skip_optimistic_lock))",
        "``name``: ``Saved[E]`` with ``changes`` and ``previous``.",
        '.update("product", Product, id=lambda c: c.payload.id, changes=lambda c: {"name": c.payload.name},'
        " version=lambda c: c.payload.version)",
        mypy_returns=DETACHED_SAVED,
    ),
    "aggregate.append_event": Method(
        f"entity: type[E], *, id: {_resolver('UUID')}, event: Callable[[{CTX}], object], "
        f"headers: {_resolver('Mapping[str, str]')} | None = None, version: {_resolver('int')} | None = None",
        SAME,
        "self._then({SELF}, _steps.AppendEvent(entity, id, event, headers, version))",
        "none; with ``version``, a stream at another version ends the pipeline with ``version_conflict``.",
        ".append_event(Product, id=lambda c: c.payload.id, event=lambda c: StockAdjusted(delta=c.payload.delta))",
    ),
    "unsafe_projection_upsert": Method(
        f"table: Table | type[Any], *, on: Sequence[str], row: Callable[[{CTX}], Mapping[str, object]]",
        SAME,
        "self._then({SELF}, _steps.ProjectionUpsert(table, tuple(on), row))",
        "none.",
        '.unsafe_projection_upsert(LowStockAlert, on=["product_id"], row=lambda c: {"product_id": c.payload.id})',
    ),
    "unsafe_projection_delete": Method(
        f"table: Table | type[Any], *, where: Callable[[{CTX}], ColumnElement[bool]]",
        SAME,
        "self._then({SELF}, _steps.ProjectionDelete(table, where))",
        "none.",
        ".unsafe_projection_delete(LowStockAlert, where=lambda c: LowStockAlert.product_id == c.payload.id)",
    ),
    "branch": Method(
        f"*, when: Callable[[{CTX}], bool], "
        "on_true: Callable[[{SUB}[P, S, Sc, C]], {SUB}[P, S1, Sc, C]], "
        "on_false: Callable[[{SUB}[P, S, Sc, C]], {SUB}[P, S2, Sc, C]] | None = None, "
        "name: str | None = None",
        "{SELF}[P, Branch[S1, S2], Sc, C]",
        'self._then({SELF}, _steps.Branch(when, self._sub({SUB}, on_true, "on_true"), '
        'self._sub({SUB}, on_false, "on_false"), name))',
        "the arms' keys: ``T`` when both arms set a key with one type, else ``T | None``.",
        '.branch(when=lambda c: c.payload.notify, on_true=lambda b: b.compute("note", lambda c: "sent"))',
    ),
    "for_each": Method(
        f"item: str, *, over: Callable[[{CTX}], Iterable[I]], "
        "do: Callable[[{SUB}[P, S, AddScope[Sc, I], C]], {SUB}[P, S1, Sc1, C]]",
        "{SELF}[P, Loop[S1], Sc, C]",
        'self._then({SELF}, _steps.ForEach(item, over, self._sub({SUB}, do, "do")))',
        "the body's keys, each ``T | None`` (the last iteration's value); "
        "``c.scope[item]`` is the current item inside the body.",
        '.for_each("line", over=lambda c: c.payload.lines,'
        ' do=lambda b: b.compute("qty", lambda c: c.scope["line"].qty))',
    ),
    "guard": Method(
        f"when: Callable[[{CTX}], bool], *, otherwise: Callable[[{CTX}], Failure]",
        SAME,
        "self._then({SELF}, _steps.Guard(when, otherwise))",
        "none; when ``when`` is false, ``otherwise``'s Failure ends the whole handler (rolling it back) "
        "or fails the workflow run, from any depth.",
        '.guard(lambda c: c.steps["product"].stock >= c.payload.quantity,'
        ' otherwise=lambda c: fail("unprocessable", "not enough stock"))',
    ),
    "return": Method(
        f"fn: Callable[[{CTX}], Ok[D] | Failure]",
        "{FINISHED}[P, D]",
        "self._finish({FINISHED}, _steps.Return(fn))",
        "ends the pipeline; its ``Ok`` data type becomes the handler's result type.",
        '.return_(lambda c: ok(c.steps["product"].id))',
    ),
    "mail.send": Method(
        f"*, to: {_resolver('str | Sequence[str]')}, subject: {_resolver('str')}, body: {_resolver('str')}, "
        f"sender: {_resolver('str')} | None = None, html: str | Callable[[{CTX}], str | None] | None = None, "
        f"reply_to: str | Callable[[{CTX}], str | None] | None = None",
        SAME,
        "self._then({SELF}, _steps.SendMail(to, subject, body, sender, html, reply_to))",
        "none (an outbox row, delivered after commit).",
        '.send_mail(to=lambda c: c.payload.email, subject="Welcome", body="Hello!")',
    ),
    "webhook.send": Method(
        f'*, url: {_resolver("str")}, method: str = "POST", '
        f"headers: {_resolver('Mapping[str, str]')} | None = None, "
        f"body: Callable[[{CTX}], object] | None = None, auth: Auth | None = None, "
        "retry: RetryPolicy | None = None",
        SAME,
        "self._then({SELF}, _steps.SendWebhook(url, method, headers, body, auth, retry))",
        "none (an outbox row, delivered after commit).",
        '.send_webhook(url="https://crm.example/hook", body=lambda c: {"id": str(c.payload.id)}, auth=bearer("CRM"))',
    ),
    "call_feature": Method(
        f"name: str, handler: WriteHandler[P2, D2], *, payload: Callable[[{CTX}], P2], "
        f"as_user: {_resolver('User')} | None = None",
        "{SELF}[P, AddStep[S, D2], Sc, C]",
        "self._then({SELF}, _steps.CallFeature(name, handler, payload, as_user))",
        "``name``: the called handler's ``Ok`` data; its failure ends this pipeline with the same code.",
        '.call_feature("reserved", reserve_stock, payload=lambda c: Reserve(sku=c.payload.sku))',
        mypy_returns=DETACHED,
    ),
    "workflow.wait": Method(
        f"duration: timedelta | str | Callable[[{CTX}], datetime], *, name: str | None = None",
        SAME,
        "self._then({SELF}, _steps.Wait(duration, name))",
        "none.",
        ".wait(timedelta(days=1))",
    ),
    "workflow.wait_for_event": Method(
        f"name: str, event: type[EV], *, key: Callable[[{CTX}], object], "
        f"event_key: Callable[[EV], object], timeout: timedelta | str | Callable[[{CTX}], datetime]",
        "{SELF}[P, AddStep[S, EV | None], Sc, C]",
        "self._then({SELF}, _steps.WaitForEvent(name, event, key, event_key, timeout))",
        "``name``: the matching event, or ``None`` after the timeout.",
        '.wait_for_event("verified", EmailVerified, key=lambda c: c.payload.user_id,'
        " event_key=lambda e: e.user_id, timeout=timedelta(days=7))",
        mypy_returns=DETACHED,
    ),
    "workflow.retry": Method(
        "*, times: int, do: Callable[[{RB}[P, S, Sc, C]], {RB}[P, S1, Sc, C]], "
        'backoff: Literal["exponential", "linear"] = "exponential", '
        "base_delay: timedelta = timedelta(seconds=10), name: str | None = None",
        "{SELF}[P, Retry[S1], Sc, C]",
        'self._then({SELF}, _steps.Retry(times, backoff, base_delay, self._sub({RB}, do, "do"), name))',
        "the body's keys, plain (the body ran to completion).",
        '.retry(times=3, do=lambda b: b.send_webhook(url="https://crm.example/hook"))',
    ),
}

HEADER = '''\
# GENERATED by scripts/generate_builders.py from kumiko_typed/_rules.py — do not edit.
# Regenerate with:  python scripts/generate_builders.py
"""The typed builders: ``Pipeline``, ``SubPipeline``, ``WorkflowPipeline``,
``WorkflowSubPipeline``, and the read-only ``QueryPipeline``, ``QuerySubPipeline``.

Each step method returns a new builder whose steps type grows by a marker
(``AddStep``, ``Branch``...) that the mypy plugin turns into an exact ``TypedDict``.
That is mypy's view, in the ``if MYPY:`` branches.  pyright, which runs no plugin, reads
the ``else`` branches (it keeps a method's last definition): there the steps type is a
``Keys[Key[name, type], ...]`` list that each step extends, and ``Keys.__getitem__`` finds
a key by position (DESIGN §4.8; docs/plugin.md, "In your editor").
A step a builder must not offer is present as a ``@deprecated`` stub returning
``Never``: the editor says why even without the plugin, and the plugin reports it
under a ``kumiko-`` error code.  At run time such a stub still records the step, so
the App's boot validation reports it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, Never, TypeVar, overload
from uuid import UUID

from typing_extensions import TypeVar as DefaultTypeVar
from typing_extensions import deprecated

from . import _steps
from ._builder import BuilderCore
from ._ctx import Ctx, User, WorkflowCtx
from ._finished import Finished, QueryFinished, WorkflowFinished
from ._markers import AddScope, AddStep, Branch, Loop, NoSteps, Retry
from ._results import Failure, Ok

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Select, Table

    from ._feature import WriteHandler
    from ._outbox_types import Auth, RetryPolicy
    from ._saved import Saved

#: mypy takes ``MYPY`` as always true and reads only the ``if MYPY:`` branches (so they are
#: never run); the interpreter runs the ``else`` branches, and pyright, which reads both,
#: keeps a method's last definition, the ``else`` one.  The ``if TYPE_CHECKING and not
#: MYPY`` block is pyright's alone (DESIGN §4.8).
MYPY = False

P = TypeVar("P")
S = TypeVar("S", covariant=True)
Sc = TypeVar("Sc", covariant=True)
C = TypeVar("C", bound=str, covariant=True)

R = TypeVar("R")
T = TypeVar("T")
E = TypeVar("E")
I = TypeVar("I")  # noqa: E741 - a loop item
S1 = TypeVar("S1")
# The else-arm is optional; without it (and without the plugin) its keys are none.
S2 = DefaultTypeVar("S2", default=NoSteps)
Sc1 = TypeVar("Sc1")
# A return_ that only fails (fail(...) is a Failure) gives no Ok data: Never, not unsolved.
D = DefaultTypeVar("D", default=Never)
P2 = TypeVar("P2")
D2 = TypeVar("D2")
EV = TypeVar("EV")

__all__ = ["Pipeline", "QueryPipeline", "QuerySubPipeline", "SubPipeline", "WorkflowPipeline", "WorkflowSubPipeline"]
'''

#: Step positions whose key pyright reads exactly; a longer pipeline reads every key
#: past the limit as ``Any`` (never an error).  Each position is one ``__getitem__``
#: overload, and pyright's time grows with their number (bench/pyright_keys.py).
POSITIONS = 12


def _keys_class() -> str:
    """pyright's view of ``c.steps``/``c.scope``: a variadic list of ``Key[name, type]``.

    Overload *i* binds ``K, V`` from the *i*-th entry, so ``c.steps["x"]`` is the type of
    the step named ``"x"``, completion offers exactly the names in the list, and a name
    not in it matches no overload (an error).  An ``Open`` first entry (keys pyright
    cannot follow: a branch arm, a loop body, a non-literal name) or a list longer than
    ``POSITIONS`` turns a name not found into ``Any`` instead.  Those fallbacks take a
    ``LiteralString``, not a ``str``: with ``str`` the half-typed key in ``c.steps["``
    matches them and pyright's completion offers no name.

    ``c.scope`` is a ``Scope``, the same list with its positions tried last first, then the
    overloads for items named by enum members."""
    lines = [
        "\n\nif TYPE_CHECKING and not MYPY:\n",
        "    from enum import Enum\n",
        "    from typing import LiteralString, TypeVarTuple\n\n",
        '    Ks = TypeVarTuple("Ks")\n',
        '    Js = TypeVarTuple("Js")\n',
        "    # A retry body's keys (one list: a body choosing between builders gives a union of lists).\n",
        '    Bs = TypeVarTuple("Bs")\n',
        '    # bound=LiteralString is what makes pyright keep Literal["x"] (bound=str widens it).\n',
        '    N = TypeVar("N", bound=LiteralString)\n',
        "    # A loop item's name. An enum member binds it too, instead of failing every overload\n",
        "    # for a literal, each evaluating the body, before those for any str (docs/plugin.md).\n",
        '    NI = TypeVar("NI", bound=LiteralString | Enum)\n',
        "    # An item's name in c.scope: a literal binds KL, a member's class EN (_member_items).\n",
        '    KL = TypeVar("KL", bound=LiteralString)\n',
        '    EN = TypeVar("EN", bound=Enum)\n',
        '    K = TypeVar("K")\n',
        '    V = TypeVar("V")\n',
        '    V_co = TypeVar("V_co", covariant=True)\n',
        "    # The keys a branch arm or a loop body adds (scripts/_arm_keys.py).\n",
        *(f'    {v} = TypeVar("{v}")\n' for v in _arm_keys.TYPEVARS),
        "\n",
        "    class Key(Generic[K, V_co]):\n",
        '        """One step result: its literal name ``K`` and its type ``V_co``."""\n\n',
        "    class Open:\n",
        '        """First entry of a list that may hold keys pyright cannot name: they read as ``Any``."""\n\n',
        "    class OpenArm:\n",
        '        """``Open`` inside a sub-pipeline: its enclosing branch or loop reads all its keys as ``Any``."""\n\n',
    ]
    # Steps: the first entry of a name wins (a second step of that name is an error).
    lines += _key_list("Keys", "The keys produced so far, in step order", range(POSITIONS), ("Open", "OpenArm"))
    # Scope: the innermost loop's item wins, as at run time, where an inner loop's item
    # shadows an outer one of the same name; loops append their item, so the last entry.
    scope = "The items of the enclosing loops, outermost first"
    lines += _key_list("Scope", scope, range(POSITIONS - 1, -1, -1), ("Open",), members=True)
    return "".join(lines)


def _key_list(
    name: str, doc: str, order: Iterable[int], opened: tuple[str, ...], *, members: bool = False
) -> list[str]:
    """One key-list class: an overload per position, tried in ``order`` (the first that
    binds the name gives its type), then the fallbacks to ``Any`` for a list that starts
    with one of ``opened`` or is longer than ``POSITIONS``; with ``members``, then the
    overloads for names that are enum members (``_member_items``)."""
    skip = "Any, "
    # An enum member too: a step named by a StrEnum member opens the list, and its key may
    # be read by that member (pyright cannot compare the member's value with the names).
    anything = "*tuple[Any, ...]], key: LiteralString | Enum, /) -> Any: ...\n"
    lines = [
        # A Mapping, as the plugin's TypedDict is for mypy: c.steps as a whole may be copied,
        # unpacked or passed where a Mapping[str, object] is expected.
        f"    class {name}(Mapping[str, Any], Generic[*Ks]):\n",
        f'        """{doc} (pyright only; mypy sees the markers)."""\n\n',
    ]
    # With ``members``, a position binds only a literal name: an item named by an enum member
    # binds the member's class, which its other members share (``_member_items``).
    k = "KL" if members else "K"
    for i in order:
        lines += [
            "        @overload\n",
            f"        def __getitem__(self: {name}[{skip * i}Key[{k}, V], *tuple[Any, ...]], key: {k}, /) -> V: ...\n",
        ]
    for marker in opened:
        lines += ["        @overload\n", f"        def __getitem__(self: {name}[{marker}, {anything}"]
    lines += [
        "        @overload\n",
        f"        def __getitem__(self: {name}[{skip * POSITIONS}Any, {anything}",
    ]
    if members:
        lines += _member_items(name, anything)
    lines += [
        "        def __getitem__(self, key: str, /) -> Any: ...\n",
        "        def __contains__(self, key: object, /) -> bool: ...\n",
        "        def __iter__(self) -> Iterator[str]: ...\n",
        "        def __len__(self) -> int: ...\n",
        "        def get(self, key: str, default: object = None, /) -> Any: ...\n",
        "        def __getattr__(self, name: str, /) -> Any: ...\n",
        "\n",
    ]
    return lines


#: Loops nested this deep (counting each item of ``c.scope``) read an item named by an enum
#: member exactly by that member; deeper, or in a list that has a name pyright cannot read, as ``Any``.
MEMBER_ITEMS = 3


def _member_items(name: str, anything: str) -> list[str]:
    """``Scope`` overloads for loop items named by enum members, after the literal ones.

    pyright binds such a name to the member's class, not to the member (it keeps a
    string's literal, not an enum member's), so two items named by members of one enum
    cannot be told apart: a list that holds two reads every key as ``Any`` (first), and
    otherwise, in a list of up to ``MEMBER_ITEMS`` entries, a member of the class of one
    of its names reads as that item.  Last, any key no position binds in a list that holds
    a member name at any position (its item read by its value, ``c.scope["line"]``, which
    pyright cannot compare with the member) reads as ``Any`` rather than an error."""
    out: list[str] = []
    for i, j in itertools.combinations(range(MEMBER_ITEMS), 2):
        entries = ["Any"] * (j + 1)
        entries[i] = entries[j] = "Key[EN, Any]"
        out += ["        @overload\n", f"        def __getitem__(self: {name}[{', '.join(entries)}, {anything}"]
    for length in range(1, MEMBER_ITEMS + 1):
        for i in range(length - 1, -1, -1):
            entries = ["Any"] * length
            entries[i] = "Key[EN, V]"
            out += [
                "        @overload\n",
                f"        def __getitem__(self: {name}[{', '.join(entries)}], key: EN, /) -> V: ...\n",
            ]
    for i in range(POSITIONS):
        out += ["        @overload\n", f"        def __getitem__(self: {name}[{'Any, ' * i}Key[EN, Any], {anything}"]
    return out


def _editor_signatures(builder: str, rule: Any, m: Method) -> list[tuple[str, str, str]]:
    """pyright's (self, parameters, result) of a step that adds keys (DESIGN §4.8).

    A literal name ``N`` appends ``Key[N, R]``; any other name (a ``str`` variable, a
    ``StrEnum`` member) opens the list.  A branch's or loop's keys are appended per
    sub-pipeline shape (``_arm_keys``); a retry body's keys are kept as they are."""
    params = _fill(m.params, builder).replace("[P, S, Sc", "[P, Keys[*Ks], Sc")
    this = _fill("{SELF}[P, Keys[*Ks], Sc, C]", builder)
    same = _fill("{SELF}[P, Keys[%s], Sc, C]", builder)
    sub = rules.BUILDERS[builder].nested
    # What a list that gained an unnameable key starts with: ``OpenArm`` in a sub-pipeline,
    # so that the enclosing branch or loop sees it at its first overload (``_arm_keys``).
    marker = "OpenArm" if sub == builder else "Open"
    opened = same % f"{marker}, *Ks"
    if rule.key == "retry":
        # A body that holds a key pyright cannot name: every body key Any, no OpenArm left.
        body = _fill("{RB}[P, S1, Sc, C]", builder)
        detect = params.replace(body, body.replace("S1", _arm_keys.OPENED))
        exact = params.replace(body, body.replace("S1", "Keys[*Bs]"))
        # A body that chooses its builder (``b.compute(...) if X else b``) returns a union of
        # lists, which no later step could take as its self: its keys read as Any instead.
        return [(this, detect, opened), (this, exact, same % "*Bs"), (this, params, opened)]
    if rule.key == "arms":
        when = _fill("Callable[[{CTX}[P, Keys[*Ks], Sc]], bool]", builder)
        first = _arm_keys.settled(builder, sub, "arms", _fill("{CTX}", builder), "Sc") if sub == builder else []
        return first + _arm_keys.branch(builder, sub, this, when, opened, nested=sub == builder)
    if rule.key == "body":
        this = _fill("{SELF}[P, Keys[*Ks], Scope[*Js], C]", builder)
        over = _fill("Callable[[{CTX}[P, Keys[*Ks], Scope[*Js]]], Iterable[I]]", builder)
        exact = _arm_keys.loop(builder, sub, this, over, "NI", "Scope[*Js, Key[NI, I]]", marker)
        if sub == builder:
            exact = _arm_keys.settled(builder, sub, "body", _fill("{CTX}", builder), "Scope[*Js]") + exact
        return exact + _arm_keys.loop(builder, sub, this, over, "str", "Scope[Open, *Js]", marker)
    value = m.returns[m.returns.index("AddStep[S, ") + len("AddStep[S, ") : m.returns.rindex("], Sc, C]")]
    return [(this, params.replace("name: str", "name: N", 1), same % f"*Ks, Key[N, {value}]"), (this, params, opened)]


def _fill(text: str, builder: str) -> str:
    b = rules.BUILDERS[builder]
    finished = "WorkflowFinished" if b.workflow else "QueryFinished" if b.read_only else "Finished"
    return (
        text.replace("{SELF}", builder)
        .replace("{CTX}", "WorkflowCtx" if b.workflow else "Ctx")
        .replace("{SUB}", b.nested)
        .replace("{RB}", rules.RETRY_BODY_BUILDER)
        .replace("{FINISHED}", finished)
    )


def _docstring(rule: Any, m: Method, refusal: str | None, indent: str) -> str:
    tier = {
        1: "Tier 1.",
        2: f'Tier 2: the feature must declare "{rule.kind}" in ``requires=``.',
        3: "Tier 3: workflows only.",
    }[rule.tier]
    # A refused step leads with why: pyright's language server tags no completion item as
    # deprecated, so this line (the top of the item's documentation) and -> Never say it.
    lines = [f"Deprecated here: {refusal}.", "", rule.summary, ""] if refusal else [rule.summary, ""]
    lines += [f"Step kind ``{rule.kind}``. {tier}", f"Result key: {m.key}", "", "Example::", "", f"    {m.example}"]
    wrapped: list[str] = []
    for line in lines:
        keep = not line or line.startswith("    ")
        wrapped += [line] if keep else textwrap.wrap(line, 96 - len(indent))
    body = "\n".join((indent + w) if w else "" for w in wrapped)
    return f'{indent}"""{body.lstrip()}\n{indent}"""\n'


def _method(builder: str, rule: Any, m: Method) -> str:
    kind = rule.kind
    name = rule.method
    params = _fill(m.params, builder)
    body = _fill(m.body, builder)
    if rules.allows(builder, kind):
        returns = _fill(m.mypy_returns or m.returns, builder)
        doc = _docstring(rule, m, None, " " * 8)
        if rule.key not in _EDITOR_KEYS:
            return f"    def {name}(self, {params}) -> {returns}:\n{doc}        return {body}\n"
        # mypy's signature (the plugin's markers), then pyright's and the run time's: pyright
        # takes a method's last definition, the interpreter and mypy their own branch.
        out = [
            "    if MYPY:\n\n",
            f"        def {name}(self, {params}) -> {returns}:\n",
            f"            return {body}\n",
            "\n    else:\n\n",
        ]
        sigs = _editor_signatures(builder, rule, m)
        if len(sigs) == 1:
            this, sig, result = sigs[0]
            out += [f"        def {name}(self: {this}, {sig}) -> {result}:\n"]
        else:
            for this, sig, result in sigs:
                out += ["        @overload\n", f"        def {name}(self: {this}, {sig}) -> {result}: ...\n"]
            out += [f"        def {name}(self, {params}) -> Any:\n"]
        out += [_indent(doc), f"            return {body}\n"]
        return "".join(out)
    if rule.key == "end":
        why = rules.msg_return_in_subpipeline(builder)
        # Recorded on the sub-builder itself (not as a Finished) so the arm stays a builder.
        body = _fill("self._then({SELF}, _steps.Return(fn))", builder)
    elif rules.BUILDERS[builder].read_only:
        why = rules.msg_read_only(kind, name, builder)
    else:
        why = rules.msg_workflow_only(kind, name, builder)
    untyped = ", ".join(_untyped(p) for p in _split(params))
    return (
        "    if TYPE_CHECKING:\n\n"
        f"        @deprecated({why!r})\n"
        f"        def {name}(self, {params}) -> Never:\n"
        + _docstring(rule, m, why, " " * 12)
        + "            raise NotImplementedError\n\n"
        "    else:\n\n"
        f"        def {name}(self, {untyped}):  # type: ignore[no-untyped-def]\n"
        "            # Recorded anyway so that boot validation reports it with the other problems.\n"
        f"            return {body}\n"
    )


def _indent(text: str) -> str:
    return "".join(("    " + line) if line.strip() else line for line in text.splitlines(keepends=True))


#: The key shapes whose pyright signature differs from mypy's.
_EDITOR_KEYS = frozenset({"name", "arms", "body", "retry"})


def _untyped(param: str) -> str:
    """``name: T = default`` without its annotation; the default stays, so a call that
    leaves it out (written without mypy) still records the step for boot to report."""
    if param == "*":
        return param
    head, _eq, default = param.partition(" = ")
    name = head.split(":")[0].strip()
    return f"{name}={default}" if default else name


def _split(params: str) -> list[str]:
    """Split a parameter list on top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out]


def generate() -> str:
    missing = {r.kind for r in rules.STEP_RULES} - set(METHODS)
    extra = set(METHODS) - {r.kind for r in rules.STEP_RULES}
    if missing or extra:
        raise SystemExit(f"rule table and METHODS disagree: missing {sorted(missing)}, extra {sorted(extra)}")
    parts = [HEADER, _keys_class()]
    for b in rules.BUILDER_RULES:
        parts.append(
            f"\n\nclass {b.name}(BuilderCore, Generic[P, S, Sc, C]):\n"
            f'    """{b.description}\n\n'
            "    Type parameters: payload ``P``, steps ``S``, scope ``Sc``, declared tier-2\n"
            '    capabilities ``C``.  Each method returns a new builder; this one is unchanged.\n    """\n\n'
            "    __slots__ = ()\n"
            f'    _rule = "{b.name}"\n'
        )
        for rule in rules.STEP_RULES:
            parts.append("\n" + _method(b.name, rule, METHODS[rule.kind]))
    return "".join(parts)


def formatted(text: str) -> str:
    """``text`` as ``ruff format`` writes it at ``TARGET``, with the repository's settings."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise SystemExit(f"ruff format failed on the generated code:\n{proc.stderr}")
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 and print a diff if the committed file is stale")
    args = parser.parse_args()
    text = formatted(generate())
    if args.check:
        committed = TARGET.read_text()
        if committed != text:
            name = str(TARGET.relative_to(ROOT))
            diff = difflib.unified_diff(
                committed.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{name} (committed)",
                tofile=f"{name} (generated)",
            )
            sys.stdout.writelines(diff)
            print(f"{TARGET} is stale: run python scripts/generate_builders.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
