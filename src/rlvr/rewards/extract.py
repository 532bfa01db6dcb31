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
    if text[start:start + 1] != "{":
        return None
    end = brace_pairs(text[start:]).get(0)
    return None if end is None else start + end


_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])[ \t]*")
_TEX_TOKEN_RE = re.compile(r"[^\s$]+")


def find_boxed(text: str) -> tuple[list[str], bool]:
    """The contents of the outermost \\boxed{...} (and \\fbox) in order, and whether any box
    was unbalanced. A box inside a box is part of the outer box's content."""
    found: list[str] = []
    broken = False
    pairs: dict[int, int] | None = None
    outer_end = 0
    for m in _BOX_RE.finditer(text):
        if m.start() < outer_end:
            continue  # inside a box already taken
        i = m.end()
        if i < len(text) and text[i] == "{":
            if pairs is None:
                pairs = brace_pairs(text)
            end = pairs.get(i)
            if end is None:
                broken = True
                continue
            found.append(text[i + 1:end - 1])
            outer_end = end
        elif i < len(text) and m.group(0) != m.group(0).rstrip():
            tok = _TEX_TOKEN_RE.match(text, i)  # `\boxed 5`: TeX takes the next token as the argument
            if tok:
                found.append(tok.group(0))
    return found, broken


# --- the policies ------------------------------------------------------------------------

_TAG_RE = re.compile(r"<(/?)answer>", re.IGNORECASE)
# `Answer: x` at the start of a line, or `the answer is x` anywhere. Each alternative ends where
# the value begins, and no part of it can match the same run of characters two ways.
_ANSWER_LINE_RE = re.compile(
    r"^[ \t>*#-]{0,16}(?:final answer|answer)(?:\*\*)?\s*(?:is\s*)?[:：](?:\s|\*\*)*"
    r"|(?P<sentence>the (?:final )?answer is)[:：]?\s*"
    r"|(?:最终答案|答案)(?:是|为|[:：])[:：]?[ \t]*", re.IGNORECASE | re.MULTILINE)
_SENTENCE_END_RE = re.compile(r"\.\s|。")
_GSM8K_RE = re.compile(r"^[ \t]*####\s*", re.MULTILINE)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _answer_tags(text: str) -> list[str]:
    """`<answer>...</answer>` blocks, each open tag paired with the next close tag after it."""
    out: list[str] = []
    start = None
    for m in _TAG_RE.finditer(text):
        if not m.group(1):
            if start is None:
                start = m.end()
        elif start is not None:
            out.append(text[start:m.start()])
            start = None
    return out


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _answer_lines(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while (m := _ANSWER_LINE_RE.search(text, pos)) is not None:
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


def _gsm8k(text: str) -> list[str]:
    out = []
    for m in _GSM8K_RE.finditer(text):
        value = text[m.end():_line_end(text, m.end())].strip()
        if value:
            out.append(value)
    return out


def _inner(candidate: str) -> list[str]:
    """An answer block may itself box its answer; the box then is the answer."""
    boxes, _ = find_boxed(candidate)
    return boxes if boxes else [candidate]


def _policy_hits(policy: str, text: str, max_chars: int) -> tuple[list[str], bool]:
    if policy == "boxed":
        return find_boxed(text)
    if policy == "answer_tag":
        hits = _answer_tags(text)
    elif policy == "answer_line":
        hits = _answer_lines(text)
    elif policy == "gsm8k":
        return _gsm8k(text), False
    elif policy == "last_number":
        m = None
        for m in _NUMBER_RE.finditer(text):
            pass
        return ([m.group()] if m else []), False
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
_PREFIX_RE = re.compile(r"^(?:the (?:final )?answer is|final answer\s*[:：]|answer\s*[:：]|(?:最终答案|答案)(?:是|为)?[:：]?)\s*",
                        re.IGNORECASE)


def _unwrap_command(s: str) -> str:
    """`\\text{...}` (and the like) around the whole answer -> its content."""
    for cmd in _WRAPPERS:
        if s.startswith(cmd + "{") and s.endswith("}") and match_brace(s, len(cmd)) == len(s):
            return s[len(cmd) + 1:-1]
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
            s = s[len("\\displaystyle"):].strip()
        if s.startswith(("\\boxed", "\\fbox")) and s.endswith("}"):
            boxes, broken = find_boxed(s)
            if len(boxes) == 1 and not broken and s.find("{") >= 0 and match_brace(s, s.find("{")) == len(s):
                s = boxes[0]
        s = _unwrap_command(s)
        if s == prev:
            break
    return s.strip()
