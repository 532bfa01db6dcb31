"""Several answers by structure: two values in one answer that no operator joins into one expression.

    several_values("17〜23")            # True: a hedge, whatever character stands between
    several_values(r"\\frac{17}{23}")   # False: one expression
    several_values("(5,2)")            # False: a tuple (top-level commas were split before)

A list of separators always misses one (`〜`, `∼`, `―`, `…`, `→`, `⇒`, `|`, `@`, `#`, `&`, `?`, or
punctuation of any script). So the rule is the other way round: between two consecutive numbers of a
candidate there must be something that builds one expression (an arithmetic operator or relation, a
Latin or Greek letter or a Chinese character, a LaTeX command of _JOINING_COMMANDS, a bracket, a
comma inside brackets, a matrix's `&` and `\\\\` inside its environment) and nothing else but spaces,
`|`, `.`, `!`, `%`, `$`, `\\cup`, `\\cap`. Anything else (a degree sign or a prime too: `30°15'` is
refused), nothing at all (`17 23`), or an operator that needs a value right after another operator
(`17 \\cdot \\cdot 23`) makes the answer several values (or none).
"""

from __future__ import annotations

import re

_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
_ENVIRONMENT_RE = re.compile(r"\\begin\{([A-Za-z*]+)\}.*?\\end\{\1\}", re.DOTALL)  # answers are short (capped)
_GAP_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\.|.", re.DOTALL)
_JOINERS = set("+-*/^_=:<>()[]{},;")
_NEUTRAL = set(" |.!%$") | {"\\cup", "\\cap", "\\setminus"}
"""Neither joins nor separates: `(2,12) \\cup (12,102)` is joined by its brackets, `17 \\cup 23` by nothing."""
_BINARY = {"*", "/", "^", "=", ":", "\\cdot", "\\times", "\\div"}
"""Operators that need a value on both sides: one right after another operator joins nothing."""
_OPERATORS = _BINARY | {"+", "-", "\\pm", "\\mp"}
_JOINING_COMMANDS = re.compile(
    r"\\(?:[dt]?frac|sqrt|cdot|times|div|pm|mp|ast|binom|[dt]binom|choose|over|mod|bmod|pmod|log|ln|lg|exp|"
    r"(?:arc)?(?:sin|cos|tan|cot|sec|csc)h?|max|min|gcd|lcm|det|left|right|[bB]ig+[lr]?|overline|bar|hat|vec|"
    r"dot|ddot|prime|circ|degree|angle|triangle|infty|pi|e|i|mathbf|mathit|boldsymbol|operatorname|approx|"
    r"le|ge|leq|geq|ne|neq|lt|gt|equiv|cong|propto|begin|end|"
    r"alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|rho|"
    r"sigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Pi|Sigma|Phi|Psi|Omega)$"
)
"""Commands that build one expression from what stands beside them (operators, functions, accents,
variables). Any other command joins nothing (`17 \\star 23`, `17 \\Rightarrow 23`): several values."""


def several_values(part: str) -> bool:
    """Whether `part` (one candidate, top-level separators split off) states two or more values."""
    numbers = list(_NUMBER_RE.finditer(part))
    spans = [m.span() for m in _ENVIRONMENT_RE.finditer(part)] if "\\begin" in part else []
    return any(
        not _joined(part[a.end() : b.start()], any(s <= a.end() and b.start() <= e for s, e in spans))
        for a, b in zip(numbers, numbers[1:])
    )


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
        return "joiner" if _JOINING_COMMANDS.match(tok) else "separator"
    if tok.isalpha() and (tok.isascii() or "\u0370" <= tok <= "\u03ff" or "\u3400" <= tok <= "\u9fff"):
        return "joiner"  # a Latin or Greek letter (a variable, a unit), a Chinese character (a unit, a scale)
    return "separator"  # a word of another script (`или`, `または`) is no mathematics
