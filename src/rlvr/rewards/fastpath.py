"""The fast path: answers simple enough to compare exactly without sympy or a worker.

Plain numbers (integers, decimals, a/b, \\frac{a}{b}), simple radicals
(c\\sqrt{n}/d), `x = <number>`, sets, tuples and intervals of those cover most
answers of arithmetic, GSM8K-style and many MATH problems. They get the same
verdict math-verify (with our fixes) would give, at a hundredth of the cost;
anything else returns None and goes to the worker pool. A given input always
takes the same path, so scores stay deterministic. Percent signs and units never
reach here: rlvr.rewards.answers reads them off, and a unit conversion arrives as
a Plan applied to the prediction's value.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from math import isqrt

from rlvr.rewards.answers import Cand, text_key
from rlvr.rewards.tolerance import Tolerance, numbers_equal
from rlvr.rewards.units import IDENTITY, PERCENT_LIKE, Plan, plans

_NUM_RE = re.compile(
    r"^(-?)(?:(\d{1,1000})(\.\d{1,1000})?|(\d{1,1000})/(\d{1,1000})|\\[dt]?frac\{(\d{1,1000})\}\{(\d{1,1000})\}"
    r"|\.(\d{1,1000}))$"
)
_ASSIGN_RE = re.compile(r"^([a-zA-Z])=(.+)$")
_SET_RE = re.compile(r"^\\\{(.*)\\\}$")
_SEQ_RE = re.compile(r"^([(\[])(.*,.*)([)\]])$")
_RADICAL_RE = re.compile(
    r"^(-?)(?:(\d*)\\sqrt\{(\d+)\}(?:/(\d+))?"  # c\sqrt{n}, c\sqrt{n}/d
    r"|\\[dt]?frac\{(\d*)\\sqrt\{(\d+)\}\}\{(\d+)\}"  # \frac{c\sqrt{n}}{d}
    r"|\\[dt]?frac\{(\d+)\}\{\\sqrt\{(\d+)\}\})$"
)  # \frac{c}{\sqrt{n}}
_MAX_RADICAND = 10**8  # square-free reduction by trial division stays cheap

Number = tuple[Fraction, str]  # (value, kind for numbers_equal)
Radical = tuple[Fraction, int]  # q * sqrt(m), m > 1 square-free


def _reduce(q: Fraction, n: int) -> Radical | Fraction | None:
    """q * sqrt(n) with the square factors of n moved into q; a Fraction when rational."""
    if n > _MAX_RADICAND:
        return None
    m, f = n, 2
    while f * f <= m:
        while m % (f * f) == 0:
            m //= f * f
            q *= f
        f += 1
    return q if m == 1 or q == 0 else (q, m)


def radical(s: str) -> Radical | Fraction | None:
    m = _RADICAL_RE.match(re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s))
    if not m:
        return None
    sign, c1, n1, d1, c2, n2, d2, c3, n3 = m.groups()
    if n1 is not None:
        q, n = Fraction(int(c1 or 1), int(d1 or 1)), int(n1)
    elif n2 is not None:
        q, n = Fraction(int(c2 or 1), int(d2)), int(n2)
    else:
        if int(n3) == 0:
            return None
        q, n = Fraction(int(c3), int(n3)), int(n3)  # c/sqrt(n) = c*sqrt(n)/n
    return _reduce(-q if sign else q, n)


def _approx(r: Radical) -> Fraction:
    """q * sqrt(m) to 50 digits, for comparison with a decimal."""
    q, m = r
    return q * Fraction(isqrt(m * 10**100), 10**50)


def plain_number(s: str) -> Number | None:
    m = _NUM_RE.match(s.replace(" ", ""))
    if not m:
        return None
    sign, whole, dec, num, den, fnum, fden, bare_dec = m.groups()
    if whole is not None:
        val, kind = Fraction(whole + (dec or "")), ("int" if dec is None else "dec")
    elif bare_dec is not None:
        val, kind = Fraction("0." + bare_dec), "dec"
    else:
        n, d = (num, den) if num is not None else (fnum, fden)
        if int(d) == 0:
            return None
        val, kind = Fraction(int(n), int(d)), "exact"
    return (-val if sign else val), kind


def _num_equal(g: Number, p: Number, tol: Tolerance) -> bool:
    return numbers_equal(g[0], g[1], p[0], p[1], tol)


def _apply(plan: Plan, v: object) -> object | None:
    """The prediction's value read in the gold's unit: v * mul + add."""
    mul, add, inexact = plan
    if plan == IDENTITY or v is None:
        return v
    if v[0] == "rad":  # type: ignore[index]
        q, m = v[1]  # type: ignore[index]
        return None if add or inexact else ("rad", (q * mul, m))
    value, kind = v  # type: ignore[misc]
    value = value * mul + add
    kind = "conv" if inexact else ("exact" if kind == "int" and value.denominator != 1 else kind)
    return value, kind


def _value(s: str) -> Number | tuple[str, Radical] | None:
    n = plain_number(s)
    if n is not None:
        return n
    r = radical(s)
    if isinstance(r, Fraction):  # \sqrt{4} is the integer 2
        return r, ("int" if r.denominator == 1 else "exact")
    return ("rad", r) if r is not None else None


@functools.lru_cache(maxsize=65536)
def _parse(s: str) -> tuple[str, object] | None:
    """('num', value) | ('assign', (var, value)) | ('set', [Number]) | ('seq', ...) | None."""
    s = s.replace(" ", "")
    v = _value(s)
    if v is not None:
        return "num", v
    m = _ASSIGN_RE.match(s)
    if m:
        v = _value(m.group(2))
        return ("assign", (m.group(1), v)) if v is not None else None
    m = _SET_RE.match(s)
    if m and m.group(1):
        items = [plain_number(x) for x in m.group(1).split(",")]
        if all(i is not None for i in items):
            return "set", items
    m = _SEQ_RE.match(s)
    if m:
        items = [plain_number(x) for x in m.group(2).split(",")]
        if all(i is not None for i in items):
            return "seq", (m.group(1) + m.group(3), items)
    return None


def _set_equal(g: list[Number], p: list[Number], tol: Tolerance) -> bool:
    gs = sorted({x[0]: x for x in g}.values())
    ps = sorted({x[0]: x for x in p}.values())
    return len(gs) == len(ps) and all(_num_equal(a, b, tol) for a, b in zip(gs, ps))


def _value_equal(g: object, p: object, tol: Tolerance) -> bool:
    g_rad, p_rad = g[0] == "rad", p[0] == "rad"  # type: ignore[index]
    if not g_rad and not p_rad:
        return _num_equal(g, p, tol)  # type: ignore[arg-type]
    if g_rad and p_rad:
        return g[1] == p[1]  # type: ignore[index]  # canonical forms: exact
    r, n = (g[1], p) if g_rad else (p[1], g)  # type: ignore[index]
    return (
        numbers_equal(_approx(r), "irr", n[0], n[1], tol)
        if g_rad
        else numbers_equal(n[0], n[1], _approx(r), "irr", tol)
    )  # type: ignore[index]


_BASED_RE = re.compile(r"^([0-9A-Za-z]+)_\{?(\d+)\}?$")


def _based(s: str) -> int | None:
    """The value of a numeral written in a base, `1011_2` or `12_{15}`; -1 when its digits do
    not fit the base; None when it is not such a numeral."""
    m = _BASED_RE.match(s.replace(" ", ""))
    if not m or not m.group(1)[0].isdigit():
        return None
    base = int(m.group(2))
    try:
        return int(m.group(1), base) if 2 <= base <= 36 else -1
    except ValueError:
        return -1


def fast_equal(gold: str, pred: str, tol: Tolerance, plan: Plan = IDENTITY) -> bool | None:
    """The verdict for simple answers; None when math-verify must decide. `plan` converts
    the prediction's value into the gold's unit (rlvr.rewards.units). A numeral in a base
    (`12_{15}`) equals only the same value written in the same base (math-verify drops
    the subscript)."""
    gb, pb = (_based(gold), _based(pred)) if "_" in gold or "_" in pred else (None, None)
    if gb is not None or pb is not None:
        same_base = (
            _BASED_RE.match(gold.replace(" ", ""))
            and _BASED_RE.match(pred.replace(" ", ""))
            and int(_BASED_RE.match(gold.replace(" ", "")).group(2))
            == int(_BASED_RE.match(pred.replace(" ", "")).group(2))
        )
        return bool(same_base and gb == pb and gb != -1 and plan == IDENTITY)
    g, p = _parse(gold), _parse(pred)
    if g is None or p is None:
        return None
    (gk, gv), (pk, pv) = g, p
    if plan != IDENTITY:
        if pk in ("set", "seq"):
            return None
        pv = (pv[0], _apply(plan, pv[1])) if pk == "assign" else _apply(plan, pv)  # type: ignore[index]
        if pv is None or (pk == "assign" and pv[1] is None):  # type: ignore[index]
            return None
    if gk in ("set", "seq") or pk in ("set", "seq"):
        if gk != pk:
            other = gv if pk in ("set", "seq") else pv
            structure = pv if pk in ("set", "seq") else gv
            items = structure if isinstance(structure, list) else structure[1]  # type: ignore[index]
            if len(items) > 1 and (gk == "num" or pk == "num") and other is not None:
                return False  # several numbers are never one number
            return None
        if gk == "set":
            return _set_equal(gv, pv, tol)  # type: ignore[arg-type]
        (gb, gi), (pb, pi) = gv, pv  # type: ignore[misc]
        if gb != pb:
            return None  # (1,2) vs [1,2): interval or tuple? math-verify decides
        return len(gi) == len(pi) and all(_num_equal(a, b, tol) for a, b in zip(gi, pi))
    if gk == pk == "assign":
        if gv[0] != pv[0]:  # type: ignore[index]
            return None  # x=1 vs y=1: math-verify's relational rules decide
        return _value_equal(gv[1], pv[1], tol)  # type: ignore[index]
    # a number against `x = number`: math-verify compares the right-hand side
    gn = gv[1] if gk == "assign" else gv  # type: ignore[index]
    pn = pv[1] if pk == "assign" else pv  # type: ignore[index]
    return _value_equal(gn, pn, tol)


def scaled(plan: Plan, gold: Cand, pred: Cand) -> Plan:
    """`plan` with both candidates' scale words folded in: gold * g.scale = pred * p.scale * mul + add."""
    if gold.scale == pred.scale == 1:
        return plan
    mul, add, inexact = plan
    return Fraction(mul) * pred.scale / gold.scale, Fraction(add) / gold.scale, inexact


_AT_LEAST_ONE_RE = re.compile(r"-?[1-9]\d*(?:\.\d+)?")


def readings(gold: Cand, pred: Cand) -> tuple[Plan, ...]:
    """The unit readings of a pred against a gold (rlvr.rewards.units.plans), and two rules more: a
    value whose words were read as a label has none against a gold with a unit; a percentage is read
    as written against a bare gold only when that gold is a plain number of at least 1 (`25%` for
    `25`, MATH's convention; `0.2%` is never `0.2`, as math-verify holds)."""
    if pred.label and gold.unit is not None:  # what the label names is not the gold's unit
        return ()
    out = plans(gold.unit, pred.unit)
    if gold.unit is None and pred.unit in PERCENT_LIKE and not _AT_LEAST_ONE_RE.fullmatch(gold.text):
        return tuple(p for p in out if p != IDENTITY)
    return out


def cand_equal(gold: Cand, pred: Cand, rel_tol: float, abs_tol: float) -> bool | None:
    """Equal under some reading of their units (rlvr.rewards.units.plans), decided here; None
    when a reading needs math-verify. No reading at all (different dimensions): False.
    Words are compared as text, here: never equal to mathematics."""
    if gold.textual or pred.textual:
        return gold.textual and pred.textual and gold.unit == pred.unit and text_key(gold.text) == text_key(pred.text)
    tol = Tolerance(rel_tol, abs_tol, gold.decimals)
    out: bool | None = False
    for plan in readings(gold, pred):
        v = fast_equal(gold.text, pred.text, tol, scaled(plan, gold, pred))
        if v:
            return True
        if v is None:
            out = None
    return out
