"""Anthropic-compatible route: POST /v1/messages, streaming included.

A stream is the `event:`-named sequence the anthropic SDK reads (it ignores SSE messages without an
`event:` line): message_start, content_block_start, content_block_delta (text_delta) ...,
content_block_stop, message_delta (stop_reason, output tokens), message_stop. With `tools`
(rlvr.serve.tools) the response's calls come back as `tool_use` blocks (stop_reason `tool_use`); a
stream then sends each block whole, the call's input as one input_json_delta, once generation is
over. Fields the server does not implement (thinking, images, a forced tool_choice, ...) are a 400
naming the field, never ignored.
"""

from __future__ import annotations

import json
import uuid
from contextlib import aclosing
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from rlvr.serve.errors import error_body
from rlvr.serve.schema import Lenient, Strict, TextPart
from rlvr.serve.tools import anthropic_blocks, as_hermes, known_call, split_calls

STOP_REASON = {"stop": "end_turn", "stop_sequence": "stop_sequence", "length": "max_tokens"}


class ToolUseBlock(Lenient):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(Lenient):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextPart] = ""
    is_error: bool | None = None


class ToolDef(Strict):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class ToolChoice(Strict):
    type: Literal["auto", "none"]


class Message(Lenient):
    role: Literal["user", "assistant"]
    content: str | list[Annotated[TextPart | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]]


class MessagesRequest(Strict):
    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    """Required by Anthropic's API; here, when absent, the model's recommended inference length."""
    system: str | list[TextPart] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float = Field(1.0, ge=0, le=1)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    metadata: dict[str, Any] | None = None
    """`user_id` picks the A/B arm; rlvr's `answer` or `tests` has the response verified."""
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None


def chat_messages(body: MessagesRequest) -> list[dict[str, str]]:
    """The conversation as the chat template takes it: a tool_use block as the call the model wrote,
    a tool_result block as a tool turn."""
    names = {
        b.id: b.name
        for m in body.messages
        if not isinstance(m.content, str)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    }
    out = [{"role": "system", "content": _text(body.system)}] if body.system else []
    for k, m in enumerate(body.messages):
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        text = ""
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                known_call(b.tool_use_id, set(names), f"messages[{k}].content")
                if text:
                    out.append({"role": m.role, "content": text})
                    text = ""
                out.append(
                    {
                        "role": "tool",
                        "name": names.get(b.tool_use_id, "tool"),
                        "content": ("error: " if b.is_error else "") + _text(b.content),
                    }
                )
            elif isinstance(b, ToolUseBlock):
                text += as_hermes(b.name, b.input)
            else:
                text += b.text
        if text:
            out.append({"role": m.role, "content": text})
    return out


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(b.text for b in content if isinstance(b, TextPart))


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def add_routes(router: APIRouter, server) -> None:
    @router.post("/v1/messages")
    async def messages(body: MessagesRequest, request: Request):
        meta = body.metadata or {}
        user = request.headers.get("x-rlvr-user") or meta.get("user_id")
        arm = server.resolve(body.model, user, request)
        offered = body.tool_choice is None or body.tool_choice.type != "none"
        tools = (
            [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
                }
                for t in body.tools or []
            ]
            if offered
            else []
        )
        conversation = chat_messages(body)
        prompt_ids = arm.chat_ids(conversation, tools or None)
        mid, headers = "msg_" + uuid.uuid4().hex[:24], {"x-rlvr-arm": arm.key}
        job = server.job(
            arm,
            prompt_ids,
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            stop=body.stop_sequences,
            metadata=meta,
            rid=mid,
            conversation=conversation,
        )
        slot = server.admit()

        def message(content: list, stream=None) -> dict:
            return {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": body.model,
                "content": content,
                "stop_reason": STOP_REASON[stream.reason] if stream else None,
                "stop_sequence": stream.stop_sequence if stream else None,
                "usage": {"input_tokens": len(prompt_ids), "output_tokens": stream.completion_tokens if stream else 0},
            }

        if tools:  # the calls are known once the whole text is: one message, or a stream of whole blocks
            stream = await server.complete(job, slot)
            content, calls = split_calls(stream.text, {t["function"]["name"] for t in tools})
            blocks = anthropic_blocks(content, calls)
            done = message(blocks, stream)
            if calls:
                done["stop_reason"] = "tool_use"
            if not body.stream:
                return JSONResponse(done, headers=headers)
            return StreamingResponse(
                _block_events(message([]), blocks, done),
                media_type="text/event-stream",
                headers=headers | {"cache-control": "no-cache"},
            )
        if not body.stream:
            stream = await server.complete(job, slot)
            return JSONResponse(message([{"type": "text", "text": stream.text}], stream), headers=headers)

        async def events():
            yield _event("message_start", {"type": "message_start", "message": message([])})
            yield _event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
            try:
                async with aclosing(server.run(job, slot)) as deltas:
                    async for delta in deltas:
                        yield _event(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}},
                        )
            except Exception as exc:  # after the 200 went out: an `error` event ends the stream
                yield _event(
                    "error", error_body(request.url.path, 500, f"generation failed: {type(exc).__name__}: {exc}")
                )
                return
            stream = job.stream
            yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            yield _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": STOP_REASON[stream.reason], "stop_sequence": stream.stop_sequence},
                    "usage": {"output_tokens": stream.completion_tokens},
                },
            )
            yield _event("message_stop", {"type": "message_stop"})

        return StreamingResponse(
            events(), media_type="text/event-stream", headers=headers | {"cache-control": "no-cache"}
        )


async def _block_events(start: dict, blocks: list[dict], done: dict):
    yield _event("message_start", {"type": "message_start", "message": start})
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            yield _event(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            )
            yield _event(
                "content_block_delta",
                {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}},
            )
        else:
            yield _event(
                "content_block_start", {"type": "content_block_start", "index": i, "content_block": {**b, "input": {}}}
            )
            yield _event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])},
                },
            )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": i})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": done["stop_reason"], "stop_sequence": done["stop_sequence"]},
            "usage": {"output_tokens": done["usage"]["output_tokens"]},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})
