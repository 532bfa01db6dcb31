"""OpenAI-compatible routes: POST /v1/chat/completions and POST /v1/completions, streaming included.

A stream is server-sent `data:` events of `chat.completion.chunk` (or `text_completion`) objects: the
role first, then the content deltas, then the finish reason, with `stream_options.include_usage` a
last chunk with the usage and no choices, and `data: [DONE]`. Fields the server does not implement
(tools, logprobs, n > 1, response_format, seed, ...) are a 400 naming the field, never ignored.
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
from rlvr.serve.schema import Strict, TextPart

FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length"}


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None


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
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": _text(m.content)}
                    for m in body.messages]
        max_tokens = body.max_completion_tokens or body.max_tokens
        return await _respond(server, request, body, arm, arm.chat_ids(messages), max_tokens, chat=True)

    @router.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise APIError(400, "prompt: one prompt per request (a string, or a list of one string)", param="prompt")
        user = request.headers.get("x-rlvr-user") or body.user
        arm = server.resolve(body.model, user, request)
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        return await _respond(server, request, body, arm, arm.text_ids(prompt), body.max_tokens, chat=False)


async def _respond(server, request: Request, body: _Sampling, arm, prompt_ids: list[int], max_tokens: int | None,
                   *, chat: bool):
    job = server.job(arm, prompt_ids, max_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p,
                     stop=body.stops(), metadata=body.metadata)
    slot = server.admit()
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created, obj = int(time.time()), "chat.completion" if chat else "text_completion"
    headers = {"x-rlvr-arm": arm.key}
    model = body.model

    def usage(stream) -> dict:
        return {"prompt_tokens": len(prompt_ids), "completion_tokens": stream.completion_tokens,
                "total_tokens": len(prompt_ids) + stream.completion_tokens}

    if not body.stream:
        stream = await server.complete(job, slot)
        choice = ({"index": 0, "message": {"role": "assistant", "content": stream.text}, "logprobs": None}
                  if chat else {"index": 0, "text": stream.text, "logprobs": None})
        choice["finish_reason"] = FINISH[stream.reason]
        return JSONResponse({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                             "usage": usage(stream)}, headers=headers)

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
                yield _sse({"id": rid, "object": chunk_obj, "created": created, "model": model, "choices": [],
                            "usage": usage(job.stream)})
        except Exception as exc:  # after the 200 went out: the error as the last event
            yield _sse(error_body(request.url.path, 500, f"generation failed: {type(exc).__name__}: {exc}"))
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers | {"cache-control": "no-cache"})

