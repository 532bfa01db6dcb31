"""Answer extraction: where a completion states its final answer (pure string work, no sympy).

Extraction follows an explicit policy list per verifier; the first policy that
finds anything decides, and every answer that policy finds is returned, so the
verifier can refuse outputs that state several different final answers.

Every policy is linear in the completion's length: the completion is written by
the policy being trained, so it is attacker text. No regular expression here can
backtrack over an unbounded run (a marker followed by 100 KB of whitespace,
thousands of unclosed `\\boxed{` or `<answer>` openings): brace matching is one
pass with a stack, tag pairing one pass over the tags, and each line pattern
consumes what it scanned. `bench/bench_math_verify.py --attacks` measures it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARSE_FAILED = "parse_failed"
MULTIPLE_ANSWERS = "multiple_answers"
MAX_ANSWERS = 64
"""More final answers than this (boxes, tags, answer lines) is a parse failure, not a hedge to grade."""


@dataclass(frozen=True)
class Extraction:
    answers: list[str]
    """Every final answer the deciding policy found, cleaned, in order of appearance."""
    policy: str | None = None
    flag: str | None = None
    """None, PARSE_FAILED (nothing unambiguous to grade) or MULTIPLE_ANSWERS."""


# --- brace matching: one pass ------------------------------------------------------------

_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)


def brace_pairs(text: str) -> dict[int, int]:
    """{index of '{': index just past its matching '}'} for every balanced group, in one pass.
    LaTeX-escaped braces (\\{ and \\}) are literal characters, not grouping."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN_RE.finditer(text):
        ch = m.group()
        if ch == "{":
            stack.append(m.start())
        elif ch == "}" and stack:
            pairs[stack.pop()] = m.end()
    return pairs


def match_brace(text: str, start: int) -> int | None:
    """Index just past the brace group opening at text[start] == '{', or None if unbalanced."""
    if text[start : start + 1] != "{":
        return None
    end = brace_pairs(text[start:]).get(0)
    return None if end is None else start + end


_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])[ \t]*")
_TEX_TOKEN_RE = re.compile(r"[^\s$]+")


def _match_from(text: str, start: int, max_len: int | None) -> int | None:
    """Index just past the group opening at text[start] == '{', scanning at most max_len + 2
    characters (a longer group is an answer refused anyway); None when it does not close there."""
    stop = len(text) if max_len is None else min(len(text), start + max_len + 2)
    depth = 0
    for m in _BRACE_TOKEN_RE.finditer(text, start, stop):
        ch = m.group()
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return m.end()
    return None


def find_boxed(text: str, *, max_len: int | None = None, max_hits: int | None = None) -> tuple[list[str], bool]:
    """The contents of the outermost \\boxed{...} (and \\fbox) in order, and whether a box was
    unbalanced (or longer than max_len). A box inside a box is part of the outer box's content.
    Either way the box policy refuses the completion, so the search stops at the first such box,
    and after max_hits + 1 boxes: each box is matched from where it opens, and the work stays
    linear however many boxes an attacker opens."""
    found: list[str] = []
    outer_end = 0
    for m in _BOX_RE.finditer(text):
        if m.start() < outer_end:
            continue  # inside a box already taken
        i = m.end()
        if text.startswith("{", i):
            end = _match_from(text, i, max_len)
            if end is None:
                return found, True
            found.append(text[i + 1 : end - 1])
            outer_end = end
        elif i < len(text) and m.group(0) != m.group(0).rstrip():
            tok = _TEX_TOKEN_RE.match(text, i)  # `\boxed 5`: TeX takes the next token as the argument
            if tok:
                found.append(tok.group(0))
        if max_hits is not None and len(found) > max_hits:
            break
    return found, False


# --- the policies ------------------------------------------------------------------------

# `Answer: x` at the start of a line, or `the answer is x` anywhere. Each alternative ends where
# the value begins, and no part of it can match the same run of characters two ways.
_ANSWER_LINE_RE = re.compile(
    r"^[ \t>*#-]{0,16}(?:final answer|answer)(?:\*\*)?\s*(?:is\s*)?[:：][\s*]*"
    r"|(?P<sentence>the (?:final )?answer is)[:：]?\s*"
    r"|(?:最终答案|答案)(?:是|为|[:：])[:：]?[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
_SENTENCE_END_RE = re.compile(r"\.\s|。")
_BLANKS_RE = re.compile(r"\s*")
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


_OPEN_TAG_RE = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE_TAG_RE = re.compile(r"</answer>", re.IGNORECASE)


def _answer_tags(text: str, max_hits: int) -> list[str]:
    """`<answer>...</answer>` blocks, each open tag paired with the next close tag after it
    (an open tag with no close after it ends the search: no later one can have one)."""
    out: list[str] = []
    pos = 0
    while len(out) <= max_hits and (m := _OPEN_TAG_RE.search(text, pos)) is not None:
        close = _CLOSE_TAG_RE.search(text, m.end())
        if close is None:
            break
        out.append(text[m.end() : close.start()])
        pos = close.end()
    return out


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


_ANSWER_WORD_RE = re.compile(r"answer|答案", re.IGNORECASE)


def _answer_lines(text: str, max_hits: int) -> list[str]:
    out: list[str] = []
    found = _ANSWER_WORD_RE.search(text)  # cheap scan first: the line pattern tries every line start
    if found is None:
        return out
    pos = text.rfind("\n", 0, found.start()) + 1
    while len(out) <= max_hits and (m := _ANSWER_LINE_RE.search(text, pos)) is not None:
        start, end = m.end(), _line_end(text, m.end())
        if m.group("sentence"):  # `the answer is 5. Then ...`: the value ends with its sentence
            stop = _SENTENCE_END_RE.search(text, start, end)
            if stop is not None:
                end = stop.start()
        value = text[start:end].strip().rstrip(".")
        if value:
            out.append(value)
        pos = max(end, m.end() + 1)
    return out


def _gsm8k(text: str, max_hits: int) -> list[str]:
    """`#### x` lines: found with str.find (a regex anchored at line starts would try each of
    100,000 empty lines), each checked for nothing but blanks before it on its line."""
    out: list[str] = []
    pos = text.find("####")
    while pos >= 0 and len(out) <= max_hits:
        line_start = text.rfind("\n", max(0, pos - 17), pos) + 1
        if (line_start > 0 or pos <= 16) and not text[line_start:pos].strip(" \t"):
            m = _BLANKS_RE.match(text, pos + 4)
            value = text[m.end() : _line_end(text, m.end())].strip()
            if value:
                out.append(value)
        pos = text.find("####", pos + 4)
    return out


def _inner(candidate: str) -> list[str]:
    """An answer block may itself box its answer; the box then is the answer."""
    boxes, _ = find_boxed(candidate)
    return boxes if boxes else [candidate]


def _policy_hits(policy: str, text: str, max_chars: int) -> tuple[list[str], bool]:
    if policy == "boxed":
        return find_boxed(text, max_len=max_chars, max_hits=MAX_ANSWERS)
    if policy == "answer_tag":
        hits = _answer_tags(text, MAX_ANSWERS)
    elif policy == "answer_line":
        hits = _answer_lines(text, MAX_ANSWERS)
    elif policy == "gsm8k":
        return _gsm8k(text, MAX_ANSWERS), False
    elif policy == "last_number":
        numbers = list(_NUMBER_RE.finditer(text))
        return ([numbers[-1].group()] if numbers else []), False
    else:
        raise ValueError(f"unknown extraction policy {policy!r}")
    # an over-long block is refused before it is searched again (keeps the work linear)
    return [a for h in hits for a in (_inner(h) if len(h) <= max_chars else [h])], False


def extract(text: str, policies: list[str], max_chars: int = 10000) -> Extraction:
    """The final answer(s) of `text` by the first policy in `policies` that finds any.
    An answer longer than `max_chars` is a parse failure, not something to verify."""
    for policy in policies:
        hits, broken = _policy_hits(policy, text, max_chars)
        if broken and not hits:
            return Extraction([], policy, PARSE_FAILED)
        if not hits:
            continue
        if broken or len(hits) > MAX_ANSWERS or any(len(h) > max_chars for h in hits):
            return Extraction([], policy, PARSE_FAILED)
        answers = [clean_answer(h) for h in hits]
        if any(not a for a in answers):
            return Extraction(answers, policy, PARSE_FAILED)
        return Extraction(list(dict.fromkeys(answers)), policy, None)
    return Extraction([], None, PARSE_FAILED)


# --- the wrapping around an answer --------------------------------------------------------

_WRAPPERS = ("\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\boldsymbol", "\\bm", "\\mbox", "\\textnormal")
_PREFIX_RE = re.compile(
    r"^(?:the (?:final )?answer is|final answer\s*[:：]|answer\s*[:：]|(?:最终答案|答案)(?:是|为)?[:：]?)\s*",
    re.IGNORECASE,
)


def _unwrap_command(s: str) -> str:
    """`\\text{...}` (and the like) around the whole answer -> its content."""
    for cmd in _WRAPPERS:
        if s.startswith(cmd + "{") and s.endswith("}") and match_brace(s, len(cmd)) == len(s):
            return s[len(cmd) + 1 : -1]
    return s


def clean_answer(ans: str) -> str:
    """Remove the wrapping a model (or a data set) puts around a final answer:
    `$...$`, `\\(...\\)`, `\\[...\\]`, `**...**`, `\\boxed{}`, `\\text{}`, `\\displaystyle`, a final period."""
    s = ans.strip()
    for _ in range(4):  # wrappers nest: $\boxed{\text{5}}$.
        prev = s
        s = s.strip().rstrip(".。").strip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if len(s) >= 4 and s.startswith("**") and s.endswith("**"):
            s = s[2:-2].strip()
        for a, b in (("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(a) and s.endswith(b):
                s = s[2:-2].strip()
        s = _PREFIX_RE.sub("", s)
        if s.startswith("\\displaystyle"):
            s = s[len("\\displaystyle") :].strip()
        if s.startswith(("\\boxed", "\\fbox")) and s.endswith("}"):
            boxes, broken = find_boxed(s)
            if len(boxes) == 1 and not broken and s.find("{") >= 0 and match_brace(s, s.find("{")) == len(s):
                s = boxes[0]
        s = _unwrap_command(s)
        if s == prev:
            break
    return s.strip()
