"""The `calculator` tool: exact arithmetic on rationals, with bounded sizes (model input is hostile)."""

from __future__ import annotations

import ast
import operator
import warnings
from decimal import Decimal, localcontext
from fractions import Fraction

MAX_CHARS = 200
MAX_DIGITS = 1000
MAX_BITS = 3322  # ~ 1000 decimal digits
_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > 10_000:
                raise ValueError("exponents must be integers of at most 10000")
            size = max(abs(left.numerator).bit_length(), left.denominator.bit_length())
            if size > 1 and int(abs(right)) * size > MAX_BITS:  # decided before the power is computed
                raise ValueError(f"the result would have more than {MAX_DIGITS} digits")
            return _bounded(left ** int(right))
        if type(node.op) in _BINOPS:
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise ZeroDivisionError("division by zero")
            return _bounded(Fraction(_BINOPS[type(node.op)](left, right)))
    raise ValueError("only numbers, + - * / // % ** and parentheses")


def _bounded(v: Fraction) -> Fraction:
    if max(abs(v.numerator).bit_length(), v.denominator.bit_length()) > MAX_BITS:
        raise ValueError(f"the result has more than {MAX_DIGITS} digits")
    return v


def _show(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    d = v.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d == 1:  # a terminating decimal: written out exactly
        with localcontext() as ctx:
            ctx.prec = 3 * MAX_DIGITS
            return format(Decimal(v.numerator) / Decimal(v.denominator), "f")
    return f"{v.numerator}/{v.denominator}"


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, for example (482193*3951)/7.
    """
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("^", "**")
    if len(text) > MAX_CHARS:
        raise ValueError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        with warnings.catch_warnings():  # Python's warnings about the model's text ('12x'): not the log's business
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expression!r} as arithmetic") from None
    return _show(_eval(tree.body))
