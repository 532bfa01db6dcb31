"""One spelling for what renders the same, before an answer is read (rlvr.rewards.answers):
Unicode forms, LaTeX spacing and invisible commands, thousands separators, scientific notation,
Python syntax; and the gold as a data set writes it (`#### 72`, `\\boxed{5}`)."""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

from rlvr.rewards.braces import brace_pairs, find_boxed
from rlvr.rewards.extract import clean_answer

_CHAR_MAP = str.maketrans(
    {
        "²": "^2",
        "³": "^3",
        "¹": "^1",
        "⁄": "/",
        "−": "-",
        "‐": "-",
        "×": "\\times ",
        "÷": "\\div ",
        "·": "\\cdot ",
        "√": "\\sqrt",
        "π": "\\pi ",
        "∞": "\\infty ",
        "∅": "\\emptyset ",
        "±": "\\pm ",
        "∓": "\\mp ",
        "∶": ":",
        "\u200b": "",
        "\u200c": "",
        "\u200d": "",
        "\u200e": "",
        "\u200f": "",
        "\u2060": "",
        "\ufeff": "",
        "\u00ad": "",
    }
)
_LATEX_SUBS = [
    (re.compile(r",\\!\s*(?=\d{3}(?!\d))"), ","),  # `11,\! 111,\! 100`: MATH's thousands
    (re.compile(r"\\varnothing(?![a-zA-Z])"), "\\\\emptyset "),
    # a matrix in brackets: `\left[\begin{array}{cc}...\end{array}\right]`, `\begin{bmatrix}` -> pmatrix
    (re.compile(r"(?:\\left)?[\[(]\s*\\begin\{array\}\{[lcr| ]*\}"), "\\\\begin{pmatrix}"),
    (re.compile(r"\\end\{array\}\s*(?:\\right)?[\])]"), "\\\\end{pmatrix}"),
    (re.compile(r"\\(begin|end)\{[bB]?matrix\}"), r"\\\1{pmatrix}"),  # not vmatrix: a determinant
    (
        re.compile(
            r"\\!|\\left(?![a-zA-Z])\.?|\\right(?![a-zA-Z])\.?|\\[bB]ig+[lr]?(?![a-zA-Z])|\\displaystyle|\\limits"
        ),
        "",
    ),
    (re.compile(r"\\[dt]frac(?![a-zA-Z])"), "\\\\frac"),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\^\{?\\circ\}?|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])"), "°"),
]
_SPACING_RE = re.compile(r"\\\\|\\(?:,|;|:| )|\\q?quad(?![a-zA-Z])")  # `\\` (a matrix's new row) stays
_THOUSANDS_RE = re.compile(
    r"(?<![\d.,])\d{1,3}(?:(?:,|\\,)\d{3})+(?![\d,])(?!\.\d*,)"
    r"|(?<![\d.,] )(?<![\d.,])\d{1,3}(?: \d{3})+(?![\d.,]| \d)"
)  # 12,345 12\,345 12 345
_SCI_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
# `~` is LaTeX's unbreakable space before a unit (`5~\text{cm}`); between two values it is a range (`2~3`)
_TILDE_SPACE_RE = re.compile(r"~(?=\s*(?:[A-Za-z°]|\\(?:text|mathrm|textrm|mbox|operatorname)(?![A-Za-z])))")
SPACES_RE = re.compile(r"\s+")
_PROGRAM_RE = re.compile(r"\*\*|(?<![\\A-Za-z])(?:sqrt|cbrt|exp|abs|pi)(?![A-Za-z])")
_WORD_FUNC_RE = re.compile(r"(?<![\\A-Za-z])(sqrt|cbrt|exp|abs)\s*\(")


def _program_to_latex(s: str) -> str:
    """`3**(1/3)`, `sqrt(5) - 2`, `2*pi`: Python syntax as LaTeX math-verify reads."""
    s = s.replace("**", "^")
    out, i = [], 0
    pairs = None
    for m in _WORD_FUNC_RE.finditer(s):
        if m.start() < i:
            continue
        if pairs is None:
            pairs = _paren_pairs(s)
        close = pairs.get(m.end() - 1)
        if close is None:
            continue
        arg = s[m.end() : close - 1]
        name = m.group(1)
        out.append(s[i : m.start()])
        out.append(
            {
                "sqrt": f"\\sqrt{{{arg}}}",
                "cbrt": f"\\sqrt[3]{{{arg}}}",
                "exp": f"e^{{{arg}}}",
                "abs": f"\\left|{arg}\\right|",
            }[name]
        )
        i = close
    out.append(s[i:])
    s = "".join(out)
    s = re.sub(r"\^\(([^()]*)\)", r"^{(\1)}", s)  # 3^(1/3) -> 3^{(1/3)}
    s = re.sub(r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi ", s)
    return s.replace("*", " \\cdot ")


def _paren_pairs(s: str) -> dict[int, int]:
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(s):
        if ch == "(":
            stack.append(i)
        elif ch == ")" and stack:
            pairs[stack.pop()] = i + 1
    return pairs


_INVISIBLE_CMD_RE = re.compile(r"\\(phantom|hphantom|vphantom|hspace|vspace|color|textcolor|colorbox)\s*\{")


def _drop_invisible(s: str) -> str:
    """What renders nothing goes: `\\phantom{13}`, `\\hspace{1em}`, the colour of `\\color{red}`
    and `\\textcolor{red}{12}` (which keeps 12)."""
    if not _INVISIBLE_CMD_RE.search(s):
        return s
    pairs = brace_pairs(s)
    out, i = [], 0
    for m in _INVISIBLE_CMD_RE.finditer(s):
        close = pairs.get(m.end() - 1)
        if m.start() < i or close is None:
            continue
        out.append(s[i : m.start()])
        i = close
        if m.group(1) in ("textcolor", "colorbox") and s[i : i + 1] == "{" and i in pairs:
            out.append(s[i + 1 : pairs[i] - 1])
            i = pairs[i]
    out.append(s[i:])
    return "".join(out)


_ASSIGNMENT_RE = re.compile(r"\s*([A-Za-z])\s*=\s*([^,;=<>]+?)\s*")


def _assignments_as_tuples(s: str) -> str:
    """`p=5,q=2;p=7,q=2` -> `(5,2),(7,2)`: solutions written as assignments of the same variables
    (two or more each, in groups split by `;`) are tuples ordered by variable name."""
    groups = s.split(";")
    rows = []
    for group in groups:
        pairs = [_ASSIGNMENT_RE.fullmatch(x) for x in group.split(",")]
        if not all(pairs) or len(pairs) < 2:
            return s
        names = [m.group(1) for m in pairs]
        if len(set(names)) != len(names):
            return s
        rows.append(dict(m.groups() for m in pairs))
    if any(sorted(r) != sorted(rows[0]) for r in rows):
        return s
    return ",".join("(" + ",".join(r[k] for k in sorted(r)) + ")" for r in rows)


def _thousands(s: str, m: re.Match) -> str:
    """`12,345` -> `12345`, except a pair in brackets (`(12,102)`: an interval's ends)."""
    if m.start() > 0 and s[m.start() - 1] in "([" and s[m.end() : m.end() + 1] in (")", "]"):
        return m.group(0)
    return re.sub(r"\\,|[, ]", "", m.group(0))


_CJK_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CJK_UNITS = {"十": 10, "百": 100, "千": 1000}
_CJK_NUMERAL = "[零〇一二两三四五六七八九十百千万亿]+"
_CJK_PERCENT_RE = re.compile(rf"(百|千)分之\s*(-?\d+(?:\.\d+)?|{_CJK_NUMERAL})")
_CJK_WHOLE_RE = re.compile(rf"(负)?({_CJK_NUMERAL})")


def cjk_number(text: str) -> int | None:
    """`二十` -> 20, `三千零五` -> 3005, `一亿二千万` -> 120000000; None when `text` is not one numeral
    (`二三`, `二十三十`: digits or places that repeat or rise within a group)."""
    groups = {"亿": 10**8, "万": 10**4}
    total, section, digit, last_place, last_group = 0, 0, None, None, None
    for ch in text:
        if ch in "零〇" and digit is None:  # `三千零五`: a place left empty
            continue
        if ch in _CJK_DIGITS:
            if digit is not None:
                return None
            digit = _CJK_DIGITS[ch]
        elif ch in _CJK_UNITS:
            place = _CJK_UNITS[ch]
            if last_place is not None and place >= last_place:
                return None
            section, digit, last_place = section + (1 if digit is None else digit) * place, None, place
        elif ch in groups:
            if last_group is not None and groups[ch] >= last_group or section + (digit or 0) == 0:
                return None
            total += (section + (digit or 0)) * groups[ch]
            section, digit, last_place, last_group = 0, None, None, groups[ch]
        else:
            return None
    return total + section + (digit or 0)


def _cjk_numerals(s: str) -> str:
    """A whole answer written in Chinese numerals, or a percent after 百分之, in digits."""
    m = _CJK_WHOLE_RE.fullmatch(s.strip())
    if (
        m
        and (m.group(2)[0] == "十" or set(m.group(2)) & set(_CJK_DIGITS))
        and (n := cjk_number(m.group(2))) is not None
    ):
        return f"-{n}" if m.group(1) else str(n)
    return _CJK_PERCENT_RE.sub(lambda m: _as_digits(m.group(2)) + ("\\%" if m.group(1) == "百" else "‰"), s)


def _as_digits(text: str) -> str:
    n = cjk_number(text) if not text[-1].isdigit() else None
    return text if n is None else str(n)


def canonical(s: str) -> str:
    """One spelling for what renders the same: Unicode forms (fullwidth, superscripts,
    invisible characters), LaTeX spacing and sizing, thousands separators (`12,\\!345`,
    `11,\\! 111`, `1{,}000`), `1e-3`, degree signs, `\\varnothing` and `∅` as `\\emptyset`, a
    matrix in any brackets as `pmatrix`, `百分之20` and `百分之二十` as `20\\%`, `二十` as `20`, assignments as tuples (`p=5,q=2;p=7,q=2`
    as `(5,2),(7,2)`), and Python syntax (`3**(1/3)`)."""
    if not s.isascii():  # every key of _CHAR_MAP is non-ASCII, and NFKC leaves ASCII alone
        s = unicodedata.normalize("NFKC", s.translate(_CHAR_MAP)).translate(_CHAR_MAP)
        s = _cjk_numerals(s)  # 百分之20, 百分之二十: 20%; 二十: 20
    if "\\" in s or "{" in s:
        s = _drop_invisible(s)
        for pattern, repl in _LATEX_SUBS:
            s = pattern.sub(repl, s)
    if "line" in s or "dot" in s or "bar" in s or "(" in s:
        s = _repeating(s)
    if "," in s or " " in s:
        s = _THOUSANDS_RE.sub(lambda m: _thousands(s, m), s)  # before `\,` is a space
    if "\\" in s:
        s = _SPACING_RE.sub(lambda m: m.group() if m.group() == "\\\\" else " ", s)
        s = s[:-1] if s.endswith("\\") and not s.endswith("\\\\") else s  # `185\`: a stray backslash
    if "e" in s or "E" in s:
        s = _SCI_RE.sub(r"\1\\times 10^{\2}", s)
    if "~" in s:
        s = _TILDE_SPACE_RE.sub(" ", s)
    if _PROGRAM_RE.search(s):
        s = _program_to_latex(s)
    if "=" in s and "," in s:
        s = _assignments_as_tuples(s)
    return SPACES_RE.sub(" ", s).strip()


_REPEATING_RE = re.compile(
    r"(?<![\d.])(\d*)\.(\d*)(?:\\(?:overline|bar)\s*\{(\d{1,30})\}"  # 0.4\overline{3}
    r"|\\dot\s*\{(\d)\}(?:(\d{0,30})\\dot\s*\{(\d)\})?"  # 0.\dot{6}, 0.\dot{1}4\dot{2}
    r"|\((\d{1,30})\))(?![\d.(])"  # 0.(6)
)


def _repeating(s: str) -> str:
    """A repeating decimal as its exact fraction: `0.\\overline{6}`, `0.\\dot{6}`, `0.(6)` -> `\\frac{2}{3}`
    (`0.\\dot{1}4\\dot{2}` repeats 142, the dots marking the block's first and last digit)."""

    def frac(m: re.Match[str]) -> str:
        whole, fixed = m.group(1), m.group(2)
        block = m.group(3) or m.group(7) or (m.group(4) + (m.group(5) or "") + (m.group(6) or ""))
        value = int(whole or "0") + Fraction(
            int(fixed + block) - int(fixed or "0"), 10 ** len(fixed) * (10 ** len(block) - 1)
        )
        return f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 else str(value)

    return _REPEATING_RE.sub(frac, s)


_GSM8K_GOLD_RE = re.compile(r"####[ \t]*([^\n]+)")


def gold_text(answer: str) -> str:
    """The gold as a data set writes it, unwrapped: `#### 72` -> `72`, `\\boxed{5}` -> `5`."""
    s = answer.strip()
    m = _GSM8K_GOLD_RE.search(s)
    if m:
        s = m.group(1)
    boxes, _ = find_boxed(s)
    if len(boxes) == 1:
        s = boxes[0]
    return clean_answer(s)


def normalise(ans: str) -> str:
    """The canonical text of an answer (for majority voting and display)."""
    return canonical(ans)
