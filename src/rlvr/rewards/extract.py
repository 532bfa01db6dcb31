"""Answer extraction and answer-string normalisation (pure string work, no sympy).

Extraction follows an explicit policy list per verifier; the first policy that
finds anything decides, and every answer that policy finds is returned, so the
verifier can refuse outputs that state several different final answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARSE_FAILED = "parse_failed"
MULTIPLE_ANSWERS = "multiple_answers"


@dataclass(frozen=True)
class Extraction:
    answers: list[str]
    """Every final answer the deciding policy found, cleaned, in order of appearance."""
    policy: str | None = None
    flag: str | None = None
    """None, PARSE_FAILED (nothing unambiguous to grade) or MULTIPLE_ANSWERS."""


@dataclass(frozen=True)
class Gold:
    text: str
    """The gold answer with any approximation marker removed."""
    decimals: int | None = None
    """Set when the gold carries an approximation marker: compare at this many decimals
    (negative for `1.2 \\times 10^{3}`, which states hundreds)."""


# --- brace-matched \boxed{...} -------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*")


def _match_brace(text: str, start: int) -> int | None:
    """Index just past the brace group opening at text[start] == '{', or None if unbalanced.
    LaTeX-escaped braces (\\{ and \\}) are literal characters, not grouping."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def find_boxed(text: str) -> tuple[list[str], bool]:
    """All \\boxed{...} contents in order, and whether any box was unbalanced."""
    found: list[str] = []
    broken = False
    for m in _BOX_RE.finditer(text):
        i = m.end()
        if i < len(text) and text[i] == "{":
            end = _match_brace(text, i)
            if end is None:
                broken = True
                continue
            found.append(text[i + 1:end - 1])
        elif i < len(text) and m.group(0).endswith(" "):
            # `\boxed 5`: TeX takes the next token as the argument
            tok = re.match(r"[^\s$]+", text[i:])
            if tok:
                found.append(tok.group(0))
    return found, broken


# --- the policies ------------------------------------------------------------------------

_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_LINE_RE = re.compile(
    r"(?im)^[ \t>*#-]*(?:\*\*)?(?:final answer|answer)(?:\*\*)?\s*(?:is)?\s*[:：]\s*(?:\*\*)?(.+?)\s*$"
    r"|the (?:final )?answer is[:：]?\s*(.+?)\s*(?:\.\s|\.?$)")
_GSM8K_RE = re.compile(r"(?m)^\s*####\s*(.+?)\s*$")
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _inner(candidate: str) -> list[str]:
    """An answer block may itself box its answer; the box then is the answer."""
    boxes, _ = find_boxed(candidate)
    return boxes if boxes else [candidate]


def _policy_hits(policy: str, text: str) -> tuple[list[str], bool]:
    if policy == "answer_tag":
        return [a for block in _ANSWER_TAG_RE.findall(text) for a in _inner(block)], False
    if policy == "boxed":
        return find_boxed(text)
    if policy == "answer_line":
        hits = [a or b for a, b in _ANSWER_LINE_RE.findall(text)]
        return [a for h in hits for a in _inner(h)], False
    if policy == "gsm8k":
        return _GSM8K_RE.findall(text), False
    if policy == "last_number":
        nums = _NUMBER_RE.findall(text)
        return nums[-1:], False
    raise ValueError(f"unknown extraction policy {policy!r}")


def extract(text: str, policies: list[str], max_chars: int = 10000) -> Extraction:
    for policy in policies:
        hits, broken = _policy_hits(policy, text)
        if broken and not hits:
            return Extraction([], policy, PARSE_FAILED)
        if not hits:
            continue
        answers = [clean_answer(h) for h in hits]
        if any(not a or len(a) > max_chars for a in answers) or broken:
            return Extraction(answers, policy, PARSE_FAILED)
        distinct = list(dict.fromkeys(answers))
        return Extraction(distinct, policy, None)
    return Extraction([], None, PARSE_FAILED)


# --- normalisation -----------------------------------------------------------------------

_APPROX_RE = re.compile(
    r"(约为|大约|约|≈|≃|\\approx|\\simeq|\bapproximately\b|\bapprox\.?|\babout\b|\baround\b|\broughly\b)\s*",
    re.IGNORECASE)
_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:,|\{,\}|\\,)\d{3})+(?![\d,]|\{,\})(?!\.\d*,)")
_TEXT_WRAP_RE = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\{(.*)\}$", re.DOTALL)
_PREFIX_RE = re.compile(r"^(?:the (?:final )?answer is|answer\s*[:：]|final answer\s*[:：])\s*", re.IGNORECASE)
_SCI_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
_NUM_WORDS_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s+((?:[A-Za-z]{2,}\.?(?:\^?\d)?\s*)+)$")
# words after a number that are mathematics, not units: `2 pi` is not 2
_MATH_WORDS = {"pi", "sqrt", "ln", "log", "sin", "cos", "tan", "sec", "csc", "cot", "exp", "arcsin", "arccos",
               "arctan", "sinh", "cosh", "tanh", "mod", "or", "and", "times", "cdot", "div", "pm", "infty"}


def strip_approx(text: str) -> tuple[str, bool]:
    """Remove an approximation marker; `x ≈ 3.14` becomes `x = 3.14`."""
    m = _APPROX_RE.search(text)
    if not m:
        return text, False
    before, after = text[:m.start()].strip(), text[m.end():].strip()
    if before and not before.endswith(("=", "$")):
        return f"{before} = {after}", True
    return (before + after).strip(), True


def clean_answer(ans: str) -> str:
    """Remove the wrapping a model (or a data set) puts around a final answer."""
    s = ans.strip()
    for _ in range(3):  # wrappers nest: $\boxed{\text{5}}$.
        prev = s
        s = s.strip().rstrip(".。").strip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        for a, b in (("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(a) and s.endswith(b):
                s = s[2:-2].strip()
        s = _PREFIX_RE.sub("", s)
        boxes, _ = find_boxed(s)
        if len(boxes) == 1 and s.startswith(("\\boxed", "\\fbox")) and s.endswith("}"):
            s = boxes[0]
        m = _TEXT_WRAP_RE.match(s)
        if m and _match_brace(s, s.index("{")) == len(s):
            s = m.group(1)
        if s == prev:
            break
    s, _ = strip_approx(s)
    return s.strip()


def normalise(ans: str) -> str:
    """Rewrite notations math-verify misreads: thousands separators, `1e-30`, `5 dollars`."""
    s = _THOUSANDS_RE.sub(lambda m: re.sub(r"\{,\}|,|\\,", "", m.group(0)), ans)
    s = _SCI_RE.sub(r"\1\\times 10^{\2}", s)
    s = s.replace("°", "").replace("^\\circ", "").replace("^{\\circ}", "")
    m = _NUM_WORDS_RE.match(s.strip())
    if m and not {w.rstrip(".^0123456789").lower() for w in m.group(2).split()} & _MATH_WORDS:
        s = m.group(1)  # a number followed only by unit words: `12 apples`, `5 cm^2`
    return s.strip()


def parse_gold(answer: str) -> Gold:
    """The gold as written in a data set: maybe boxed, `#### N`, or with an approx marker."""
    s = answer.strip()
    m = _GSM8K_RE.search(s)
    if m:
        s = m.group(1)
    boxes, _ = find_boxed(s)
    if len(boxes) == 1:
        s = boxes[0]
    s = clean_answer(_APPROX_RE.sub("≈", s, count=1)) if _APPROX_RE.search(s) else clean_answer(s)
    _, approx = strip_approx(answer)
    decimals = None
    if approx:
        text = normalise(s)
        sci = re.search(r"(\d+)(?:\.(\d+))?\s*\\times\s*10\^\{?(-?\d+)\}?\s*$", text)
        if sci:  # 1.2 \times 10^{3} states hundreds: decimals = 1 - 3 = -2
            decimals = len(sci.group(2) or "") - int(sci.group(3))
        else:
            nums = re.findall(r"\d+(?:\.(\d+))?", text)
            if nums:
                decimals = len(nums[-1])
    return Gold(normalise(s), decimals)


# --- anti-hacking: an answer that hedges between several values ------------------------

_HEDGE_RE = re.compile(r"\bor\b|\bone of\b|\beither\b|或|\\lor\b|\\vee\b|\\text\{\s*or\s*\}", re.IGNORECASE)


def _top_level_split(s: str, seps: str = ",;") -> list[str]:
    parts, depth, cur = [], 0, []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch in seps and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def hedges(pred: str, gold: str) -> bool:
    """True when `pred` offers several candidates where the gold is one value:
    'one of 1, 2, 3', '2 or 3', a bare list '1, 2, 3' against a single gold."""
    if _HEDGE_RE.search(pred) and not _HEDGE_RE.search(gold):
        return True
    return len(_top_level_split(pred)) > 1 and len(_top_level_split(gold)) == 1
