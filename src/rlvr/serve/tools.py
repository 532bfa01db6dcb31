"""Tool calling behind both APIs: what the model writes, as the clients' own shapes.

A model trained with tools (rlvr.envs 'tools', the Hermes format) writes
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Requests bring tool definitions
(OpenAI `tools`, Anthropic `tools` with `input_schema`), which go to the chat template's
`tools` (or a system message, for templates without them), and earlier calls and results, which
are rendered back as the model wrote and read them: a call as its `<tool_call>` text in the
assistant turn, a result as a `tool` message. A response's calls come back as OpenAI `tool_calls`
(finish_reason `tool_calls`) or Anthropic `tool_use` blocks (stop_reason `tool_use`); the text
outside them is the message's content.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from rlvr.serve.errors import APIError
from rlvr.tools import ToolCall, format_call, parse_tool_calls, read_json
from rlvr.tools.calls import CLOSE, OPEN


def as_hermes(name: str, arguments: dict[str, Any]) -> str:
    """An earlier call, as the model wrote it."""
    return format_call(ToolCall(name, arguments), "hermes")


def split_calls(text: str, offered: set[str]) -> tuple[str, list[ToolCall]]:
    """(the text outside the calls, the calls to tools the request offered that read cleanly). A call
    that does not read, or names a tool not offered, stays in the text, where the client sees it.
    One pass of forward searches: linear in the text, whatever tags it leaves open."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    while (start := text.find(OPEN, pos)) >= 0 and (end := text.find(CLOSE, start + len(OPEN))) >= 0:
        block = text[start : end + len(CLOSE)]
        (call,) = parse_tool_calls(block, "hermes")
        kept.append(text[pos:start])
        if call.error is None and call.name in offered:
            calls.append(call)
        else:
            kept.append(block)
        pos = end + len(CLOSE)
    content = ("".join(kept) + text[pos:]).strip()
    return (content, calls) if calls else (text, [])


def call_arguments(arguments: str, where: str) -> dict[str, Any]:
    """An earlier call's arguments (a JSON object as text) from a request: bounded in nesting and in
    integer size, or a 400 naming `where`."""
    try:
        args = read_json(arguments or "{}")
    except ValueError as exc:
        raise APIError(400, f"{where}: the arguments are not JSON rlvr reads ({exc})", param=where) from None
    if not isinstance(args, dict):
        raise APIError(400, f"{where}: the arguments are not a JSON object", param=where)
    return args


def known_call(call_id: str, ids: set[str], where: str) -> None:
    """A tool result answers a call an earlier assistant turn made (both real APIs answer 400 otherwise)."""
    if call_id not in ids:
        raise APIError(400, f"{where}: no earlier tool call has id {call_id[:64]!r}", param=where)


def call_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def openai_tool_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [
        {"id": call_id("call_"), "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in calls
    ]


def anthropic_blocks(content: str, calls: list[ToolCall]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content or not calls else []
    return blocks + [{"type": "tool_use", "id": call_id("toolu_"), "name": c.name, "input": c.arguments} for c in calls]
