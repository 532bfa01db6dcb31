"""What an answer states: its candidate values with their units, or why it cannot be graded.

    gold = analyse(r"2000 \\text{ m}", trusted=True)   # Parsed(cands=(Cand('2000', 'meter'),))
    pred = analyse(r"2 \\text{ km}")                    # Parsed(cands=(Cand('2', 'kilometer'),))
    judge(gold, pred, eq)                              # (True, None); eq compares two Cands

One notion for each way an answer can say more (or less) than one value, applied
to golds and predictions alike and decided without looking at the gold:

- **Several candidates.** Every list separator and range form, Latin and CJK, at the
  top level (not inside brackets): `,` `;` `、` `，` `or` `and` `或` `和` `\\lor`, ranges
  `\\sim` `~` `–` `to` `至` `到`, `\\pm`, a set `\\{a, b\\}`. A gold of one value needs every
  candidate to equal it; a gold of several needs the same set.
- **A relation that is not equality** (`\\ne` `<` `\\le` `\\in` ≠ ≤ "not" "at least" 不 大于 ...):
  never equal to a value; only a gold that is itself a relation or an interval compares with it.
- **Hedge words** ("maybe", "one of", 可能): several answers in disguise.
- **Values no operator joins** (`17〜23`, `17→23`, `17|23`): several answers, whatever stands
  between them (rlvr.rewards.hedges).
- **Units** are read with pint and compared, never dropped (see rlvr.rewards.units);
  scale words multiply (`6 thousand`, `3万`); a word after a number that is no unit is
  allowed only as a count label naming what the problem counts (`12 apples` where the
  prompt says apples); any other word makes the answer unreadable (`6 is wrong`).
- **Approximations**: `A \\approx B` states A, and B must agree with A at B's precision.

Everything here is linear in the answer's length (answers are capped upstream).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction

from rlvr.rewards.canonical import SPACES_RE, canonical
from rlvr.rewards.braces import brace_pairs
from rlvr.rewards.extract import MULTIPLE_ANSWERS, PARSE_FAILED
from rlvr.rewards.hedges import several_values
from rlvr.rewards.units import cjk_unit, names_a_unit, parse_unit

RELATION = "relation"
WORDS = "words"
MAX_CANDIDATES = 64
MAX_DEPTH = 64
"""Brackets nested deeper than this make an answer unreadable (parse_failed), not something to parse."""


@dataclass(frozen=True)
class Cand:
    """One value an answer states."""

    text: str
    """The mathematical expression, without unit, percent sign or scale word."""
    unit: str | None = None
    """pint's canonical name of the unit ('kilometer', 'percent', 'dollar'); None: a bare value."""
    scale: Fraction | int = 1
    """Scale words multiply the value: `6 thousand` is Cand('6', scale=1000)."""
    decimals: int | None = None
    """Stated to this many decimals (an approximate gold, or B in `A \\approx B`): compare at that precision."""
    approx: Cand | None = None
    """`A \\approx B`: B, which must agree with A at its own precision."""
    textual: bool = False
    """Words, not mathematics (`Monday`, `\\text{no solution}`): compared as text (case, spaces and
    brackets aside), here, never by math-verify (whose parser reads words as products of symbols)."""
    label: bool = False
    """Words after the value were read as a label (what it counts) and dropped: such a value is never
    read in a gold's unit (`5 \\text{ leagues}` is not `5 km`, `5 \\text{ grand}` not `\\$5`)."""


@dataclass(frozen=True)
class Parsed:
    cands: tuple[Cand, ...] = ()
    flag: str | None = None
    """None, or why the answer cannot score: PARSE_FAILED, RELATION, WORDS, MULTIPLE_ANSWERS (hedge words)."""
    relation: bool = False
    """It states a relation other than equality (for a gold: or an interval, which a relation may describe)."""


@dataclass(frozen=True)
class Context:
    """What the problem allows as a count label after a number: the words of its prompt."""

    words: frozenset[str] = frozenset()
    text: str = field(default="", compare=False, hash=False)
    key: str = ""
    """The prompt itself, which is what makes two contexts the same."""


# --- relations, hedges, separators ----------------------------------------------------------

_RELATION_RE = re.compile(
    r"\\(?:ne|neq|not|lt|gt|le|leq|leqq|leqslant|ge|geq|geqq|geqslant|ll|gg|nless|ngtr|nleq|ngeq|lesssim|gtrsim"
    r"|in|notin|ni|subset|subseteq|supset|supseteq|prec|succ|nsim|ncong|neg|lnot|cancel|bcancel|xcancel|sout)(?![a-zA-Z])"
    r"|[<>≠≤≥≦≧≨≩≪≫≮≯≰≱≲≳⩽⩾∈∉⊂⊃⊆⊇¬]|!=|=/="
    r"|(?<![A-Za-z])(?:not|isn't|aren't|never|neither|nor|except|unequal|less|more|greater|fewer|smaller|larger"
    r"|bigger|least|most|exceeds?|over|under|above|below|beyond|excluding|without|cannot|can't)(?![A-Za-z])"
    r"|不|非|没|無|无|大于|小于|多于|少于|超过|以上|以下|至少|至多|最多|最少|低于|高于|除了",
    re.IGNORECASE,
)
_HEDGE_RE = re.compile(
    r"(?<![A-Za-z])(?:one of|either|maybe|perhaps|possibly|probably|likely|guess|depending|unsure)(?![A-Za-z])"
    r"|可能|也许|或许|大概|之一",
    re.IGNORECASE,
)
_INTERVAL_RE = re.compile(r"\\cup|\\cap|\\infty|\\emptyset|\\varnothing")
_SPLIT_TOKEN_RE = re.compile(
    r"\\[{}]|\\[A-Za-z]+|\\.|[()\[\]{}]|[,;、]|[~–—]|(?<![A-Za-z])(?:or|and|to)(?![A-Za-z])|或者|以及|或|和|与|及|至|到",
    re.IGNORECASE,
)
_SEP_COMMANDS = {"\\sim", "\\lor", "\\vee", "\\land", "\\wedge", "\\to"}
_OPEN, _CLOSE = {"(", "[", "{", "\\{"}, {")", "]", "}", "\\}"}


def split_candidates(s: str) -> list[str] | None:
    """The parts of `s` between separators at the top level (not inside any bracket);
    None when brackets nest deeper than MAX_DEPTH."""
    parts, depth, start = [], 0, 0
    for m in _SPLIT_TOKEN_RE.finditer(s):
        tok = m.group()
        if tok in _OPEN:
            depth += 1
            if depth > MAX_DEPTH:
                return None
        elif tok in _CLOSE:
            depth = max(0, depth - 1)
        elif depth == 0 and (tok[0] != "\\" or tok in _SEP_COMMANDS):
            parts.append(s[start : m.start()])
            start = m.end()
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


def _set_content(s: str) -> str | None:
    """`\\{a, b\\}` (the whole answer) -> `a, b`; `{a, b}` too (a set whose braces lost their backslash)."""
    if s.startswith("{") and "," in s and brace_pairs(s).get(0) == len(s):
        return s[1:-1]
    if s.startswith("\\{") and s.endswith("\\}"):
        depth = 0
        for m in re.finditer(r"\\[{}]", s):
            depth += 1 if m.group() == "\\{" else -1
            if depth == 0 and m.end() != len(s):
                return None
        return s[2:-2]
    return None


_PM_RE = re.compile(r"\\pm(?![a-zA-Z])|\\mp(?![a-zA-Z])")


def _expand_pm(part: str) -> list[str] | None:
    """`x = \\pm 2` -> `x = +2`, `x = -2`; None when there are several."""
    found = _PM_RE.findall(part)
    if not found:
        return [part]
    if len(found) > 1:
        return None
    return [SPACES_RE.sub(" ", _PM_RE.sub(sign, part)).strip() for sign in (" + ", " - ")]


# --- approximations ------------------------------------------------------------------------

_APPROX_RE = re.compile(
    r"\\approx(?![a-zA-Z])|≈|\\simeq(?![a-zA-Z])|≃|\\sim(?![a-zA-Z])|约为|大约|约|(?<![A-Za-z])(?:approximately|approx\.?"
    r"|about|around|roughly|nearly|almost)(?![A-Za-z])",
    re.IGNORECASE,
)
_VAR_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?$")


def stated_decimals(text: str) -> int | None:
    """The precision a value states: `3.14` -> 2, `300` -> 0, `1.2 \\times 10^{3}` -> -2."""
    sci = re.search(r"(\d+)(?:\.(\d+))?\s*\\times\s*10\^\{?(-?\d+)\}?\s*$", text[-64:])
    if sci:
        return len(sci.group(2) or "") - int(sci.group(3))
    numbers = list(re.finditer(r"\d+(?:\.(\d+))?", text))
    return len(numbers[-1].group(1) or "") if numbers else None


# --- quantities: value, unit, scale, label -------------------------------------------------

_TEXT_CMD_RE = re.compile(
    r"\\(?:text|mathrm|textrm|mbox|textit|mathit|operatorname|textnormal|mathsf|textsf|rm"
    r"|textbf|textup|emph)\s*\{"
)
_PERCENT_RE = re.compile(r"(?:\\%|%|‰)$")
_CURRENCY_RE = re.compile(r"^(-?)\s*(\\\$|\$|US\$|¥|€|£)\s*")
_QTY_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\.|[A-Za-zµμΩ]+|[\u3400-\u9fff]+|\d+|\s+|.", re.DOTALL)
_UNIT_CHAR_RE = re.compile(r"[A-Za-zµμΩ°\u3400-\u9fff]")
_WORDISH = re.compile(r"^(?:[A-Za-zµμΩ]+|[\u3400-\u9fff]+)$")
_UNIT_JOINERS = {"/", "*", "\\cdot", ".", "°", "-"}
_SCALE_WORDS = {
    "hundred": 100,
    "thousand": 1000,
    "million": 10**6,
    "billion": 10**9,
    "trillion": 10**12,
    "dozen": 12,
    "thousands": 1000,
    "millions": 10**6,
    "billions": 10**9,
    "hundreds": 100,
}
_CJK_SCALE = {"十": 10, "百": 100, "千": 1000, "万": 10**4, "亿": 10**8, "兆": 10**12}
_CLASSIFIERS = set("个只本人名件条张辆棵头块次份位朵支匹间座颗把根台双岁页道题分盒箱瓶杯袋包枝粒片首部架艘层")
_MATH_WORDS = {
    "sin",
    "cos",
    "tan",
    "cot",
    "sec",
    "csc",
    "log",
    "ln",
    "lg",
    "exp",
    "sqrt",
    "det",
    "gcd",
    "lcm",
    "mod",
    "max",
    "min",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "pi",
    "infty",
    "inf",
}
_COUNT_WORDS = {"unit", "units", "square units", "sq units", "square unit"}
_STOP_LABELS = {
    "twice",
    "double",
    "triple",
    "quadruple",
    "factorial",
    "reciprocal",
    "inverse",
    "dozens",
    "gross",
    "score",
    "scores",
    "lakh",
    "lakhs",
    "crore",
    "crores",
    "bn",
    "mn",
    "ish",
    "excluded",
    "excluding",
    "alternatively",
    "approx",
    "approximately",
    "about",
    "around",
    "nearly",
    "roughly",
    "almost",
    "pct",
    "percentage",
    "permille",
    "basis",
    "ppm",
    "ppb",
    "grand",
    "cubic",
    "square",
    "degrees",
    "radians",
    "times",
    "fold",
    "power",
    "root",
    "roots",
    "else",
    "otherwise",
    "instead",
    "also",
    "too",
    "respectively",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "not",
    "no",
    "none",
    "wrong",
    "incorrect",
    "false",
    "true",
    "right",
    "correct",
    "maybe",
    "perhaps",
    "possibly",
    "probably",
    "likely",
    "or",
    "and",
    "but",
    "either",
    "neither",
    "nor",
    "than",
    "more",
    "less",
    "fewer",
    "least",
    "most",
    "at",
    "over",
    "under",
    "above",
    "below",
    "exactly",
    "only",
    "just",
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "on",
    "for",
    "by",
    "per",
    "squared",
    "cubed",
    "half",
    "halves",
    "third",
    "thirds",
    "quarter",
    "quarters",
    "tenth",
    "tenths",
    "hundredth",
    "hundredths",
    "thousandth",
    "thousandths",
    "negative",
    "minus",
    "plus",
    "percent",
    "point",
    "answer",
    "final",
    "total",
    "each",
    "all",
    "some",
    "any",
    "every",
    "other",
    "another",
    "what",
    "how",
    "many",
    "much",
    "which",
}
_LHS_RE = re.compile(r"^(?:[A-Za-z][A-Za-z ]*[A-Za-z]|[\u3400-\u9fff]+|(?:m\s*)?\\angle\s*[A-Z]{1,3})\s*=\s*(?=\S)")
_UNBRACED_ROOT_RE = re.compile(r"\\sqrt\s*\\")
"""`\\sqrt\\sqrt 2`: a root of a command without braces, which math-verify reads as 2."""
_ENVIRONMENT_RE = re.compile(r"\\(?:begin|end)\{[A-Za-z*]+\}")
_RHS_VAR_RE = re.compile(r"(?<=\S)\s*=\s*(?![ei]$)[A-Za-z]$")  # not e or i: constants
_WORD_RE = re.compile(r"(?<![\dA-Za-z])[A-Za-z]{2,}|[\u3400-\u9fff]")  # a word, not letters glued to a number (2xy)
_LONG_DIGITS_RE = re.compile(r"\d{1001}")
# two values with only a space between (`12 15`, `1 \frac{1}{3}`): two answers, a product, a mixed number?
_SPACED_DIGITS_RE = re.compile(r"[\d})]\s+(?:[-+]?\d|\\frac(?![A-Za-z])|\()")
_TOWER_RE = re.compile(r"\d+(?:\s*\^\s*\{?\s*\d+)+")
MAX_POWER_DIGITS = 100_000
"""An integer power with more digits than this (`9^{9^{9}}`, `2^{10^{6}}`) is not computed: parse_failed."""


def _too_large(text: str) -> bool:
    """A power of integer literals whose value has more than MAX_POWER_DIGITS digits."""
    import math

    for m in _TOWER_RE.finditer(text):
        nums = [int(x) for x in re.findall(r"\d+", m.group())[-8:]]
        value = nums[-1]
        for base in reversed(nums[:-1]):
            if base > 1 and value * math.log10(base) > MAX_POWER_DIGITS:
                return True
            value = base**value if base > 1 else base
    return False


_COMMANDS_RE = re.compile(r"\\(?:begin|end)\{[A-Za-z*]+\}|\\[A-Za-z]+")


def _forms(word: str) -> set[str]:
    """A word and its singular guesses: apples -> {apples, apple, appl}."""
    w = word.lower()
    out = {w}
    if w.endswith("s") and len(w) > 2:
        out.add(w[:-1])
        if w.endswith("es") and len(w) > 3:
            out.add(w[:-2])
    return out


def context_of(prompt: object) -> Context:
    """The count labels a problem's prompt allows (its words), from text or chat messages."""
    if isinstance(prompt, list):
        text = " ".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    else:
        text = str(prompt or "")
    return _context(text)


@functools.lru_cache(maxsize=4096)
def _context(text: str) -> Context:
    stop = {f for w in _STOP_LABELS for f in _forms(w)}
    words = frozenset(f for w in re.findall(r"[A-Za-z]{2,}", text) for f in _forms(w) if w.lower() not in stop)
    return Context(words, text, text)


def _flatten_text(s: str) -> tuple[str, bool]:
    """`5\\text{ cm}` -> `5 cm`: the content of text commands, set apart by a space.
    Returns the text and whether any text command was there."""
    if not _TEXT_CMD_RE.search(s):
        return s, False
    pairs = brace_pairs(s)
    out, i = [], 0
    for m in _TEXT_CMD_RE.finditer(s):
        if m.start() < i:
            continue
        close = pairs.get(m.end() - 1)
        if close is None:
            continue
        out += [s[i : m.start()], " ", s[m.end() : close - 1]]
        i = close
    out.append(s[i:])
    flat = "".join(out)
    return (_flatten_text(flat)[0] if flat != s else flat), True


def _exponent_start(toks: list[str], end: int) -> int | None:
    """Index where an exponent `^2`, `^-1`, `^{2}` ending at toks[end-1] starts, else None."""
    j = end
    if j > 0 and toks[j - 1] == "}":
        j -= 1
        closing = True
    else:
        closing = False
    if j == 0 or not toks[j - 1].isdigit():
        return None
    j -= 1
    if j > 0 and toks[j - 1] == "-":
        j -= 1
    if closing:
        if j == 0 or toks[j - 1] != "{":
            return None
        j -= 1
    return j - 1 if j > 0 and toks[j - 1] == "^" else None


def _split_suffix(part: str) -> tuple[str, str]:
    """(value, trailing words): `5 cm^2` -> ('5', 'cm^2'); ('x^2 + 1', '') when no words trail."""
    if not _UNIT_CHAR_RE.search(part):
        return part, ""
    toks = _QTY_TOKEN_RE.findall(part)
    i = len(toks)
    while i > 0:
        t = toks[i - 1]
        if _WORDISH.match(t) or t.isspace() or t in _UNIT_JOINERS:
            i -= 1
            continue
        k = _exponent_start(toks, i)
        if k is not None and k > 0 and (_WORDISH.match(toks[k - 1]) or toks[k - 1] == "°"):
            i = k
            continue
        break
    while i < len(toks) and not (_WORDISH.match(toks[i]) or toks[i] == "°"):
        i += 1  # the unit starts with a word (or a degree sign)
    return "".join(toks[:i]).strip(), "".join(toks[i:]).strip()


def _value_end_ok(value: str) -> bool:
    return bool(value) and (value[-1] in "0123456789})]|!" or value.endswith("\\pi"))


def _cjk_suffix(value: str, suffix: str, ctx: Context, trusted: bool) -> Cand | str | None:
    scale: Fraction | int = 1
    rest = suffix
    while rest and rest[0] in _CJK_SCALE and cjk_unit(rest) is None:
        scale *= _CJK_SCALE[rest[0]]
        rest = rest[1:].strip()
    if not rest:
        return Cand(value, None, scale)
    spelled = cjk_unit(rest)
    unit = parse_unit(spelled if spelled is not None else rest)
    if unit is not None:
        return Cand(value, unit, scale)
    if rest[0] in _CLASSIFIERS:
        rest = rest[1:]
    if not rest or trusted or rest in ctx.text:  # `12个`, `12个苹果` where the prompt says 苹果
        return Cand(value, None, scale, label=not trusted and suffix != "")
    return WORDS


def _quantity(part: str, ctx: Context, trusted: bool, spaced: bool) -> Cand | str:
    """One candidate: a value with its unit, scale and label read off; or a flag."""
    unit = None
    m = _PERCENT_RE.search(part)
    if m:
        unit, part = parse_unit(m.group()), part[: m.start()].strip()
    m = _CURRENCY_RE.match(part)
    if m and unit is None:
        unit, part = parse_unit(m.group(2)), m.group(1) + part[m.end() :]
    value, suffix = _split_suffix(part)
    if suffix and unit is None and _value_end_ok(value):
        glued = not (spaced or part[len(value) : len(value) + 1].isspace())
        got = _read_suffix(value, suffix, ctx, trusted, glued, spaced)
        if isinstance(got, str):
            return got
        if got is not None:
            return _checked(got, trusted)
    return _checked(Cand(part, unit), trusted)


def _read_suffix(
    value: str, suffix: str, ctx: Context, trusted: bool, glued: bool, in_text: bool = False
) -> Cand | str | None:
    """What trails a number: scale words, then a unit or a count label. None: it is mathematics
    (`2x`, `3 y`), not a quantity; WORDS: words that are neither. A label is a word the prompt
    uses, or (`in_text`: written in `\\text{}`) a short noun phrase that says nothing more
    (`2 \\text{ apples}`, `12 \\text{ square units}`: the MATH convention math-verify follows)."""
    if re.match(r"[\u3400-\u9fff]", suffix):
        return _cjk_suffix(value, suffix, ctx, trusted)
    words = suffix.split()
    scale: Fraction | int = 1
    while words and words[0].lower() in _SCALE_WORDS:
        scale *= _SCALE_WORDS[words.pop(0).lower()]
    rest = " ".join(words)
    if not rest:
        return Cand(value, None, scale)
    unit = parse_unit(rest, spaced=not glued)
    if unit is not None:
        return Cand(value, unit, scale)
    alpha = re.findall(r"[A-Za-zµμΩ]+", rest)
    if all(len(w) == 1 for w in alpha) or (glued and scale == 1 and not trusted):
        return None  # single letters, or letters glued to the number: variables (2x, 3ab)
    if trusted:
        return Cand(value, None, scale)
    if all(_forms(w) & ctx.words for w in alpha) or (in_text and _noun_phrase(rest, alpha)):
        return Cand(value, None, scale, label=True)
    return WORDS


def _noun_phrase(rest: str, alpha: list[str]) -> bool:
    """A count word (`units`, `square units`), or one to three plain words that name no unit of
    pint's whole registry (`leagues`, `arcminutes`, `ppm`) and none that could change what the
    number states (`is`, `not`, `more`, `twice`, `fifths`, `maybe`, ...: _STOP_LABELS)."""
    if rest.lower() in _COUNT_WORDS:
        return True
    return (
        1 <= len(alpha) <= 3
        and " ".join(alpha) == rest
        and not names_a_unit(rest)
        and all(
            len(w) > 1
            and w.lower() not in _STOP_LABELS
            and w.lower() not in _SCALE_WORDS
            and not w.lower().endswith(("th", "ths"))
            for w in alpha
        )
    )


def _checked(c: Cand, trusted: bool) -> Cand | str:
    """A value with digits may not carry words (`maybe 12`); a value without digits is text
    (`\\text{(B)}`, `Monday`), which math-verify compares."""
    text = c.text
    if re.search(r"\d", text):  # `Area = 12`, `\angle APC = 74`, `2 = x` state a value
        text = _RHS_VAR_RE.sub("", _LHS_RE.sub("", text)) if text.count("=") == 1 else _LHS_RE.sub("", text)
    if not text or _LONG_DIGITS_RE.search(text) or _too_large(text) or _UNBRACED_ROOT_RE.search(text):
        return PARSE_FAILED
    digits = bool(re.search(r"\d", text))
    if (
        digits and not trusted and _SPACED_DIGITS_RE.search(_ENVIRONMENT_RE.sub(" ", text))
    ):  # `12 15`: two answers, a product, or one number?
        return PARSE_FAILED
    words = any(w.lower() not in _MATH_WORDS for w in _WORD_RE.findall(_COMMANDS_RE.sub(" ", text)))
    if words and digits and not trusted:
        return WORDS
    textual = words and not digits
    return c if (text, textual) == (c.text, c.textual) else replace(c, text=text, textual=textual)


_TEXT_KEY_RE = re.compile(r"[\s(){}\[\]$.,:;!?\"'`]|\\[A-Za-z]+")


def text_key(text: str) -> str:
    """What two textual answers must share: `\\text{(B) Monday.}` and `b monday` differ, `Monday` and `monday` do not."""
    return _TEXT_KEY_RE.sub("", text).casefold()


# --- the whole answer ----------------------------------------------------------------------


def analyse(answer: str, ctx: Context = Context(), *, trusted: bool = False) -> Parsed:
    """The candidates `answer` states, or the flag that keeps it from scoring. `trusted` (a gold
    answer): words after a number are labels, and an approximation marker sets the precision."""
    return _analyse(answer, ctx, trusted)


# Forms nothing below can change, read at once: a plain number, fraction or radical, `x = number`,
# a percentage, a pair in brackets (a tuple or an interval: a gold interval may meet an inequality).
_PLAIN_RE = re.compile(
    r"(?:[a-z] ?= ?)?-?(?:\d{1,30}(?:\.\d{1,30})?|\\frac\{\d{1,30}\}\{\d{1,30}\}|\d{1,30}/\d{1,30}"
    r"|\d{0,30}\\sqrt\{\d{1,30}\})"
)
_PLAIN_PERCENT_RE = re.compile(r"(-?\d{1,30}(?:\.\d{1,30})?) ?\\%")
_PLAIN_PAIR_RE = re.compile(r"[(\[]-?\d{1,30}(?:\.\d{1,30})?, ?-?\d{1,30}(?:\.\d{1,30})?[)\]]")


@functools.lru_cache(maxsize=65536)
def _analyse(answer: str, ctx: Context, trusted: bool) -> Parsed:
    if _PLAIN_RE.fullmatch(answer):
        return Parsed((Cand(answer),))
    if (m := _PLAIN_PERCENT_RE.fullmatch(answer)) is not None:
        return Parsed((Cand(m.group(1), "percent"),))
    if _PLAIN_PAIR_RE.fullmatch(answer):
        return Parsed((Cand(answer),), relation=trusted)
    s = canonical(answer)
    if not s:
        return Parsed(flag=PARSE_FAILED)
    relation = bool(_RELATION_RE.search(s))
    if trusted:  # a gold interval may be answered with an inequality
        relation = relation or bool(_INTERVAL_RE.search(s)) or (s[0] in "([" and s[-1] in ")]" and "," in s)
    elif _HEDGE_RE.search(s):
        return Parsed(flag=MULTIPLE_ANSWERS, relation=relation)
    flat, had_text = _flatten_text(s)
    content = _set_content(flat)
    parts = split_candidates(content if content is not None else flat)
    if parts is None or "\\boxed" in flat or "\\fbox" in flat:  # nested too deep, or boxes left inside
        return Parsed(flag=PARSE_FAILED, relation=relation)
    if not trusted and any(several_values(p) for p in parts):  # `17〜23`: joined by no operator
        return Parsed(flag=MULTIPLE_ANSWERS, relation=relation)
    cands: list[Cand] = []
    for part in parts:
        expanded = _expand_pm(part)
        if expanded is None:
            return Parsed(flag=PARSE_FAILED, relation=relation)
        for p in expanded:
            c = _candidate(p, ctx, trusted, had_text)
            if isinstance(c, str):
                return Parsed(flag=c, relation=relation)
            cands.append(c)
            if len(cands) > MAX_CANDIDATES:
                return Parsed(flag=PARSE_FAILED, relation=relation)
    if not cands:
        return Parsed(flag=PARSE_FAILED, relation=relation)
    return Parsed(tuple(dict.fromkeys(cands)), None, relation)


def _candidate(part: str, ctx: Context, trusted: bool, spaced: bool) -> Cand | str:
    m = _APPROX_RE.search(part)
    if m is None:
        return _quantity(part, ctx, trusted, spaced)
    a, b = part[: m.start()].strip().rstrip("=").strip(), part[m.end() :].strip()
    if not b:
        return PARSE_FAILED
    approx = _quantity(b, ctx, trusted, spaced)
    if isinstance(approx, str):
        return approx
    approx = replace(approx, decimals=stated_decimals(approx.text))
    if not a or _VAR_RE.match(a):  # `≈ 3.14`, `x \approx 3.14`: B is the value
        value = approx if trusted else replace(approx, decimals=None)
        return replace(value, text=f"{a} = {value.text}") if a else value
    exact = _quantity(a, ctx, trusted, spaced)
    if isinstance(exact, str) or trusted:
        return exact
    return replace(exact, approx=approx)


# --- the verdict ---------------------------------------------------------------------------

Eq = Callable[[Cand, Cand], "bool | None"]
"""eq(gold value, pred value) -> equal; None when it cannot be told here (the worker can)."""


def _any3(vals: Iterable[bool | None]) -> bool | None:
    out: bool | None = False
    for v in vals:
        if v:
            return True
        if v is None:
            out = None
    return out


def _all3(vals: Iterable[bool | None]) -> bool | None:
    out: bool | None = True
    for v in vals:
        if v is False:
            return False
        if v is None:
            out = None
    return out


def _match(g: Cand, p: Cand, eq: Eq) -> bool | None:
    """`A \\approx B` is judged by A, the value it states; B must agree with A at its own
    precision (a right rounding beside a wrong value earns nothing, nor a wrong one beside a right)."""
    if p.approx is None:
        return eq(g, p)
    exact = replace(p, approx=None)
    stated = eq(g, exact)
    if stated is False:
        return False
    return _all3([stated, eq(p.approx, exact)])


def judge(gold: Parsed, pred: Parsed, eq: Eq) -> tuple[bool | None, str | None]:
    """(correct, flag); correct is None when `eq` could not decide a comparison that matters."""
    if pred.flag is not None:
        return False, pred.flag
    if gold.flag is not None:
        raise ValueError(f"gold answer cannot be graded ({gold.flag})")
    if pred.relation and not gold.relation:
        return False, RELATION
    several = MULTIPLE_ANSWERS if len(pred.cands) > 1 else None
    if len(gold.cands) == 1:
        verdicts = []
        for p in pred.cands:
            v = _match(gold.cands[0], p, eq)
            if v is False:
                return False, several
            verdicts.append(v)
        ok = _all3(verdicts)
        return ok, (None if ok is not False else several)
    table = [[_match(g, p, eq) for p in pred.cands] for g in gold.cands]
    every_pred = _all3(_any3(row[j] for row in table) for j in range(len(pred.cands)))
    every_gold = _all3(_any3(row) for row in table)
    ok = _all3([every_pred, every_gold])
    return ok, None
