"""Several answers by structure: two values in one answer that no operator joins into one expression.

    several_values("17〜23")            # True: a hedge, whatever character stands between
    several_values(r"\\frac{17}{23}")   # False: one expression
    several_values("(5,2)")            # False: a tuple (top-level commas were split before)

A list of separators always misses one (`〜`, `∼`, `―`, `…`, `→`, `⇒`, `|`, `@`, `#`, `&`, `?`, or
punctuation of any script). So the rule is the other way round: between two consecutive numbers of a
candidate there must be something that builds one expression (an arithmetic operator or relation, a
letter or a LaTeX command that is not an arrow, dots or a bar, a bracket, a comma inside brackets, a
matrix's `&` and `\\\\` inside an environment) and nothing else but spaces, `|`, `.`, `!`, `%`, `°` and
`'`. Anything else, nothing at all (`17 23`), or an operator that needs a value right after another
operator (`17 \\cdot \\cdot 23`) makes the answer several values (or none).
"""

from __future__ import annotations

import re
import unicodedata

_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
_GAP_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\.|.", re.DOTALL)
_JOINERS = set("+-*/^_=:<>()[]{},;")
_NEUTRAL = set(" |.!%$°'")
_BINARY = {"*", "/", "^", "=", ":", "\\cdot", "\\times", "\\div"}
"""Operators that need a value on both sides: one right after another operator joins nothing."""
_OPERATORS = _BINARY | {"+", "-", "\\pm", "\\mp"}
_SEPARATING_COMMANDS = re.compile(
    r"\\(?:[A-Za-z]*arrow|[lL]ongmapsto|mapsto|implies|impliedby|iff|to|gets|[lcvd]?dots[a-z]*|cdots|ldots|vdots"
    r"|ddots|mid|vert|Vert|lvert|rvert|lVert|rVert|sim|quad|qquad)$")


def several_values(part: str) -> bool:
    """Whether `part` (one candidate, top-level separators split off) states two or more values."""
    numbers = list(_NUMBER_RE.finditer(part))
    in_environment = "\\begin" in part
    return any(not _joined(part[a.end():b.start()], in_environment) for a, b in zip(numbers, numbers[1:]))


def _joined(gap: str, in_environment: bool) -> bool:
    joined, previous = False, ""
    for tok in _GAP_TOKEN_RE.findall(gap):
        kind = _kind(tok, in_environment)
        if kind == "separator" or (tok in _BINARY and previous in _OPERATORS):  # `17 \cdot \cdot 23`: no expression
            return False
        joined = joined or kind == "joiner"
        previous = tok if not tok.isspace() else previous
    return joined


def _kind(tok: str, in_environment: bool) -> str:
    if tok.isspace() or tok in _NEUTRAL or tok in ("\\%", "\\$", "\\!", "\\,", "\\;", "\\ "):
        return "neutral"
    if tok in _JOINERS or tok in ("\\{", "\\}"):
        return "joiner"
    if tok in ("&", "\\&", "\\\\"):
        return "joiner" if in_environment else "separator"
    if tok.startswith("\\") and tok[1:].isalpha():
        return "separator" if _SEPARATING_COMMANDS.match(tok) else "joiner"
    if unicodedata.category(tok[0]).startswith("L"):  # a letter of any script: a variable, a unit, a word
        return "joiner"
    return "separator"
