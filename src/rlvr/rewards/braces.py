"""Brace groups and boxes: one pass with a stack, never a backtracking pattern (pure string work).

brace_pairs(r"\\frac{1}{2}")          # {5: 8, 8: 11}: each '{' -> just past its '}'
find_boxed(r"x \\boxed{5} \\boxed{6")  # (['5'], True): the second box never closes
"""

from __future__ import annotations

import re

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


def boxed_spans(
    text: str, *, max_len: int | None = None, max_hits: int | None = None
) -> tuple[list[tuple[str, int, int]], bool]:
    """(content, start of `\\boxed`, end past its closing brace) of the outermost boxes (and \\fbox)
    in order, and whether a box was unbalanced (or longer than max_len). A box inside a box is
    part of the outer box's content. Either way the box policy refuses the completion, so the
    search stops at the first such box, and after max_hits + 1 boxes: each box is matched from
    where it opens, and the work stays linear however many boxes an attacker opens."""
    found: list[tuple[str, int, int]] = []
    outer_end = 0
    for m in _BOX_RE.finditer(text):
        if m.start() < outer_end:
            continue  # inside a box already taken
        i = m.end()
        if text.startswith("{", i):
            end = _match_from(text, i, max_len)
            if end is None:
                return found, True
            found.append((text[i + 1 : end - 1], m.start(), end))
            outer_end = end
        elif i < len(text) and m.group(0) != m.group(0).rstrip():
            tok = _TEX_TOKEN_RE.match(text, i)  # `\boxed 5`: TeX takes the next token as the argument
            if tok:
                found.append((tok.group(0), m.start(), tok.end()))
                outer_end = tok.end()
        if max_hits is not None and len(found) > max_hits:
            break
    return found, False


def find_boxed(text: str, *, max_len: int | None = None, max_hits: int | None = None) -> tuple[list[str], bool]:
    """The contents of the outermost boxes in order, and whether one was unbalanced (boxed_spans)."""
    found, broken = boxed_spans(text, max_len=max_len, max_hits=max_hits)
    return [content for content, _, _ in found], broken
