"""Process reward: the reasoning scored step by step, then aggregated.

A scorer maps the reasoning's steps to one score each (None: not checkable); the component is
their minimum (`reward.process.aggregate=min`, the default: a derivation is as sound as its
weakest step, and one wrong step should cost the whole chain, as in step-level verification,
Lightman et al. 2023, arXiv:2305.20050) or their mean. No checkable step scores 0, so the
component cannot be earned by writing no work at all.

The built-in scorer, 'arithmetic', takes each worked equality as a step: `12+345: 2+5=7, 1+4=5,
0+3=3` has three, all true. Only arithmetic on numbers is checked (exact, with fractions); a step
that uses variables is not counted either way. A true step earns 1 only when it works on this
problem with what it actually uses: numbers of the prompt or results of earlier steps, or the two
digits of one column of the prompt's numbers (a short number padded with 0; carries from earlier
results beside them), or a number of the prompt times a digit of another (a partial product).
`1+1=2` or `0+0=0` written into any answer is true but grounded in nothing, and scores 0 unless a
column of the prompt's numbers holds those digits; an equality the prompt states already, and one
true whatever the numbers (`12*1=12`, `12-12=0`), is not a step at all. Any other scorer is a function 'module:name' taking
(steps, problem), the steps being the reasoning's non-empty lines.
"""

from __future__ import annotations

import ast
import itertools
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


_INT_RE = re.compile(r"\d+(?:\.\d+)?")
_OPERATION_RE = re.compile(r"\d\s*[-+*/×÷·]")
MAX_COLUMN_OPERANDS = 6
"""A column step adds two digits and its carries; more operands than this is no column step."""


def _digits(number: str) -> set[str]:
    return {d for d in number if d.isdigit()}


def _columns(numbers: list[str]) -> set[tuple[str, str]]:
    """The digit pairs that column arithmetic on two of `numbers` meets (place by place, a short
    number padded with 0): `12` and `345` give (2, 5), (1, 4), (0, 3)."""
    whole = [n for n in dict.fromkeys(numbers) if n.isdigit()]
    out = set()
    for i, a in enumerate(whole):
        for b in whole[i + 1 :]:
            width = max(len(a), len(b))
            out |= {tuple(sorted(p)) for p in zip(a.zfill(width), b.zfill(width))}
    return out


def _grounded(
    operands: list[str], wholes: set[str], carries: set[str], columns: set[tuple[str, str]], prompt_digits: set[str]
) -> bool:
    """Whether a step works on this problem: its operands are quantities of the prompt or results of
    earlier steps, or the two digits one column of the prompt's numbers holds (with carries from
    earlier results), or a number of the prompt times one digit of another (a partial product)."""
    nonzero = [x for x in operands if float(x) != 0]
    if not nonzero:
        return False
    if all(x in wholes for x in nonzero):
        return True
    if len(operands) <= MAX_COLUMN_OPERANDS:  # a column's two digits, the rest carries
        for i, j in itertools.combinations(range(len(operands)), 2):
            if tuple(sorted((operands[i], operands[j]))) in columns and all(
                x in carries for k, x in enumerate(operands) if k not in (i, j)
            ):
                return True
    return len(operands) == 2 and any(x in wholes for x in operands) and any(x in prompt_digits for x in operands)


def _trivial(operands: list[str], value: Fraction, worked: str) -> bool:
    """True whatever the numbers: `12*1=12`, `12+0=12`, `12-12=0`, `12*0=0` (not a step of any work)."""
    values = [Fraction(x) for x in operands]
    product = any(op in worked for op in "*/×÷·")
    if product and (1 in values and value in values or 0 in values and value == 0):
        return True
    if 0 in values and value in values and any(len(x) > 1 for x in operands if float(x) != 0):
        return True  # `12+0=12`; `0+3=3` pads a short column
    return value == 0 and "-" in worked and len(values) == 2 and values[0] == values[1]  # `12-12=0`


def _key(a: str, b: str) -> str:
    return re.sub(r"\s+", "", f"{a}={b}")


def _equalities(text: str) -> set[str]:
    """The equalities `text` states, each as its two sides (whole expressions, not substrings)."""
    out = set()
    for m in _CHAIN_RE.finditer(re.sub(r"\.(?=\s|$)", " ", text)):  # `6*7=42.` ends a sentence
        sides = m.group(0).split("=")
        out |= {_key(a, b) for a, b in zip(sides, sides[1:])}
    return out


def arithmetic_steps(reasoning: str, prompt: str = "") -> list[float]:
    """One score per checked equality (adjacent sides of a chain with an operator on one side):
    1 when true and grounded (see _grounded), else 0. An equality the prompt states already is
    not a step: restating it earns nothing, though its result may ground later steps."""
    numbers = _INT_RE.findall(prompt)
    wholes, carries, columns = set(numbers), set(), _columns(numbers)
    prompt_digits = {d for n in numbers for d in _digits(n)}
    stated = _equalities(prompt)
    scores = []
    for m in _CHAIN_RE.finditer(reasoning):
        sides = m.group(0).split("=")
        for a, b in zip(sides, sides[1:]):
            if not _OPERATION_RE.search(a + "|" + b):
                continue
            va, vb = _value(a), _value(b)
            if va is None or vb is None:
                continue
            worked = a if _OPERATION_RE.search(a) else b  # the side with the operation
            operands = _INT_RE.findall(worked)
            if _key(a, b) not in stated and not (va == vb and _trivial(operands, va, worked)):
                grounded = _grounded(operands, wholes, carries, columns, prompt_digits)
                scores.append(1.0 if va == vb and grounded else 0.0)
            for side in (a, b):
                found = _INT_RE.findall(side)
                wholes |= set(found)
                carries |= {d for n in found for d in _digits(n)}
    return scores


def reasoning_of(text: str) -> str:
    m = re.search(r"<think>(.*?)</think>", text, re.DOTALL)
    return m.group(1) if m else text


def _prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


def process_score(text: str, problem=None, scorer=None, aggregate: str = "min") -> tuple[float, int]:
    """(aggregated step score, steps checked): `scorer(steps, problem)` (default: the arithmetic
    equalities of the reasoning, grounded in the problem's prompt); 0.0 when nothing is checkable."""
    reasoning = reasoning_of(text)
    if scorer is None:
        scores = arithmetic_steps(reasoning, _prompt_text(problem.prompt) if problem is not None else "")
    else:
        steps = [line.strip() for line in reasoning.splitlines() if line.strip()]
        scores = [float(s) for s in scorer(steps, problem) if s is not None]
    if not scores:
        return 0.0, 0
    return (min(scores) if aggregate == "min" else sum(scores) / len(scores)), len(scores)
