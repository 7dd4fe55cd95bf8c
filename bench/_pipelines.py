"""The generated pipelines the type-checker benches check (bench/mypy_plugin.py,
bench/pyright_keys.py): one shape for both, so their figures describe the same code."""

from __future__ import annotations

#: The 10 compute steps of every pipeline: (key, resolver).  Each reads the previous key;
#: the types change along the chain: int, float, str, bool, dict, tuple.
STEPS = [
    ("qty", "lambda c: c.payload.quantity * 2"),
    ("gross", 'lambda c: c.steps["qty"] * c.payload.unit_price'),
    ("rounded", 'lambda c: round(c.steps["gross"], 2)'),
    ("label", "lambda c: f\"{c.payload.sku}:{c.steps['rounded']}\""),
    ("upper", 'lambda c: c.steps["label"].upper()'),
    ("size", 'lambda c: len(c.steps["upper"])'),
    ("large", 'lambda c: c.steps["size"] > 12'),
    ("tier", 'lambda c: "bulk" if c.steps["large"] else "retail"'),
    ("row", 'lambda c: {"tier": c.steps["tier"], "sku": c.payload.sku}'),
    ("keys", 'lambda c: tuple(sorted(c.steps["row"]))'),
]
RETURN = 'lambda c: ok({"keys": c.steps["keys"], "total": c.steps["rounded"]})'


def chain(indent: str = "    ") -> list[str]:
    """The lines of one pipeline after its start: the 10 steps and the ``return_``."""
    return [*(f'{indent}.compute("{key}", {fn})' for key, fn in STEPS), f"{indent}.return_({RETURN})"]
