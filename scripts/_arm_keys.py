"""pyright's view of the keys a ``branch`` or a ``for_each`` adds (DESIGN §4.8).

pyright has no way to map over a variadic list, so a sub-pipeline's keys are matched by
*shape*: one overload per number of keys an arm (or loop body) adds, each binding those
keys as ``Key[A0, X0], ...`` after the keys before the step (``*Ks``).  The overload's
result appends them with the plugin's semantics: a loop body's keys and a key of one arm
only become ``X | None``; a key of both arms becomes ``X | Y``.  Both arms naming the same
key is expressed by one type variable for both names (``Key`` is invariant in its name,
so the overload fails when the names differ); every pairing is an overload of its own,
larger pairings first, so the first overload that fits pairs every key that can be paired.

A sub-pipeline larger than these shapes (or one that adds a key pyright cannot name)
fits none of them and falls to the last overload, which reads its keys as ``Any``.  Only
a top-level ``branch`` tries every shape: one inside an arm or a body tries only ``NESTED``,
because each attempt of the outer call re-evaluates the inner one with all its own attempts,
so shapes at every level multiply (bench/pyright_keys.py ``--nested``).  Whatever a
sub-pipeline cannot name puts ``OpenArm`` first in its list, and the first overloads take
such an arm at once instead of trying every shape on it; an arm typed ``Any`` fits them too.
Each overload costs pyright a re-evaluation of the arms' lambdas when it does not fit, so
the shapes are few and the common ones come first; a sub-pipeline already opened tries no
shape at all (``settled``).
"""

from __future__ import annotations

import itertools

#: Keys one arm may add when ``on_false`` is left out, each arm's when both are given,
#: and a loop body's.  Past these, the sub-pipeline's keys read as ``Any``.
ONE_ARM = 3
TWO_ARMS = 2
BODY = 3

#: Type variables binding the arms' key names (``A``/``B``) and types (``X``/``Y``).
TYPEVARS = tuple(f"{v}{i}" for v in "AX" for i in range(max(ONE_ARM, BODY))) + tuple(
    f"{v}{i}" for v in "BY" for i in range(TWO_ARMS)
)

Signature = tuple[str, str, str]


def _keys(entries: list[str]) -> str:
    return "Keys[" + ", ".join(["*Ks", *entries]) + "]"


def _added(letter: str, names: list[str], n: int) -> list[str]:
    return [f"Key[{names[i]}, {letter}{i}]" for i in range(n)]


def _pairings(n: int, m: int) -> list[dict[int, int]]:
    """Every way to pair keys of an ``n``-key arm with keys of an ``m``-key arm, larger first."""
    out: list[dict[int, int]] = []
    for size in range(min(n, m), -1, -1):
        for left in itertools.combinations(range(n), size):
            out += [dict(zip(left, right, strict=True)) for right in itertools.permutations(range(m), size)]
    return out


#: The arm shapes (keys of ``on_true``, of ``on_false``) most branches have: tried first.
_COMMON = [(1, 0), (1, 1), (2, 0), (2, 2)]


def _shapes() -> list[tuple[int, int]]:
    one = [(n, 0) for n in range(ONE_ARM + 1)]
    two = [(n, m) for n in range(TWO_ARMS + 1) for m in range(1, TWO_ARMS + 1)]
    return _COMMON + [s for s in one + two if s not in _COMMON]


#: A sub-pipeline's keys that start with ``OpenArm``: it added a key pyright cannot name.
OPENED = "Keys[OpenArm, *tuple[Any, ...]]"
#: Keyword parameters after the arms, as in mypy's signature.
NAME = ", name: str | None = None"


#: The only shapes a branch inside an arm or a body matches (``nested``): at most one key per
#: arm.  An arm without a key (one that only writes, sends or guards) is as common as one
#: with, but its shapes come last: only such branches try the others in vain first, so a
#: branch of the first two shapes costs what it did.
NESTED = [(1, 0), (1, 1), (0, 0), (0, 1)]

#: An ``on_false`` given that adds no key, by the number of keys ``on_true`` adds (top level,
#: nested).  The shapes above type a missing ``on_false`` as ``None``, which pyright refuses a
#: lambda for at once; typed as an arm, it would evaluate the ``on_false`` of every two-arm
#: branch at each of them.  So these come after all the others: only such branches, and
#: those no shape fits, try them.
KEYLESS_ELSE = [1, 0, *range(2, ONE_ARM + 1)]
NESTED_KEYLESS_ELSE = [1, 0]


def branch(builder: str, sub: str, this: str, when: str, fallback: str, *, nested: bool = False) -> list[Signature]:
    """``branch``'s overloads on ``builder`` (arms on ``sub``): an arm that opened its list,
    then per arm shape (only ``NESTED`` ones when ``nested``) and pairing, then ``fallback``
    (every arm key read as ``Any``)."""
    arm = f"Callable[[{sub}[P, Keys[*Ks], Sc, C]], {sub}[P, %s, Sc, C]]"
    typed = arm % "S1"
    opened = arm % OPENED
    out: list[Signature] = [
        (this, f"*, when: {when}, on_true: {opened}, on_false: {typed} | None = None{NAME}", fallback),
        (this, f"*, when: {when}, on_true: {typed}, on_false: {opened}{NAME}", fallback),
    ]
    shapes = [(n, m, False) for n, m in (NESTED if nested else _shapes())]
    shapes += [(n, 0, True) for n in (NESTED_KEYLESS_ELSE if nested else KEYLESS_ELSE)]
    for n, m, keyless_else in shapes:
        for pairs in _pairings(n, m):
            a = [f"A{i}" for i in range(n)]
            b = [f"B{j}" for j in range(m)]
            for i, j in pairs.items():
                b[j] = a[i]
            entries = [f"Key[A{i}, X{i} | {f'Y{pairs[i]}' if i in pairs else 'None'}]" for i in range(n)]
            entries += [f"Key[B{j}, Y{j} | None]" for j in range(m) if j not in pairs.values()]
            on_false = arm % _keys(_added("Y", b, m)) if m or keyless_else else "None = None"
            params = f"*, when: {when}, on_true: {arm % _keys(_added('X', a, n))}, on_false: {on_false}{NAME}"
            out.append((this, params, f"{builder}[P, {_keys(entries)}, Sc, C]"))
    return [*out, (this, f"*, when: {when}, on_true: {typed}, on_false: {arm % 'S2'} | None = None{NAME}", fallback)]


def settled(builder: str, sub: str, kind: str, ctx: str, scope: str) -> list[Signature]:
    """Overloads first on a sub-pipeline whose list already starts with ``OpenArm``: its
    enclosing branch or loop reads all its keys as ``Any`` whatever this step adds, so the
    step keeps the list as it is and tries no shape.  pyright drops an overload whose ``self``
    does not fit before it evaluates any argument, so elsewhere these cost nothing; here they
    spare each attempt of the enclosing call a try of every shape (``kind``: ``"arms"`` for
    ``branch``, ``"body"`` for ``for_each``)."""
    keys = "Keys[OpenArm, *Ks]"
    this = f"{builder}[P, {keys}, {scope}, C]"
    # The arms' own keys are not read, so they are Any, not a type variable: an argument
    # without one is evaluated once per attempt, not once per pass of pyright's solver.
    done = f"{sub}[P, Any, Any, C]"
    if kind == "arms":
        arm = f"Callable[[{sub}[P, {keys}, Sc, C]], {done}]"
        params = f"*, when: Callable[[{ctx}[P, {keys}, Sc]], bool], on_true: {arm}, on_false: {arm} | None = None{NAME}"
        return [(this, params, this)]
    over = f"over: Callable[[{ctx}[P, {keys}, Scope[*Js]]], Iterable[I]]"
    out: list[Signature] = []
    for item, body_scope in (("NI", "Scope[*Js, Key[NI, I]]"), ("str", "Scope[Open, *Js]")):
        do = f"Callable[[{sub}[P, {keys}, {body_scope}, C]], {done}]"
        out.append((this, f"item: {item}, *, {over}, do: {do}", this))
    return out


def loop(builder: str, sub: str, this: str, over: str, item: str, scope: str, marker: str) -> list[Signature]:
    """``for_each``'s overloads for one kind of item name (``item``, giving the body the
    scope ``scope``): a body that opened its list, per body shape (each key ``X | None``
    after the loop), then every body key read as ``Any`` behind ``marker``."""
    opened = f"{builder}[P, Keys[{marker}, *Ks], Scope[*Js], C]"
    detect = f"Callable[[{sub}[P, Keys[*Ks], {scope}, C]], {sub}[P, {OPENED}, Sc1, C]]"
    out: list[Signature] = [(this, f"item: {item}, *, over: {over}, do: {detect}", opened)]
    for n in [1, 2, 0, *range(3, BODY + 1)]:
        a = [f"A{i}" for i in range(n)]
        body = f"Callable[[{sub}[P, Keys[*Ks], {scope}, C]], {sub}[P, {_keys(_added('X', a, n))}, Sc1, C]]"
        entries = [f"Key[A{i}, X{i} | None]" for i in range(n)]
        params = f"item: {item}, *, over: {over}, do: {body}"
        out.append((this, params, f"{builder}[P, {_keys(entries)}, Scope[*Js], C]"))
    body = f"Callable[[{sub}[P, Keys[*Ks], {scope}, C]], {sub}[P, S1, Sc1, C]]"
    out.append((this, f"item: {item}, *, over: {over}, do: {body}", opened))
    return out
