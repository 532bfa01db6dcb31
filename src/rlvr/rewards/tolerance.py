"""The numeric comparison rule, shared by the fast path and the math-verify patch.

One rule in one place, so a plain `0.5` compared without sympy and the `0.5`
inside a set compared by math-verify get the same verdict.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Tolerance:
    rel: float = 1e-6
    abs: float = 0.0
    decimals: int | None = None
    """The gold said 'approximately' with this many decimals: compare at that precision."""


def numbers_equal(gold: Fraction, gold_kind: str, pred: Fraction, pred_kind: str, tol: Tolerance) -> bool:
    """Compare two values. Kinds: 'int' (an integer), 'exact' (a fraction), 'irr' (an exact
    irrational such as pi or sqrt(2), given here to 60 digits), 'dec' (a decimal as
    written, i.e. already rounded) and 'conv' (a value converted into the gold's unit by a
    rounded factor, such as degrees to radians).

    - approximate gold: |gold - pred| <= half a unit of the gold's last stated decimal;
    - both exact: equal, nothing else (1/2^99 and 1/2^98 differ; an irrational may
      differ from its exact equal only in the 60-digit evaluation noise);
    - an integer against a decimal: equal exactly (1000000 vs 1000001.0 differ);
    - otherwise a decimal or a rounded conversion is involved: within rel_tol (relative) or abs_tol.
    """
    if tol.decimals is None and gold_kind in _EXACT and pred_kind in _EXACT:
        return gold == pred  # integers and fractions: equal or not, no tolerance
    diff = abs(gold - pred)
    if tol.decimals is not None:
        # a hair of slack for the binary representation of the bound itself
        half_unit = Fraction(1, 2) * Fraction(10) ** -tol.decimals
        return diff <= half_unit * (1 + Fraction(1, 10**9))
    if "conv" in (gold_kind, pred_kind):
        return diff <= max(_exactly(tol.rel) * max(abs(gold), abs(pred)), _exactly(tol.abs))
    if gold_kind != "dec" and pred_kind != "dec":
        if "irr" in (gold_kind, pred_kind):
            return diff <= Fraction(1, 10**40) * max(abs(gold), abs(pred))
        return diff == 0
    if "int" in (gold_kind, pred_kind):
        return diff == 0
    scale = max(abs(gold), abs(pred))
    return diff <= max(_exactly(tol.rel) * scale, _exactly(tol.abs))


_EXACT = ("int", "exact")


@functools.lru_cache(maxsize=64)
def _exactly(x: float) -> Fraction:
    """A tolerance as written: 1e-6 means exactly 1/10**6, not its binary neighbour."""
    return Fraction(repr(x))
