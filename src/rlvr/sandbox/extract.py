"""Finding the program in a completion."""

from __future__ import annotations

import re

# An opening fence with an optional info string, the body, and a closing fence. A block
# left open (generation cut off) is not a program.
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
PYTHON_TAGS = {"python", "py", "python3", "py3"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every closed fenced block, in order."""
    return [(m.group(2).strip().split(" ")[0].lower(), m.group(3)) for m in FENCE.finditer(text)]


def extract_code(text: str, mode: str = "last_python_block") -> str | None:
    """The program in `text` per `mode` (see CodeConfig.extract), or None when there is none."""
    if mode == "whole_text":
        return text if text.strip() else None
    blocks = fenced_blocks(text)
    if mode == "last_python_block":
        blocks = [b for b in blocks if b[0] in PYTHON_TAGS]
    elif mode != "last_block":
        raise ValueError(f"extract: unknown mode {mode!r}; use last_python_block, last_block or whole_text")
    code = blocks[-1][1] if blocks else None
    return code if code and code.strip() else None
