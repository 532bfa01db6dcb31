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
import re
import uuid
from typing import Any

from rlvr.tools import ToolCall, format_call, parse_tool_calls


def as_hermes(name: str, arguments: dict[str, Any]) -> str:
    """An earlier call, as the model wrote it."""
    return format_call(ToolCall(name, arguments), "hermes")


_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def split_calls(text: str, offered: set[str]) -> tuple[str, list[ToolCall]]:
    """(the text outside the calls, the calls to tools the request offered that read cleanly). A call
    that does not read, or names a tool not offered, stays in the text, where the client sees it."""
    calls: list[ToolCall] = []

    def take(m: re.Match) -> str:
        (call,) = parse_tool_calls(m.group(0), "hermes")
        if call.error is None and call.name in offered:
            calls.append(call)
            return ""
        return m.group(0)

    content = _CALL_RE.sub(take, text).strip()
    return (content, calls) if calls else (text, [])


def call_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def openai_tool_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": call_id("call_"), "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls]


def anthropic_blocks(content: str, calls: list[ToolCall]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content or not calls else []
    return blocks + [{"type": "tool_use", "id": call_id("toolu_"), "name": c.name, "input": c.arguments} for c in calls]
