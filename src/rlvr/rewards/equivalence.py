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

from rlvr.rewards.answers import Cand, Parsed, judge
from rlvr.rewards.fastpath import cand_equal, readings, scaled
from rlvr.rewards.tolerance import Tolerance, numbers_equal
from rlvr.rewards.units import preload

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


def numeric_eq(a: Basic, b: Basic, float_rounding: int = 6, numeric_precision: int = 15) -> bool:
    if isinstance(a, (sympy.MatrixBase, sympy.MatrixExpr)) and isinstance(b, (sympy.MatrixBase, sympy.MatrixExpr)):
        return _original_numeric_eq(a, b, float_rounding, numeric_precision)  # recurses into this leaf
    # A percentage inside a structure is its value (50% is 0.5, never 50): math-verify's
    # parse keeps X% as X * 1/100, which _value evaluates.
    va, vb = _value(a), _value(b)
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
    if (
        isinstance(gold, Relational)
        and isinstance(pred, Relational)
        and not gold.free_symbols
        and not pred.free_symbols
    ):
        return (
            type(gold) is type(pred)
            and grader.sympy_expr_eq(gold.lhs, pred.lhs, float_rounding, numeric_precision)
            and grader.sympy_expr_eq(gold.rhs, pred.rhs, float_rounding, numeric_precision)
        )
    return _original_compare_relational(gold, pred, float_rounding, numeric_precision)


def compare_symbols(gold: Basic, pred: Basic) -> bool:
    if _original_compare_symbols(gold, pred):
        return True
    try:  # exact: simplify(gold - pred) == 0 cannot equate different values
        return isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr) and grader.sympy_symbolic_eq(gold, pred)
    except Exception:
        return False


def install() -> None:
    missing = [
        n
        for n in (
            "sympy_numeric_eq",
            "sympy_compare_relational",
            "sympy_compare_symbols",
            "get_pct_val",
            "safe_sympy_doit",
            "sympy_expr_eq",
            "sympy_symbolic_eq",
        )
        if not hasattr(grader, n)
    ]
    if missing:
        raise ImportError(
            f"math-verify {getattr(__import__('math_verify'), '__version__', '?')} lacks "
            f"{missing}; rlvr.rewards needs math-verify 0.9.x (see pyproject.toml)"
        )
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


def _sympy_number(x: Fraction, inexact: bool) -> Basic:
    return sympy.Float(str(float(x)), 17) if inexact else sympy.Rational(x.numerator, x.denominator)


def _equal(gold: Cand, pred: Cand, rel_tol: float, abs_tol: float, flags: list[str], fast: bool) -> bool:
    """gold == pred under some reading of their units, by math-verify (after the fast path)."""
    global _tolerance
    verdict = cand_equal(gold, pred, rel_tol, abs_tol) if fast else None
    if verdict is not None:
        return verdict
    if not readings(gold, pred):
        return False
    _tolerance = Tolerance(rel_tol, abs_tol, gold.decimals)
    g = parse_answer(gold.text)
    if not g or not _is_math(g[0]):
        raise GoldParseError(f"gold answer {gold.text!r} does not parse as mathematics")
    q = parse_answer(pred.text)
    if not q or not _is_math(q[0]):
        # math-verify would fall back to comparing raw strings; an answer we cannot
        # read is a parse failure, never a string match.
        flags.append("parse_failed")
        return False
    if isinstance(q[0], Basic) and _false_numeric_equality(q[0]):
        flags.append("false_equation")
        return False
    for plan in readings(gold, pred):
        mul, add, inexact = scaled(plan, gold, pred)
        value = q[0]
        if (mul, add) != (1, 0):
            if not isinstance(value, sympy.Expr) or isinstance(value, Relational):
                continue
            value = value * _sympy_number(mul, inexact) + _sympy_number(add, inexact)
            if inexact:  # a rounded factor: compare the numbers within rel_tol, whatever their kinds
                vg, vp = _value(g[0]), _value(value)
                if vg is not None and vp is not None:
                    if numbers_equal(vg[0], vg[1], vp[0], "conv", _tolerance):
                        return True
                    continue
        exact = polynomial_verdict(g[0], value)
        if exact is not None:
            if exact:
                return True
            continue
        if verify([g[0]], [value], timeout_seconds=None):
            return True
    return False


_MAX_EXPAND_DEGREE = 64


def polynomial_verdict(gold: Basic, pred: Basic) -> bool | None:
    """Equal or not, decided exactly when both are polynomials with rational coefficients (the
    expanded difference is 0 or it is not); None for anything else, which math-verify decides.
    Expanding is milliseconds where math-verify's simplify takes tens (`(x+459)^2` against
    `x^2 + 918x + 210681`)."""
    if (
        not isinstance(gold, sympy.Expr)
        or not isinstance(pred, sympy.Expr)
        or isinstance(gold, Relational)
        or isinstance(pred, Relational)
    ):
        return None
    symbols = gold.free_symbols | pred.free_symbols
    if not symbols or gold.has(Float, sympy.UnevaluatedExpr) or pred.has(Float, sympy.UnevaluatedExpr):
        return None
    diff = gold - pred
    if any(p.exp.is_Integer and abs(int(p.exp)) > _MAX_EXPAND_DEGREE for p in diff.atoms(sympy.Pow)):
        return None
    if not diff.is_polynomial(*symbols):
        return None
    expanded = sympy.expand(diff)
    if not all(n.is_Rational for n in expanded.atoms(sympy.Number)) or expanded.atoms(sympy.NumberSymbol):
        return None
    return expanded == 0


def judge_sample(
    gold: Parsed, pred: Parsed, rel_tol: float, abs_tol: float, conversions: tuple = (), fast: bool = True
) -> tuple[bool, str | None]:
    """The verdict on one completion (rlvr.rewards.answers.judge with math-verify behind the fast
    path): (correct, flag). `conversions` are the unit conversions it needs, computed by the caller;
    `fast=False` skips the fast path (to test that the two agree)."""
    install()
    preload(dict(conversions))
    flags: list[str] = []
    ok, flag = judge(gold, pred, lambda g, p: _equal(g, p, rel_tol, abs_tol, flags, fast))
    return bool(ok), flag or (flags[0] if flags and not ok else None)


def _is_math(x: object) -> bool:
    return isinstance(x, (Basic, sympy.MatrixBase))
