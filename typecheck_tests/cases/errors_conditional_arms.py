"""A key only one side of a conditional expression sets is no key after the step: the
pipeline built with the other side has no such step, and reading it raises KeyError at run
time (a branch arm that does not run sets its keys to None; a step never built cannot)."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")
mailing = Feature("mailing", requires=["mail.send"])
DETAILED = True

one_side = (
    shop.pipeline(Order)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("big", lambda c: 1) if DETAILED else b)
    .return_(lambda c: ok(c.steps["big"]))  # E: misc
)

one_side_mailed = (
    mailing.pipeline(Order)
    .for_each("line", over=lambda c: c.payload.lines, do=lambda b: b.compute("sku", lambda c: c.scope["line"].sku) if DETAILED else b)
    .return_(lambda c: ok(c.steps["sku"]))  # E: misc
)

# Mid-chain too: mypy keeps the keys both builders have (their join), and the error says why.
chosen = (
    (shop.pipeline(Order).compute("big", lambda c: 1) if DETAILED else shop.pipeline(Order).compute("small", lambda c: 2))
    .compute("both", lambda c: 3)
    .return_(lambda c: ok(c.steps["big"]))  # E: misc
)


# An if statement that extends the builder on one path: the same mistake, explained alike.
def extended(detailed: bool) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    if detailed:
        p = p.compute("big", lambda c: c.steps["count"] > 10)
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc
    q = shop.pipeline(Order)
    if detailed:
        q = q.compute("big", lambda c: True)
    else:
        q = q.compute("big", lambda c: False)
    q.return_(lambda c: ok(reveal_type(c.steps["big"])))  # R: bool


# Only an if (match, loop) on the path that decides the key is named.
def reassigned_before_if(detailed: bool) -> None:
    p = shop.pipeline(Order)
    p = p.compute("count", lambda c: len(c.payload.lines))
    if detailed:
        p = p.compute("big", lambda c: c.steps["count"] > 10)
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc


def reassigned_after_if(detailed: bool) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    if detailed:
        p = p.compute("big", lambda c: c.steps["count"] > 10)
    p = shop.pipeline(Order).compute("count", lambda c: 0)
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc


def read_in_the_other_path(detailed: bool) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    if detailed:
        p = p.compute("big", lambda c: c.steps["count"] > 10)
    else:
        p.return_(lambda c: ok(c.steps["big"]))  # E: misc


def if_inside_match(kind: str, detailed: bool) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    match kind:
        case "bulk":
            if detailed:
                p = p.compute("big", lambda c: True)
        case _:
            p = p.compute("big", lambda c: False)
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc
    q = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    match kind:
        case "bulk":
            q = q.compute("big", lambda c: True)
        case "retail":
            q = q.compute("big", lambda c: False)
    q.return_(lambda c: ok(c.steps["big"]))  # E: misc


def if_inside_loop(flags: list[bool]) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    for flag in flags:
        if flag:
            p = p.compute("big", lambda c: True)
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc


def chosen_in_an_assignment(detailed: bool) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    p = p.compute("big", lambda c: True) if detailed else p
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc


def checked() -> None: ...


# A try statement: an exception may leave its body before the step is added (the except
# clause's path then has no such key), or only a clause (or the else block) sets it.
def set_in_a_try(detailed: bool) -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        p = p.compute("big", lambda c: c.steps["count"] > 10)
    except ValueError:
        checked()
    p.return_(lambda c: ok(c.steps["big"]))  # E: misc
    q = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        checked()
    except ValueError:
        q = q.compute("big", lambda c: True)
    q.return_(lambda c: ok(c.steps["big"]))  # E: misc
    r = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        checked()
    except ValueError:
        r = r.compute("big", lambda c: True)
    else:
        r = r.compute("big", lambda c: False)
    r.return_(lambda c: ok(reveal_type(c.steps["big"])))  # R: bool
    s = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        s = s.compute("big", lambda c: True)
    finally:
        checked()
    s.return_(lambda c: ok(reveal_type(c.steps["big"])))  # R: bool
    t = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        checked()
    finally:
        if detailed:
            t = t.compute("big", lambda c: True)
    t.return_(lambda c: ok(c.steps["big"]))  # E: misc


# Read in an except clause or the finally block of the try statement whose body sets it: the
# body may have stopped before the step (the finally block runs after any exception too).
def read_in_a_handler() -> None:
    p = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        p = p.compute("big", lambda c: True)
    except ValueError:
        p.compute("retried", lambda c: c.steps["big"])  # E: misc
    q = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        q = q.compute("big", lambda c: True)
    except ValueError:
        q = q.compute("big", lambda c: False)
    finally:
        q.compute("logged", lambda c: c.steps["big"])  # E: misc
    r = shop.pipeline(Order).compute("count", lambda c: len(c.payload.lines))
    try:
        checked()
    except ValueError:
        r.compute("logged", lambda c: c.steps["big"])  # E: misc
