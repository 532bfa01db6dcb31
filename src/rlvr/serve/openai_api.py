"""OpenAI-compatible routes: POST /v1/chat/completions and POST /v1/completions, streaming included.

A stream is server-sent `data:` events of `chat.completion.chunk` (or `text_completion`) objects: the
role first, then the content deltas, then the finish reason, with `stream_options.include_usage` a
last chunk with the usage and no choices, and `data: [DONE]`. With `tools` (rlvr.serve.tools) the
response's calls come back as `tool_calls` (finish_reason `tool_calls`); a stream then sends the
whole content and the calls once generation is over. Fields the server does not implement
(logprobs, n > 1, response_format, seed, a forced tool_choice, ...) are a 400 naming the field, never ignored.
"""

from __future__ import annotations

import json
import time
import uuid
from contextlib import aclosing
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from rlvr.serve.errors import APIError, error_body
from rlvr.serve.schema import Lenient, Strict, TextPart
from rlvr.serve.tools import as_hermes, call_arguments, known_call, openai_tool_calls, split_calls

FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length"}


class FunctionDef(Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None


class ToolDef(Strict):
    type: Literal["function"]
    function: FunctionDef


class FunctionCall(Lenient):
    name: str
    arguments: str
    """JSON text, as OpenAI sends it."""


class ToolCallPart(Lenient):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    function_call: None = None
    """The legacy single call: refused (it would be a call the conversation drops), as `tool_calls` it is read."""
    audio: None = None
    tool_calls: list[ToolCallPart] | None = None
    """assistant: the calls it made (rendered back as the model wrote them)."""
    tool_call_id: str | None = None
    """tool: the call this is the result of."""


class StreamOptions(Strict):
    include_usage: bool = False


class _Sampling(Strict):
    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    stop: str | list[str] | None = Field(None)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Literal[1] = 1
    user: str | None = None
    metadata: dict[str, Any] | None = None
    """rlvr: `answer` or `tests` (ground truth) has the response verified for the A/B report."""

    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4:
            raise APIError(400, "stop: at most 4 sequences", param="stop")
        return stops


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    """'auto' (the default with tools): the model may call them; 'none': it is not offered them."""
    parallel_tool_calls: bool | None = None
    """Several calls in one response are returned as they are written."""


def chat_messages(body: ChatRequest) -> list[dict[str, str]]:
    """The conversation as the chat template takes it: calls as the model wrote them, results as tool turns."""
    names = {c.id: c.function.name for m in body.messages for c in (m.tool_calls or [])}
    out = []
    for k, m in enumerate(body.messages):
        text = "" if m.content is None else _text(m.content)
        if m.role == "tool":
            if m.tool_call_id is None:
                raise APIError(
                    400, f"messages[{k}]: a tool message needs tool_call_id", param=f"messages[{k}].tool_call_id"
                )
            known_call(m.tool_call_id, set(names), f"messages[{k}].tool_call_id")
            out.append({"role": "tool", "name": names.get(m.tool_call_id, m.name or "tool"), "content": text})
            continue
        for c in m.tool_calls or []:
            text += as_hermes(c.function.name, call_arguments(c.function.arguments, f"messages[{k}].tool_calls"))
        out.append({"role": "system" if m.role == "developer" else m.role, "content": text})
    return out


class CompletionRequest(_Sampling):
    prompt: str | list[str]


def _text(content: str | list[TextPart]) -> str:
    return content if isinstance(content, str) else "".join(p.text for p in content)


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def add_routes(router: APIRouter, server) -> None:
    @router.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        user = request.headers.get("x-rlvr-user") or body.user
        arm = server.resolve(body.model, user, request)
        tools = [t.model_dump(exclude_none=True) for t in body.tools or []] if body.tool_choice != "none" else []
        max_tokens = body.max_completion_tokens or body.max_tokens
        messages = chat_messages(body)
        return await _respond(
            server,
            request,
            body,
            arm,
            arm.chat_ids(messages, tools or None),
            max_tokens,
            chat=True,
            tools=bool(tools),
            conversation=messages,
        )

    @router.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise APIError(400, "prompt: one prompt per request (a string, or a list of one string)", param="prompt")
        user = request.headers.get("x-rlvr-user") or body.user
        arm = server.resolve(body.model, user, request)
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        return await _respond(
            server, request, body, arm, arm.text_ids(prompt), body.max_tokens, chat=False, conversation=prompt
        )


async def _respond(
    server,
    request: Request,
    body: _Sampling,
    arm,
    prompt_ids: list[int],
    max_tokens: int | None,
    *,
    chat: bool,
    tools: bool = False,
    conversation=None,
):
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    job = server.job(
        arm,
        prompt_ids,
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        stop=body.stops(),
        metadata=body.metadata,
        rid=rid,
        conversation=conversation,
    )
    slot = server.admit()
    created, obj = int(time.time()), "chat.completion" if chat else "text_completion"
    headers = {"x-rlvr-arm": arm.key}
    model = body.model

    def usage(stream) -> dict:
        return {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": stream.completion_tokens,
            "total_tokens": len(prompt_ids) + stream.completion_tokens,
        }

    if tools:  # the calls are known once the whole text is: answered as one message, or one stream at the end
        return await _respond_with_tools(server, request, body, job, slot, rid, created, model, headers, usage)
    if not body.stream:
        stream = await server.complete(job, slot)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": stream.text}, "logprobs": None}
            if chat
            else {"index": 0, "text": stream.text, "logprobs": None}
        )
        choice["finish_reason"] = FINISH[stream.reason]
        return JSONResponse(
            {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice], "usage": usage(stream)},
            headers=headers,
        )

    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    chunk_obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta: str | None, finish: str | None = None, *, role: bool = False) -> str:
        if chat:
            d: dict = {"role": "assistant", "content": ""} if role else ({} if delta is None else {"content": delta})
            choice = {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish}
        out = {"id": rid, "object": chunk_obj, "created": created, "model": model, "choices": [choice]}
        if include_usage:
            out["usage"] = None
        return _sse(out)

    async def events():
        try:
            if chat:
                yield chunk(None, role=True)
            async with aclosing(server.run(job, slot)) as deltas:
                async for delta in deltas:
                    yield chunk(delta)
            yield chunk(None, FINISH[job.stream.reason])
            if include_usage:
                yield _sse(
                    {
                        "id": rid,
                        "object": chunk_obj,
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": usage(job.stream),
                    }
                )
        except Exception as exc:  # after the 200 went out: the error as the last event
            yield _sse(error_body(request.url.path, 500, f"generation failed: {type(exc).__name__}: {exc}"))
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers | {"cache-control": "no-cache"})


async def _respond_with_tools(
    server, request: Request, body: ChatRequest, job, slot, rid: str, created: int, model: str, headers: dict, usage
):
    stream = await server.complete(job, slot)
    content, calls = split_calls(stream.text, {t.function.name for t in body.tools or []})
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = openai_tool_calls(calls)
    finish = "tool_calls" if calls else FINISH[stream.reason]
    if not body.stream:
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": usage(stream),
            },
            headers=headers,
        )
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def chunk(delta: dict, finish_reason: str | None = None) -> str:
        out = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if include_usage:
            out["usage"] = None
        return _sse(out)

    async def events():
        yield chunk({"role": "assistant", "content": ""})
        if content:
            yield chunk({"content": content})
        for i, call in enumerate(message.get("tool_calls", [])):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, finish)
        if include_usage:
            yield _sse(
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage(stream),
                }
            )
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers | {"cache-control": "no-cache"})
