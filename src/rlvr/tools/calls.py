"""Tool calls in the model's text: read in one pass, never raising.

    calls = parse_tool_calls(text, "hermes")        # [ToolCall(name, arguments, error)]

The text is the policy's (or a client's): anything may be in it. The reader finds
`<tool_call>` blocks left to right with forward searches only (linear in the text), reads at
most MAX_CALLS of them, and answers every block it cannot take with a ToolCall whose `error`
tells the model what was wrong: malformed JSON, nesting deeper than MAX_DEPTH, an integer
longer than MAX_INT_DIGITS digits, a block longer than MAX_CALL_CHARS, or a call cut before
its `</tool_call>`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_CALLS = 8
"""Tool calls read from one assistant turn; more are answered with an error."""
MAX_CALL_CHARS = 16_384
"""A call longer than this is answered with an error, unread."""
MAX_DEPTH = 32
"""Nesting of arrays and objects in a call's JSON."""
MAX_INT_DIGITS = 64
"""Digits of an integer literal in a call's JSON (a longer one is an error, not a slow conversion)."""

_COMPACT_RE = re.compile(r"\s*([A-Za-z_][\w.-]*)\((.*)\)\s*", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    error: str | None = None
    """Why the call could not be read (malformed JSON, no name, cut): answered with this message."""


def parse_tool_calls(text: str, fmt: str) -> list[ToolCall]:
    """Every `<tool_call>...</tool_call>` block of an assistant turn. 'hermes' (Hermes/Qwen, what chat
    templates with tools use): a JSON object {"name": ..., "arguments": {...}}; 'compact' (small
    character-level models): `name(argument)`, the one string argument of a one-parameter tool.
    A last block with no `</tool_call>` is answered as a cut call, not taken for the final answer."""
    out: list[ToolCall] = []
    pos = 0
    while (start := text.find(OPEN, pos)) >= 0:
        if len(out) == MAX_CALLS:
            out.append(ToolCall("", {}, f"more than {MAX_CALLS} tool calls in one turn"))
            break
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            out.append(ToolCall("", {}, f"the tool call was cut: {OPEN} without {CLOSE}"))
            break
        body = text[start + len(OPEN) : end]
        if len(body) > MAX_CALL_CHARS:
            out.append(ToolCall("", {}, f"the tool call is longer than {MAX_CALL_CHARS} characters"))
        else:
            out.append(_hermes(body) if fmt == "hermes" else _compact(body))
        pos = end + len(CLOSE)
    return out


def _hermes(body: str) -> ToolCall:
    obj, error = _json(body)
    if error:
        return ToolCall("", {}, f"the tool call is not valid JSON ({error})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall("", {}, 'a tool call is a JSON object {"name": ..., "arguments": {...}}')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        args, error = _json(args)
        if error:
            return ToolCall(obj["name"], {}, "the arguments are not a JSON object")
    if not isinstance(args, dict):
        return ToolCall(obj["name"], {}, "the arguments are not a JSON object")
    return ToolCall(obj["name"], args)


def _compact(body: str) -> ToolCall:
    m = _COMPACT_RE.fullmatch(body)
    if m is None:
        return ToolCall("", {}, "a tool call is name(argument)")
    return ToolCall(m.group(1), {"": m.group(2)})


def read_json(text: str) -> Any:
    """JSON from an untrusted source, within MAX_DEPTH and MAX_INT_DIGITS; ValueError says what is wrong."""
    value, error = _json(text)
    if error:
        raise ValueError(error)
    return value


def _json(text: str) -> tuple[Any, str | None]:
    if (depth := _depth(text)) > MAX_DEPTH:
        return None, f"nested {depth} deep; at most {MAX_DEPTH}"
    try:
        return json.loads(text, parse_int=_bounded_int), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at column {exc.colno}"
    except (ValueError, RecursionError) as exc:
        return None, str(exc)


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (one pass)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def format_call(call: ToolCall, fmt: str) -> str:
    """The text of a call as the model writes it (cold-start demonstrations, serving)."""
    if fmt == "compact":
        return f"<tool_call>{call.name}({next(iter(call.arguments.values()), '')})</tool_call>"
    return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"
