"""Symbolic equivalence: math-verify, with its known false positives fixed around it.

This module runs inside the verification worker processes (see `pool.py`):
math-verify's own timeout uses SIGALRM, which only works in the main thread, so
we turn it off and let the pool enforce a hard wall-clock limit instead.

What we change, and why:
- the numeric leaf comparison (`grader.sympy_numeric_eq`) evaluates `a - b` with
  `chop=True`, so any two tiny numbers are "equal" (1/2^99 vs 1/2^98). It is
  replaced by `tolerance.numbers_equal`: exact for exact values and integers,
  explicit relative/absolute tolerance for decimals, gold-stated precision for
  approximate golds. math-verify calls the leaf for set, tuple, interval and
  matrix elements too, so the fix reaches them all;
- relations without variables reduce to `lhs - rhs = 0` and so every true
  numeric equation equals every other (`1+1=2` vs `2+2=4`): compare their sides;
- an equation chain `x=1=2=3=5` is truncated to `x=5`: refuse chains that
  contain a false numeric equality;
- a bare symbol gold (`x`) is compared by name only, so `2x/2` was wrong:
  fall back to exact symbolic equality.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import sympy
from math_verify import grader, parse, parser, verify
from sympy import And, Basic, Eq, Float
from sympy.core.relational import Relational

from rlvr.rewards.tolerance import Tolerance, numbers_equal

_original_numeric_eq = grader.sympy_numeric_eq
_original_compare_relational = grader.sympy_compare_relational
_original_compare_symbols = grader.sympy_compare_symbols
_tolerance = Tolerance()  # set per call; a worker verifies one sample at a time


class GoldParseError(ValueError):
    """The gold answer itself does not parse: a data problem, not a model error."""


def _value(x: Basic) -> tuple[Fraction, str] | None:
    """(exact value, kind) of a real number expression, None for anything else."""
    x = grader.safe_sympy_doit(x)
    if not isinstance(x, Basic) or not x.is_number or x.free_symbols:
        return None
    if x.is_Integer:
        return Fraction(int(x)), "int"
    if x.is_Rational:
        return Fraction(int(x.p), int(x.q)), "exact"
    kind = "irr"
    if x.has(Float):
        # A decimal means what it says in decimal: 0.1 is 1/10, not its binary neighbour.
        x = x.xreplace({f: sympy.Rational(str(f)) for f in x.atoms(Float)})
        kind = "dec"
        if x.is_Rational:
            return Fraction(int(x.p), int(x.q)), kind
    v = x.evalf(60)
    if not v.is_real or not v.is_finite:
        return None
    return Fraction(str(v)), kind


def _percent_values(x: Basic) -> list[Basic]:
    """50% may be meant as 0.5 or as 50: try both, as math-verify does."""
    pct = grader.get_pct_val(x)
    return [x] if pct is None else [x, pct]


def numeric_eq(a: Basic, b: Basic, float_rounding: int = 6, numeric_precision: int = 15) -> bool:
    if isinstance(a, (sympy.MatrixBase, sympy.MatrixExpr)) and isinstance(b, (sympy.MatrixBase, sympy.MatrixExpr)):
        return _original_numeric_eq(a, b, float_rounding, numeric_precision)  # recurses into this leaf
    for ga in _percent_values(a):
        for pb in _percent_values(b):
            va, vb = _value(ga), _value(pb)
            if va is not None and vb is not None and numbers_equal(va[0], va[1], vb[0], vb[1], _tolerance):
                return True
    # Non-real numbers (complex) have no order: equal only if they simplify to the same.
    if getattr(a, "is_number", False) and getattr(b, "is_number", False) and (_value(a) is None or _value(b) is None):
        try:
            return sympy.simplify(a - b) == 0
        except Exception:
            return False
    return False


def compare_relational(gold: Relational, pred: Relational, float_rounding: int, numeric_precision: int) -> bool:
    if isinstance(gold, Relational) and isinstance(pred, Relational) \
            and not gold.free_symbols and not pred.free_symbols:
        return type(gold) is type(pred) and grader.sympy_expr_eq(gold.lhs, pred.lhs, float_rounding, numeric_precision) \
            and grader.sympy_expr_eq(gold.rhs, pred.rhs, float_rounding, numeric_precision)
    return _original_compare_relational(gold, pred, float_rounding, numeric_precision)


def compare_symbols(gold: Basic, pred: Basic) -> bool:
    if _original_compare_symbols(gold, pred):
        return True
    try:  # exact: simplify(gold - pred) == 0 cannot equate different values
        return isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr) and grader.sympy_symbolic_eq(gold, pred)
    except Exception:
        return False


def install() -> None:
    missing = [n for n in ("sympy_numeric_eq", "sympy_compare_relational", "sympy_compare_symbols",
                           "get_pct_val", "safe_sympy_doit", "sympy_expr_eq", "sympy_symbolic_eq")
               if not hasattr(grader, n)]
    if missing:
        raise ImportError(f"math-verify {getattr(__import__('math_verify'), '__version__', '?')} lacks "
                          f"{missing}; rlvr.rewards needs math-verify 0.9.x (see pyproject.toml)")
    grader.sympy_numeric_eq = numeric_eq
    grader.sympy_compare_relational = compare_relational
    grader.sympy_compare_symbols = compare_symbols
    # We disable math-verify's signal timeout on purpose (the pool kills hung workers);
    # its one-time "timeout is disabled" warning would only be noise.
    grader.TIMEOUT_WARNING_SHOWN = True
    parser.TIMEOUT_WARNING_SHOWN = True


@functools.lru_cache(maxsize=4096)
def parse_answer(text: str) -> tuple:
    return tuple(parse(f"${text}$", parsing_timeout=None))


def _false_numeric_equality(expr: Basic) -> bool:
    """`x=1=2=3=5` parses to Eq(x,1) & Eq(1,2) & ...; any false numeric link refutes it."""
    links = expr.args if isinstance(expr, And) else (expr,)
    for link in links:
        if isinstance(link, Eq) and not link.free_symbols:
            if not numeric_eq(link.lhs, link.rhs):
                return True
    return False


def verify_sample(gold: str, decimals: int | None, preds: list[str], rel_tol: float, abs_tol: float) -> tuple[bool, str | None]:
    """Is every candidate answer equivalent to the gold? Returns (correct, flag)."""
    global _tolerance
    install()
    _tolerance = Tolerance(rel_tol, abs_tol, decimals)
    g = parse_answer(gold)
    if not g or not _is_math(g[0]):
        raise GoldParseError(f"gold answer {gold!r} does not parse as mathematics")
    for pred in preds:
        q = parse_answer(pred)
        if not q or not _is_math(q[0]):
            # math-verify would fall back to comparing raw strings; an answer we cannot
            # read is a parse failure, never a string match.
            return False, "parse_failed"
        if isinstance(q[0], Basic) and _false_numeric_equality(q[0]):
            return False, "false_equation"
        if not verify([g[0]], [q[0]], timeout_seconds=None):
            return False, None
    return True, None


def _is_math(x: object) -> bool:
    return isinstance(x, (Basic, sympy.MatrixBase))
