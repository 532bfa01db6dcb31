"""The tools described in a system message, for chat templates that cannot take `tools`: their
schemas, and how to write a call in the format the episode reads (env.tool_format)."""

from __future__ import annotations

import json

from rlvr.envs import schemas
from rlvr.records import Message
from rlvr.tools import TOOL_FORMATS


def with_tools_described(messages: list[Message], tools: list, tool_format: str = "hermes") -> list[Message]:
    """For a template that cannot take `tools`: the tools described in the system message."""
    messages, said = list(messages), describe_tools(tools, tool_format)
    if messages and messages[0].get("role") == "system":
        messages[0] = {**messages[0], "content": said + str(messages[0]["content"])}
    else:
        messages.insert(0, {"role": "system", "content": said.rstrip()})
    return messages


CALL_WORDS = {
    "hermes": '<tool_call>{"name": <name>, "arguments": <arguments as JSON>}</tool_call>',
    "compact": "<tool_call><name>(<argument>)</tool_call>, the one argument of a one-parameter tool as it is",
}
"""How the system message tells the model to write a call, per env.tool_format (as rlvr.tools reads it)."""
if set(CALL_WORDS) != set(TOOL_FORMATS):
    raise ImportError(
        f"rlvr.rollout.tool_prompt.CALL_WORDS says {sorted(CALL_WORDS)}; the tool formats are {TOOL_FORMATS}"
    )


def describe_tools(tools: list, tool_format: str = "hermes") -> str:
    """The tools in the Hermes system prompt's words, for templates that cannot take `tools`; the calls
    written as `tool_format` says (the format the episode's calls are read in)."""
    lines = "\n".join(json.dumps(s) for s in schemas(tools))
    return (
        f"You may call tools. For each call write {CALL_WORDS[tool_format]}; the result comes back in "
        f"<tool_response></tool_response>.\n<tools>\n{lines}\n</tools>\n"
    )
