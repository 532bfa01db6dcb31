"""The final answer in its context: what stands around a final-answer marker can change it.

    text = r"$t = -\\boxed{9}$"
    expression(text, "9", 5, 14, MathSpans(text))   # ('-9', 14): the sign is part of what is stated
    tail_verdict("9", r". On reflection the answer is not 9.")   # RETRACTED

Extraction (rlvr.rewards.extract) finds the markers: boxes, answer tags, answer lines, `####`.
A policy under pressure writes around them what a reader takes as part of the answer, so each
marker is read with its surroundings, and each surrounding either joins the answer (which is then
compared as written) or keeps the sample from scoring:

- **Attached to a box.** In the same math, an operator, sign, coefficient, exponent, factorial or
  root around `\\boxed{}` joins it (`-\\boxed{9}` is -9, `\\sqrt{\\boxed{81}}` is 9, `2\\boxed{9}` is
  2·9); a relation, punctuation or text ends it (`x = \\boxed{9}.` is 9). Outside math only what
  touches the box joins (`- \\boxed{9}` at a line's start is a bullet). Right after it, a percent
  sign, a scale word or a unit joins too (`$\\boxed{9}$ hundred` is 900, `$\\boxed{9}$ km` is 9 km):
  the same answer as if it stood inside the box. Other words (`apples`) are labels and stay out.
- **A second value after it.** In the text up to the next marker, a value that differs from the
  answer under a hedge (an alternative, a condition, a modality, a correction, a contrast or a
  negation: `or perhaps 14`, `otherwise 14`, `应该是14`), or a bare value standing right after
  the marker (`\\boxed{9} (14)`, `\\boxed{9} / 14`), makes the sample several answers; a modality
  in the marker's own sentence does too (`\\boxed{9}, probably`), as it does inside the answer. A
  digit run right before a closing answer tag (`<answer>899</answer>9</answer>`) is stray markup, no value.
- **A retraction.** A negation aimed at the answer after it (its value, the word answer or
  result, a verdict such as wrong, or a bare `No.` / `不对`), or a contrast in the next sentence
  that does not restate its value (`A classmate wrote \\boxed{9}, but that double counts`),
  withdraws the marker: it is not the completion's answer. Withdrawing can only take markers away,
  so a completion whose markers are all withdrawn has no answer (parse_failed), and a later marker
  that stands alone is the answer (`\\boxed{9}. No, that is wrong: \\boxed{14}` answers 14).

The cue words are grouped by the role they play in the sentence (hedge, negation, contrast,
verdict), and a cue only counts beside a value it governs or the answer it targets; values are
compared as exact fractions. Everything is linear in the completion's length: math spans are
found in one pass, a box's surroundings are read in a bounded window, and each marker's tail ends
where the next marker begins.
"""

from __future__ import annotations

import bisect
import re
from fractions import Fraction

from rlvr.rewards.units import cjk_unit, parse_unit

SEVERAL = "several"
RETRACTED = "retracted"

# --- math spans ----------------------------------------------------------------------------

_DELIM_RE = re.compile(r"\\\$|\$\$|\$|\\[()\[\]]")
_CLOSER = {"$": "$", "$$": "$$", "\\(": "\\)", "\\[": "\\]"}


def math_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the inside of every closed math span ($..$, $$..$$, \\(..\\), \\[..\\]), in order."""
    spans: list[tuple[int, int]] = []
    opened: str | None = None
    at = 0
    for m in _DELIM_RE.finditer(text):
        tok = m.group()
        if tok == "\\$":
            continue
        if opened is None:
            if tok in _CLOSER:
                opened, at = tok, m.end()
        elif tok == _CLOSER[opened]:
            spans.append((at, m.start()))
            opened = None
    return spans


class MathSpans:
    """The math spans of a text, asked which one holds a position."""

    def __init__(self, text: str) -> None:
        self.spans = math_spans(text)
        self.starts = [s for s, _ in self.spans]

    def at(self, pos: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(self.starts, pos) - 1
        return self.spans[i] if i >= 0 and self.spans[i][0] <= pos < self.spans[i][1] else None


# --- what is attached to a box -------------------------------------------------------------

_WINDOW = 200
"""How far a box's surroundings are read, each side: an expression around a box is short."""
_TOKEN_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox|emph)\s*\{[^{}]*\}"
    r"|\\[A-Za-z]+|\\.|[A-Za-z]+|\d+(?:\.\d+)?|\s+|.",
    re.DOTALL,
)
_RELATIONS = {
    "=", "<", ">", ":", ",", ";", "&", "\n", "\\\\", "≈", "≤", "≥", "≠", "⇒", "→", "∴",
    "\\le", "\\leq", "\\ge", "\\geq", "\\ne", "\\neq", "\\approx", "\\equiv", "\\sim", "\\simeq",
    "\\cong", "\\Rightarrow", "\\implies", "\\Longrightarrow", "\\to", "\\rightarrow", "\\iff",
    "\\therefore", "\\because", "\\quad", "\\qquad", "\\hspace", "\\text", "\\mathrm", ".", "$",
    "\\in", "\\notin", "\\ni", "\\subset", "\\subseteq", "\\supset", "\\supseteq", "\\mid", "\\perp",
    "\\parallel", "\\propto", "\\lt", "\\gt", "\\leqslant", "\\geqslant", "\\ll", "\\gg", "\\mapsto",
    "\\Leftrightarrow", "\\Longleftrightarrow", "\\longrightarrow", "\\gets", "\\leftarrow", "\\pmod",
    "\\bmod", "\\mod",
}  # fmt: skip
_TEXT_STOPS = {".", "?", "!", "*", "#", "`", "(", ")", "[", "]", '"', "'", "。", "，", "：", "；"}
_SPACING = {"\\,", "\\;", "\\!", "\\ ", "~", "\\:", "\\left", "\\right", "\\displaystyle"}
_PAIRS = (("{", "}"), ("(", ")"), ("[", "]"))
_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")


def _is_stop(tok: str, in_math: bool) -> bool:
    if tok in _RELATIONS or tok.startswith(("\\text", "\\mathrm", "\\mbox", "\\emph", "\\boxed", "\\fbox")):
        return True
    if in_math:
        return False
    return tok in _TEXT_STOPS or tok.isspace() or (tok.isalpha() and (len(tok) > 1 or not tok.isascii()))


_QUICK_STOPS = frozenset("$=:,;.\n")


def _attached(window: str, in_math: bool, reverse: bool) -> tuple[str | None, int]:
    """The run of `window` that belongs to the box's expression, read away from the box, and its length;
    None when it fills the whole window (an expression longer than _WINDOW is not read)."""
    near = window.rstrip() if reverse else window.lstrip()
    if not near or (near[-1] if reverse else near[0]) in _QUICK_STOPS:  # most boxes: `= \boxed{9}$.`
        return "", 0
    toks = _TOKEN_RE.findall(window)
    if reverse:
        toks.reverse()
    taken: list[str] = []
    for tok in toks:
        if _is_stop(tok, in_math):
            break
        taken.append(tok)
    else:
        if len(window) >= _WINDOW:  # the expression runs past what is read: no value to stand for it
            return None, 0
    if reverse:
        taken.reverse()
    run = "".join(taken)
    return run, len(run)


def _meaningful(part: str) -> str:
    if not part or part.isspace():
        return ""
    for sp in _SPACING:
        part = part.replace(sp, "")
    return part.strip()


def _unwrap(prefix: str, suffix: str) -> tuple[str, str]:
    """Brackets that only wrap the box (`{\\boxed{9}}`, `(\\boxed{9})`) say nothing more."""
    changed = True
    while changed and prefix and suffix:
        changed = False
        for a, b in _PAIRS:
            argument = len(prefix) > len(a) and (prefix[-len(a) - 1].isalnum() or prefix[-len(a) - 1] in "^_")
            if prefix.endswith(a) and suffix.startswith(b) and not argument:  # not `\sqrt{`, `f(`, `^{`
                prefix, suffix, changed = prefix[: -len(a)].rstrip(), suffix[len(b) :].lstrip(), True
    return prefix, suffix


def _join(prefix: str, content: str, suffix: str) -> str:
    plain = _NUMBER_RE.fullmatch(content) is not None
    body = content if plain else "{" + content + "}"
    if prefix and (prefix[-1].isdigit() or prefix[-1] == "}"):
        prefix += " \\cdot "  # `2\boxed{9}`: a coefficient multiplies
    if suffix and suffix[0].isdigit():
        suffix = " \\cdot " + suffix
    elif suffix and suffix[0].isalpha():
        suffix = " " + suffix
    return prefix + body + suffix


# Right after the box (past the math's closing delimiter): a percent sign, a scale word or a unit.
_AFTER_RE = re.compile(
    r"(?:[ \t~]|\$\$|\$|\\\)|\\\]|\\[,;: ]|\\quad)*"  # blanks, the math's closing delimiter, spacing
    r"(?:(?P<pct>\\%|%|‰|per ?cent\b|percent\b)"
    r"|\\(?:text|mathrm|textrm|mbox)\s*\{\s*(?P<group>[^{}]{1,40}?)\s*\}|(?P<word>[A-Za-zµμΩ°/]{1,20})\b"
    r"|(?P<cjk>[\u3400-\u9fff]{1,4}))"
)
"""Matched on a slice of at most _WINDOW characters: what joins a box stands right after it."""
_SCALES = {"hundred", "thousand", "million", "billion", "trillion", "hundreds", "thousands", "millions", "billions"}
_CJK_SCALES = set("百千万亿兆")


def _after_word(word: str) -> str | None:
    """The spelling that joins the answer for a word standing right after the box, else None."""
    low = word.strip().lower()
    if low in ("%", "\\%", "‰", "percent", "per cent", "percents"):
        return "\\%" if low != "‰" else "‰"
    if low in _SCALES:
        return " " + low
    if parse_unit(word.strip()) is not None:
        return " \\text{ " + word.strip() + "}"
    return None


def _after_cjk(run: str) -> tuple[str, int] | None:
    for n in range(len(run), 0, -1):
        head = run[:n]
        if all(ch in _CJK_SCALES for ch in head) or cjk_unit(head) is not None:
            return head, n
    return None


def _trailing(text: str, pos: int, in_math: bool, span_end: int) -> tuple[str, int]:
    """What right after the expression joins it (a percent sign, a scale word, a unit), and where it ends."""
    if in_math and text[pos:span_end].strip():  # the math goes on: it ended at a relation or text group
        rest = text[pos : min(span_end, pos + _WINDOW)]
        m = _AFTER_RE.match(rest)
        if m is None or m.end() != len(rest.rstrip(" .,;")):
            return "", pos
        return _joined_after(m, pos)
    m = _AFTER_RE.match(text[pos : pos + _WINDOW])
    if m is None:
        return "", pos
    joined, end = _joined_after(m, pos)
    return joined, end if joined else pos


def _joined_after(m: re.Match[str], offset: int) -> tuple[str, int]:
    if m.group("pct"):
        return _after_word(m.group("pct")) or "", offset + m.end()
    if m.group("cjk"):
        got = _after_cjk(m.group("cjk"))
        if got is None:
            return "", offset
        head, n = got
        return head, offset + m.start("cjk") + n
    word = m.group("group") or m.group("word")
    joined = _after_word(word) if word else None
    return (joined, offset + m.end()) if joined else ("", offset)


def expression(
    text: str, content: str, start: int, end: int, spans: MathSpans, floor: int = 0
) -> tuple[str | None, int]:
    """What the box at text[start:end] (holding `content`) states with what is attached to it, and
    where that ends; None when what is attached cannot be read (brackets cut by a relation, an
    expression longer than _WINDOW). Nothing before `floor` (the previous marker's end) is read."""
    span = spans.at(start)
    in_math = span is not None
    lo, hi = span if span is not None else (text.rfind("\n", 0, start) + 1, len(text))
    left = text[max(lo, floor, start - _WINDOW) : start]
    right = text[end : min(hi, end + _WINDOW)]
    prefix, _ = _attached(left, in_math, reverse=True)
    suffix, used = _attached(right, in_math, reverse=False)
    if prefix is None or suffix is None:
        return None, end
    prefix, suffix = _unwrap(_meaningful(prefix), _meaningful(suffix))
    if prefix.count("{") - prefix.count("}") != suffix.count("}") - suffix.count("{"):
        return None, end + used
    stated = _join(prefix, content.strip(), suffix) if (prefix or suffix) else content
    after, after_end = _trailing(text, end + used, in_math, hi if in_math else len(text))
    return stated + after, max(after_end, end + used)


# --- what follows a marker -----------------------------------------------------------------

_TAIL_TOKEN_RE = re.compile(
    r"(?P<mod>\\[pb]?mod(?![A-Za-z])|(?<![A-Za-z])mod(?![A-Za-z]))\s*\{?\s*\d+\s*\}?|-?\\[dt]?frac\{-?\d+\}\{\d+\}|-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|[A-Za-z]*n[’']t|[A-Za-z]+|[\u3400-\u9fff]|\\[A-Za-z]+|\S"
)
_SENTENCE_ENDS = {".", "?", "!", ":", "。", "？", "！", "：", "\n"}
_CLAUSE_ENDS = {",", ";", "(", ")", "，", "；", "（", "）", "—", "[", "]"}
_COMPUTATION = {"=", "+", "*", "×", "÷", "^", "\\times", "\\cdot", "\\div"}
_NEGATION_REACH = 2
"""A value this many words after a negation is the one it denies (`not equal to 9`, `不是9`)."""
_EN = {
    # offers another value, or makes the one given depend on something
    "hedge": "or otherwise alternatively else instead either unless if assuming assume assumed provided "
    "suppose supposing depending depends whether perhaps maybe possibly possible probably might "
    "could may likely guess unsure should actually rather correction correct wait hmm oops sorry "
    "reflection thought recheck recompute recalculate also alternative another",
    # denies
    "negation": "not no never wrong incorrect false mistaken mistake error invalid nope none rejected "
    "reject wrongly bogus",
    "contrast": "but however yet though although nevertheless whereas",
    # a judgement of correctness: with a negation in its clause it retracts (`that is not right`)
    "verdict": "right correct true wrong incorrect false mistake mistaken error",
    # a modality in the marker's own sentence hedges the answer itself
    "modality": "perhaps maybe possibly probably might likely guess unsure",
}
_ZH = {  # read as each character arrives: a cue counts when the text so far ends with it
    "hedge": "或者 或 否则 要么 还是 不然 如果 若 假如 假设 要是 倘若 除非 取决 可能 也许 或许 大概 应该 应为 "
    "其实 实际 更正 改为 等等",
    "negation": "不 没",
    "contrast": "但 但是 然而 可是 不过 却",
    "modality": "可能 也许 或许 大概",
}
_ZH_WRONG = ("不对", "不正确", "错了", "是错的", "错误", "有误")
"""Said of the answer, these retract it (a negation and a verdict at once)."""
_ZH_RIGHT = ("没错", "不错")
"""...and these, which end the same way, say it is right."""
_CUES = {role: frozenset(_EN[role].split()) for role in _EN}
_ZH_CUES = {role: tuple(_ZH[role].split()) for role in _ZH}


def _zh_roles(said: str) -> set[str]:
    """The roles of the Chinese cue the text so far (its last characters) ends with."""
    if said.endswith(_ZH_RIGHT):
        return {"affirmation"}  # takes back the negation it starts with
    if said.endswith(_ZH_WRONG):
        return {"negation", "verdict"}
    return {role for role, words in _ZH_CUES.items() if said.endswith(words)}


def _value(tok: str) -> Fraction | None:
    try:
        if "frac" in tok:
            a, b = re.findall(r"-?\d+", tok)
            return Fraction(int(a), int(b)) * (-1 if tok.startswith("-") else 1)
        return Fraction(tok.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


_ASSIGNED_RE = re.compile(r"^[A-Za-z]\s*=\s*")


def answer_value(answer: str) -> Fraction | None:
    """The answer as an exact number when it is one (`-9`, `0.5`, `\\frac{1}{2}`, `x = 1,000`), else None."""
    s = _ASSIGNED_RE.sub("", answer.strip().strip("$").strip())
    m = _TAIL_TOKEN_RE.fullmatch(s)
    if m is None or m.group("mod") or not any(ch.isdigit() for ch in m.group()):
        return None
    return _value(m.group())


class _Clause:
    __slots__ = ("cues", "zh", "values", "words", "computation", "bare_value", "_since_negation")

    def __init__(self) -> None:
        self.cues: set[str] = set()
        self.zh = ""
        self.values: list[tuple[Fraction | None, str, bool]] = []
        """(value, as written, denied: a negation stands right before it)."""
        self.words = 0
        self.computation = False
        self.bare_value = False
        """A value with no word before it in its clause, in the marker's sentence (`\\boxed{9} (14)`)."""
        self._since_negation = _NEGATION_REACH + 1

    def has(self, role: str) -> bool:
        return role in self.cues

    def word(self, roles: set[str]) -> None:
        if "affirmation" in roles:
            self.cues.discard("negation")
        self.cues |= roles
        self.words += 1
        self._since_negation = 0 if "negation" in roles else self._since_negation + 1

    def value(self, tok: str, first_sentence: bool) -> None:
        denied = self._since_negation <= _NEGATION_REACH
        self.values.append((_value(tok), tok, denied))
        self.bare_value = self.bare_value or (first_sentence and self.words == 0)


def _sentences(tail: str) -> list[list[_Clause]]:
    """The tail's sentences, each a list of clauses."""
    out = [[_Clause()]]
    for m in _TAIL_TOKEN_RE.finditer(tail):
        tok, c = m.group(), out[-1][-1]
        if m.group("mod"):
            continue  # `\\boxed{9} \\pmod{11}`, `9 (mod 11)`: the modulus qualifies the value
        if tok in _SENTENCE_ENDS:
            out.append([_Clause()])
        elif tok in _CLAUSE_ENDS:
            out[-1].append(_Clause())
        elif tok[0].isdigit() or (tok[0] in "-\\" and any(ch.isdigit() for ch in tok)):
            if not tail.startswith("</answer>", m.end()):  # `<answer>899</answer>9</answer>`: stray markup
                c.value(tok, len(out) == 1)
        elif tok in _COMPUTATION:
            c.computation = True
        elif "\u3400" <= tok <= "\u9fff":
            c.zh = (c.zh + tok)[-4:]  # the longest cue: bounded, so a long Chinese tail stays linear
            c.word(_zh_roles(c.zh))
        elif tok[0].isalpha():
            low = tok.lower()
            c.word({"negation"} if low[-3:] in ("n't", "n’t") else {r for r, words in _CUES.items() if low in words})
    return out


def tail_verdict(answer: str, tail: str) -> str | None:
    """What the text after a marker (up to the next marker) does to its answer: SEVERAL (a second
    value under a hedge, or the answer hedged), RETRACTED (the answer denied, or a contrast that does
    not restate it), or None. A hedge reaches to the end of its sentence (`unless the ends count,
    giving 14`); a denied value is no candidate (`\\boxed{9}, not 14`)."""
    if not any(ch.isalnum() for ch in tail):  # punctuation and spaces: nothing to read
        return None
    value = answer_value(answer)

    def same(v: Fraction | None) -> bool:  # any value differs from an answer that is no number
        return value is not None and v == value

    sentences = _sentences(tail)
    restated = [any(same(v) for c in sentence for v, _, _ in c.values) for sentence in sentences] + [False]
    several = False
    for i, sentence in enumerate(sentences):
        hedged = False
        for c in sentence:
            if any(denied and same(v) for v, _, denied in c.values) or (c.has("negation") and c.has("verdict")):
                return RETRACTED  # `the answer is not 9`, `不是9`, `that is not right`, `不对`
            if i <= 1 and c.has("contrast") and not (restated[i] or restated[i + 1]):
                return RETRACTED  # `A classmate wrote \\boxed{9}, but that double counts`
            hedged = hedged or c.has("hedge") or c.has("negation") or c.has("contrast")
            restates = any(same(v) for v, _, _ in c.values)
            other = any(not same(v) and not denied for v, _, denied in c.values)
            if other and hedged and not (restates and c.computation):  # not `since 4 + 5 = 9`
                several = True
            if i == 0 and ((other and c.bare_value and not c.computation) or c.has("modality")):
                several = True
        bare = sum(c.words for c in sentence) <= 2 and not any(c.values for c in sentence)
        if bare and any(c.has("negation") for c in sentence):
            return RETRACTED  # `No.`, `Wrong.`
    return SEVERAL if several else None
