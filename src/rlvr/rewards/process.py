"""Process check: the fraction of worked equalities in the reasoning that are true.

`12+345: 2+5=7, 1+4=5, 0+3=3` has three checkable equalities, all true: 1.0.
Only arithmetic on numbers is checked (exact, with fractions); a step that uses
variables is not counted either way.
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction

_NUM = r"\(?-?\d+(?:\.\d+)?\)?"
_OP = r"\s*[-+*/×÷·]\s*"
_EXPR = rf"{_NUM}(?:{_OP}{_NUM})*"
# a chain `E = E (= E)*` not glued to letters or other digits (so `x=3` and dates are skipped)
_CHAIN_RE = re.compile(rf"(?<![\w.=]){_EXPR}(?:\s*=\s*{_EXPR})+(?![\w.])")
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left), _eval(node.right))
    raise ValueError("not arithmetic")


def _value(expr: str) -> Fraction | None:
    expr = expr.replace("×", "*").replace("·", "*").replace("÷", "/")
    if len(expr) > 200:
        return None  # keep this linear-time and cheap on the hot path
    try:
        return _eval(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def equality_checks(reasoning: str) -> tuple[int, int]:
    """(true, checked) over adjacent sides of every arithmetic equality chain
    that has an operator on at least one side."""
    true = checked = 0
    for m in _CHAIN_RE.finditer(reasoning):
        sides = m.group(0).split("=")
        for a, b in zip(sides, sides[1:]):
            if not re.search(r"\d\s*[-+*/×÷·]", a + "|" + b):
                continue
            va, vb = _value(a), _value(b)
            if va is None or vb is None:
                continue
            checked += 1
            true += va == vb
    return true, checked


def process_score(text: str) -> tuple[float, int]:
    """(fraction of true equalities, number checked); 0.0 when nothing is checkable,
    so the component cannot be earned by writing no work at all."""
    m = re.search(r"<think>(.*?)</think>", text, re.DOTALL)
    true, checked = equality_checks(m.group(1) if m else text)
    return (true / checked if checked else 0.0), checked
