"""Answer extraction: where a completion states its final answer (pure string work, no sympy).

Extraction follows an explicit policy list per verifier. Every final-answer marker
of every listed policy counts (boxes, answer tags, answer lines, `####` lines), so the
verifier can refuse outputs that state several different final answers wherever they
state them; where two markers overlap, the policy listed first reads the text. Each
marker is then read in its context (rlvr.rewards.context): what is attached to a box
joins its answer, and what follows a marker can make it several answers or withdraw it.

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

from rlvr.rewards.context import RETRACTED, SEVERAL, MathSpans, expression, tail_verdict
from rlvr.rewards.braces import boxed_spans, find_boxed, match_brace

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


# --- the markers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One final-answer marker: what it states (as written) and where it stands."""

    policy: str
    value: str
    start: int
    at: int
    """Where the value begins (past `Answer:`, `<answer>`, `\\boxed{`)."""
    end: int
    """Just past the marker: a box's closing brace, the closing tag, the end of an answer line's value."""


# `Answer: x` at the start of a line, or `the answer is x` anywhere. Each alternative ends where
# the value begins, and no part of it can match the same run of characters two ways.
_ANSWER_LINE_RE = re.compile(
    r"^[ \t>*#-]{0,16}(?:final answer|answer)(?:\*\*)?\s*(?:is\s*)?[:：][\s*]*"
    r"|(?<=[.!?。] )(?P<inline>(?:\*\*)?(?:final answer|answer)(?:\*\*)?\s*(?:is\s*)?[:：])[\s*]*"
    r"|(?P<sentence>the (?:final )?answer is)[:：]?\s*"
    r"|(?:最终答案|答案)(?:是|为|[:：])[:：]?[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
_SENTENCE_END_RE = re.compile(r"\.\s|。")
_BLANKS_RE = re.compile(r"\s*")
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


_OPEN_TAG_RE = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE_TAG_RE = re.compile(r"</answer>", re.IGNORECASE)


def _answer_tags(text: str, max_hits: int) -> list[Hit]:
    """`<answer>...</answer>` blocks, each open tag paired with the next close tag after it
    (an open tag with no close after it ends the search: no later one can have one)."""
    out: list[Hit] = []
    pos = 0
    while len(out) <= max_hits and (m := _OPEN_TAG_RE.search(text, pos)) is not None:
        close = _CLOSE_TAG_RE.search(text, m.end())
        if close is None:
            break
        out.append(Hit("answer_tag", text[m.end() : close.start()], m.start(), m.end(), close.end()))
        pos = close.end()
    return out


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


_ANSWER_WORD_RE = re.compile(r"answer|答案", re.IGNORECASE)


def _answer_lines(text: str, max_hits: int) -> list[Hit]:
    out: list[Hit] = []
    found = _ANSWER_WORD_RE.search(text)  # cheap scan first: the line pattern tries every line start
    if found is None:
        return out
    pos = text.rfind("\n", 0, found.start()) + 1
    while len(out) <= max_hits and (m := _ANSWER_LINE_RE.search(text, pos)) is not None:
        start, end = m.end(), _line_end(text, m.end())
        if m.group("sentence") or m.group("inline"):  # `the answer is 5. Then ...`: it ends with its sentence
            stop = _SENTENCE_END_RE.search(text, start, end)
            if stop is not None:
                end = stop.start()
        value = text[start:end].strip().rstrip(".")
        if value:
            out.append(Hit("answer_line", value, m.start(), start, end))
        pos = max(end, m.end() + 1)
    return out


def _gsm8k(text: str, max_hits: int) -> list[Hit]:
    """`#### x` lines: found with str.find (a regex anchored at line starts would try each of
    100,000 empty lines), each checked for nothing but blanks before it on its line."""
    out: list[Hit] = []
    pos = text.find("####")
    while pos >= 0 and len(out) <= max_hits:
        line_start = text.rfind("\n", max(0, pos - 17), pos) + 1
        if (line_start > 0 or pos <= 16) and not text[line_start:pos].strip(" \t"):
            m = _BLANKS_RE.match(text, pos + 4)
            end = _line_end(text, m.end())
            value = text[m.end() : end].strip()
            if value:
                out.append(Hit("gsm8k", value, pos, m.end(), end))
        pos = text.find("####", pos + 4)
    return out


def _boxes(text: str, max_chars: int) -> tuple[list[Hit], bool]:
    found, broken = boxed_spans(text, max_len=max_chars, max_hits=MAX_ANSWERS)
    return [Hit("boxed", content, start, end - len(content) - 1, end) for content, start, end in found], broken


def _policy_hits(policy: str, text: str, max_chars: int) -> tuple[list[Hit], bool]:
    if policy == "boxed":
        return _boxes(text, max_chars)
    if policy == "answer_tag":
        return _answer_tags(text, MAX_ANSWERS), False
    if policy == "answer_line":
        return _answer_lines(text, MAX_ANSWERS), False
    if policy == "gsm8k":
        return _gsm8k(text, MAX_ANSWERS), False
    if policy == "last_number":
        numbers = list(_NUMBER_RE.finditer(text))
        return [
            Hit(policy, numbers[-1].group(), numbers[-1].start(), numbers[-1].start(), numbers[-1].end())
        ] if numbers else [], False
    raise ValueError(f"unknown extraction policy {policy!r}")


FALLBACKS = ("last_number",)
"""Policies that are no final-answer marker: consulted only when no marker is found."""


def _overlaps(hit: Hit, taken: list[Hit]) -> Hit | None:
    return next((t for t in taken if hit.start < t.end and t.start < hit.end), None)


def _markers(text: str, policies: list[str], max_chars: int) -> tuple[list[Hit], bool]:
    """Every final-answer marker of every policy, in order of appearance. Where two overlap
    (a box inside an answer tag, `The answer is $\\boxed{5}$`), the policy listed first reads it;
    an answer line that runs into a box keeps what it states before the box, unless that is only
    the left side of the box's equation (`the answer is 14, so the total is \\boxed{9}` is two). Beside
    other markers, a sentence's `the answer is` followed by words is prose, not a marker."""
    taken: list[Hit] = []
    for policy in policies:
        hits, broken = _policy_hits(policy, text, max_chars)
        if broken:
            return [], True
        for hit in hits:
            other = _overlaps(hit, taken)
            if other is not None and hit.policy == "answer_line" and other.start > hit.start:
                before = text[hit.at : other.start]
                if _states_a_value(before):
                    taken.append(Hit(hit.policy, before.strip(), hit.start, hit.at, other.start))
            elif other is None:
                taken.append(hit)
        if len(taken) > MAX_ANSWERS:
            return taken, True
    if any(h.policy != "answer_line" for h in taken):  # prose that says "the answer is" is no second answer
        taken = [h for h in taken if not _prose(text, h)]
    return sorted(taken, key=lambda h: h.start), False


def _prose(text: str, hit: Hit) -> bool:
    """`check that the answer is an integer`: a sentence's `the answer is` followed by words, not a value."""
    sentence = text[hit.start : hit.at].lstrip().lower().startswith("the")
    return hit.policy == "answer_line" and sentence and hit.value[:1].isalpha()


_LEFT_SIDE_RE = re.compile(r"(?:=|\\approx|\\Rightarrow|\\implies|\\therefore)\s*$")


def _states_a_value(before: str) -> bool:
    s = before.strip().rstrip("$").rstrip().removeprefix("\\(").removeprefix("\\[").strip()
    return any(ch.isdigit() for ch in s) and not _LEFT_SIDE_RE.search(s)


def extract(text: str, policies: list[str], max_chars: int = 10000) -> Extraction:
    """The final answer(s) of `text`: every marker of the listed marker policies, each read in its
    context (rlvr.rewards.context); a fallback policy (`last_number`) only when no marker is found.
    An answer longer than `max_chars` is a parse failure, not something to verify."""
    markers = [p for p in policies if p not in FALLBACKS]
    hits, broken = _markers(text, markers, max_chars)
    if broken:
        return Extraction([], "+".join(dict.fromkeys(h.policy for h in hits)) or None, PARSE_FAILED)
    for policy in [p for p in policies if p in FALLBACKS] if not hits else []:
        hits, _ = _policy_hits(policy, text, max_chars)
        if hits:
            break
    if not hits:
        return Extraction([], None, PARSE_FAILED)
    policy = "+".join(dict.fromkeys(h.policy for h in hits))
    if any(len(h.value) > max_chars for h in hits):
        return Extraction([], policy, PARSE_FAILED)
    answers, flag = in_context(text, hits, max_chars)
    if flag is not None:
        return Extraction(answers, policy, flag)
    answers = [clean_answer(a) for a in answers]
    if any(not a for a in answers):
        return Extraction(answers, policy, PARSE_FAILED)
    return Extraction(list(dict.fromkeys(answers)), policy, None)


def in_context(text: str, hits: list[Hit], max_chars: int) -> tuple[list[str], str | None]:
    """Each marker's answer with what is attached to it, less the markers the text after them
    withdraws; (answers, flag) with flag PARSE_FAILED (nothing left, or unreadable) or MULTIPLE_ANSWERS."""
    spans = MathSpans(text if any(h.policy == "boxed" for h in hits) else "")
    answers: list[str] = []
    several = False
    for i, hit in enumerate(hits):
        readings, end = _readings(text, hit, spans, max_chars, hits[i - 1].end if i else 0)
        if readings is None:
            return [], PARSE_FAILED
        last, after = readings[-1]
        readings[-1] = (last, after + text[end : hits[i + 1].start if i + 1 < len(hits) else len(text)])
        for answer, tail in readings:
            verdict = tail_verdict(answer, tail) if hit.policy not in FALLBACKS else None
            if verdict != RETRACTED:
                several = several or verdict == SEVERAL
                answers.append(answer)
    if several:
        return answers, MULTIPLE_ANSWERS
    return answers, (None if answers else PARSE_FAILED)


def _readings(
    text: str, hit: Hit, spans: MathSpans, max_chars: int, floor: int
) -> tuple[list[tuple[str, str]] | None, int]:
    """(answer, the text after it that bears on it) for each answer a marker states, and where the
    marker's context ends: a box with what is attached to it; an answer block that itself boxes its
    answer, each box with what is attached to it and the rest of the block up to the next box."""
    if hit.policy == "boxed":
        stated, end = expression(text, hit.value, hit.start, hit.end, spans, floor)
        return (None if stated is None else [(stated, "")]), end
    if hit.policy in FALLBACKS or len(hit.value) > max_chars:
        return [(hit.value, "")], hit.end
    inner, broken = boxed_spans(hit.value)
    if broken or not inner:
        return [(hit.value, "")], hit.end
    block, out = MathSpans(hit.value), []
    for j, (content, start, end) in enumerate(inner):
        stated, used = expression(hit.value, content, start, end, block, inner[j - 1][2] if j else 0)
        if stated is None:
            return None, hit.end
        out.append((stated, hit.value[used : inner[j + 1][1] if j + 1 < len(inner) else len(hit.value)]))
    return out, hit.end


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
    `$...$`, `\\(...\\)`, `\\[...\\]`, `**...**`, quotes, `\\boxed{}`, `\\text{}`, `\\displaystyle`, a final period."""
    s = ans.strip()
    for _ in range(4):  # wrappers nest: $\boxed{\text{5}}$.
        prev = s
        s = s.strip().rstrip(".。").strip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if len(s) >= 4 and s.startswith("**") and s.endswith("**"):
            s = s[2:-2].strip()
        for quote in ('\\"', '"', "“"):  # `"12 and 13"`: quoted as a whole
            close = "”" if quote == "“" else quote
            if len(s) >= 2 * len(quote) and s.startswith(quote) and s.endswith(close):
                s = s[len(quote) : -len(close)].strip()
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
