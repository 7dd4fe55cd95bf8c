"""Branch arms, loop bodies and scope: what exists after them, and with which type."""

from __future__ import annotations

from kumiko_typed import Feature, ok

from _models import Order

shop = Feature("shop")

branchy = (
    shop.pipeline(Order)
    .compute("base", lambda c: 1)
    .branch(
        when=lambda c: c.steps["base"] > 0,
        on_true=lambda b: b.compute("both", lambda c: "yes").compute("only_true", lambda c: 1.5)
        .compute("inside", lambda c: reveal_type(c.steps["only_true"])),  # R: float # PR: float
        on_false=lambda b: b.compute("both", lambda c: "no").compute("mixed", lambda c: 3),
    )
    .branch(when=lambda c: True, on_true=lambda b: b.compute("mixed2", lambda c: 1), on_false=lambda b: b.compute("mixed2", lambda c: "s"))
    .branch(when=lambda c: True, on_true=lambda b: b.compute("no_else", lambda c: b"x"))
    .return_(lambda c: ok(c.steps))
)
reveal_type(branchy)  # R: kumiko_typed._finished.Finished[_models.Order, TypedDict({'base'=: int, 'both'=: str, 'only_true'=: float | None, 'inside'=: float | None, 'mixed'=: int | None, 'mixed2'=: int | str, 'no_else'=: bytes | None})] # PR: Finished[Order, Keys[Open, Key[Literal['base'], int], Key[Literal['mixed2'], int | str], Key[Literal['no_else'], bytes | None]]]

loopy = (
    shop.pipeline(Order)
    .for_each(
        "line",
        over=lambda c: c.payload.lines,
        do=lambda b: b.compute("qty", lambda c: reveal_type(c.scope["line"]).qty)  # R: _models.Line # PR: Line
        .for_each(
            "ch",
            over=lambda c: c.scope["line"].sku,
            do=lambda b: b.compute("pair", lambda c: (reveal_type(c.scope), c.steps["qty"])[1]),  # R: TypedDict({'line'=: _models.Line, 'ch'=: str}) # PR: Scope[Key[Literal['line'], Line], Key[Literal['ch'], str]]
        ),
    )
    .compute("after", lambda c: reveal_type(c.scope))  # R: TypedDict({}) # PR: Scope[*tuple[()]]
    .return_(lambda c: ok((reveal_type(c.steps["qty"]), reveal_type(c.steps["pair"]))))  # R: int | None # R: int | None # PR: int | None
)

# on_false=None, written out, is the same as leaving the else-arm out: the keys stay exact.
explicit_none = (
    shop.pipeline(Order)
    .compute("base", lambda c: 1)
    .branch(when=lambda c: True, on_true=lambda b: b.compute("only", lambda c: "s"), on_false=None)
)
reveal_type(explicit_none)  # R: kumiko_typed._builders.Pipeline[_models.Order, TypedDict({'base'=: int, 'only'=: str | None}), TypedDict({}), Never] # PR: Pipeline[Order, Keys[Key[Literal['base'], int], Key[Literal['only'], str | None]], Scope[*tuple[()]], Never]

# An inner loop's item of the same name shadows the outer one, as at run time; after the
# inner loop the outer item is back.
shadowed = (
    shop.pipeline(Order)
    .for_each(
        "item",
        over=lambda c: c.payload.lines,
        do=lambda b: b.for_each(
            "item",
            over=lambda c: c.scope["item"].sku,
            do=lambda b: b.compute("ch", lambda c: reveal_type(c.scope["item"]).upper()),  # R: str # PR: str
        )
        .compute("qty", lambda c: reveal_type(c.scope["item"]).qty),  # R: _models.Line # PR: Line
    )
    .return_(lambda c: ok((c.steps["ch"], c.steps["qty"])))
)
reveal_type(shadowed)  # R: kumiko_typed._finished.Finished[_models.Order, tuple[str | None, int | None]] # PR: Finished[Order, tuple[str | None, int | None]]
