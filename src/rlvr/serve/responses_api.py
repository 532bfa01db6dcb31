"""OpenAI Responses API: POST /v1/responses, what Codex and the OpenAI Agents SDK speak.

    client.responses.create(model="m", input="478+964=")                       # a string
    client.responses.create(model="m", input=items, tools=[{"type": "function", "name": ...}])
    client.responses.create(model="m", input=[result], previous_response_id=r.id)

The request's `instructions` and `input` items become the conversation the chat template takes,
the way chat completions build it (rlvr.serve.openai_api): `message` items (a string or
`input_text`/`output_text` parts; `developer` is `system`), a `function_call` as the model wrote it
(its `<tool_call>` text at the end of the assistant turn before it), a `function_call_output` as a
tool turn (its `call_id` must name an earlier call), and `reasoning` items passed over (templates
drop the reasoning of earlier turns). `previous_response_id` continues a stored response: its
conversation with the reply as the model wrote it, then the new items; the `instructions` are the
request's own (as the API has it, they are not carried over). A response is stored unless `store`
is false, for as long as its store keeps it (`ResponseStore`: the newest 1,000 of a server, or of
an agent session until it closes). Function tools are offered as chat tools; the reply comes back
as `output` items: a `message` with one `output_text` (when there is text, or no call), and a
`function_call` per call. A reply cut at `max_output_tokens` has status `incomplete`.

A stream is the event sequence the SDK's `responses.stream` checks (response.created,
response.in_progress, response.output_item.added, response.content_part.added,
response.output_text.delta, ..., response.function_call_arguments.delta/done,
response.output_item.done, response.completed or response.incomplete), each with its
`sequence_number`, sent once generation is over (the calls are known only then). Fields the server
does not implement (hosted tools, a forced `tool_choice`, structured `text.format`, `include`,
`background`, `conversation`, a `prompt` template, ...) are a 400 naming the field, never ignored.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Discriminator, Field, Tag, field_validator

from rlvr.serve.errors import APIError
from rlvr.serve.schema import Lenient, Strict
from rlvr.serve.tools import as_hermes, call_arguments, call_id, known_call, split_calls


class ContentPart(Lenient):
    type: Literal["input_text", "output_text", "text"]
    text: str


class MessageItem(Lenient):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]


class FunctionCallItem(Lenient):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    """JSON text, as the API sends it."""


class FunctionCallOutputItem(Lenient):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]


class ReasoningItem(Lenient):
    type: Literal["reasoning"]


def _item_type(item: Any) -> str:
    """An item without `type` is a message (the API's 'easy input message': {role, content})."""
    return item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", "message")


Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_type),
]


class FunctionTool(Strict):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(Strict):
    type: Literal["text"]


class TextConfig(Strict):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None


class ResponsesRequest(Strict):
    model: str
    input: str | list[Item]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    """'auto' (the default with tools): the model may call them; 'none': it is not offered them."""
    parallel_tool_calls: bool | None = None
    """Several calls in one reply are returned as they are written."""
    previous_response_id: str | None = None
    store: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stream: bool = False
    metadata: dict[str, Any] | None = None
    """rlvr: `answer` or `tests` (ground truth) has the response verified for the A/B report."""
    user: str | None = None
    include: list[str] | None = None
    """Only empty: nothing extra (log-probs, encrypted reasoning) is built."""
    truncation: Literal["disabled"] | None = None
    text: TextConfig | None = None

    @field_validator("include")
    @classmethod
    def _nothing_included(cls, v: list[str] | None) -> list[str] | None:
        if v:
            raise ValueError(f"{v[0]!r} is not built (nothing extra is included in a response)")
        return v

    def function_tools(self) -> list[dict[str, Any]]:
        """The offered tools in the chat shape ({"type": "function", "function": {...}})."""
        if self.tool_choice == "none":
            return []
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description or "", "parameters": t.parameters or {}},
            }
            for t in self.tools or []
        ]


# --- the conversation ---------------------------------------------------------------------


class ResponseStore:
    """Stored responses (their conversation as the chat template takes it, without the request's
    instructions, and the names of the calls made in it), the newest `capacity`."""

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[str, tuple[list[dict[str, str]], dict[str, str]]] = OrderedDict()

    def keep(self, rid: str, history: list[dict[str, str]], names: dict[str, str]) -> None:
        self._kept[rid] = (history, names)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    def get(self, rid: str) -> tuple[list[dict[str, str]], dict[str, str]]:
        if rid not in self._kept:
            raise APIError(400, f"previous_response_id: no stored response {rid[:64]!r}", param="previous_response_id")
        self._kept.move_to_end(rid)
        history, names = self._kept[rid]
        return list(history), dict(names)


def _text(content: str | list[ContentPart]) -> str:
    return content if isinstance(content, str) else "".join(p.text for p in content)


def conversation(
    body: ResponsesRequest, store: ResponseStore
) -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, str]]:
    """(the messages the template takes, the same without the instructions (what is stored), the
    call names by call id)."""
    history, names = store.get(body.previous_response_id) if body.previous_response_id else ([], {})
    items = [MessageItem(role="user", content=body.input)] if isinstance(body.input, str) else body.input
    for k, item in enumerate(items):
        where = f"input[{k}]"
        if isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            history.append({"role": role, "content": _text(item.content)})
        elif isinstance(item, FunctionCallItem):
            names[item.call_id] = item.name  # a result answers a call made before it
            said = as_hermes(item.name, call_arguments(item.arguments, f"{where}.arguments"))
            if history and history[-1]["role"] == "assistant":
                history[-1] = {"role": "assistant", "content": history[-1]["content"] + said}
            else:  # a reply of calls only: its turn has no text
                history.append({"role": "assistant", "content": said})
        elif isinstance(item, FunctionCallOutputItem):
            known_call(item.call_id, set(names), f"{where}.call_id")
            history.append({"role": "tool", "name": names[item.call_id], "content": _text(item.output)})
    if not history:
        raise APIError(400, "input: no message to answer", param="input")
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    return system + history, history, names


# --- the response -------------------------------------------------------------------------


def output_items(content: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if content or not calls:
        items.append(
            {
                "id": call_id("msg_"),
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": [], "logprobs": []}],
            }
        )
    for name, args in calls:
        items.append(
            {
                "id": call_id("fc_"),
                "type": "function_call",
                "call_id": call_id("call_"),
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    return items


def response_object(
    body: ResponsesRequest, rid: str, output: list[dict[str, Any]], cut: bool, n_in: int, n_out: int
) -> dict[str, Any]:
    """The Response as the API returns it (every field the SDKs read)."""
    return {
        "id": rid,
        "object": "response",
        "created_at": time.time(),
        "model": body.model,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "instructions": body.instructions,
        "output": output,
        "tools": [t.model_dump() for t in body.tools or []],
        "tool_choice": body.tool_choice or "auto",
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "max_output_tokens": body.max_output_tokens,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "metadata": body.metadata or {},
        "store": body.store is not False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": {
            "input_tokens": n_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n_in + n_out,
        },
    }


def answered(
    body: ResponsesRequest,
    store: ResponseStore,
    stored: list[dict[str, str]],
    names: dict[str, str],
    rid: str,
    reply: tuple[str, list[tuple[str, dict[str, Any]]], bool, int, int],
) -> dict[str, Any]:
    """The Response `rid` for a reply (content, calls, cut at max_output_tokens, input and output
    tokens), stored with its conversation unless `store` is false."""
    content, calls, cut, n_in, n_out = reply
    output = output_items(content, calls)
    if body.store is not False:
        said = content + "".join(as_hermes(n, a) for n, a in calls)
        new = {i["call_id"]: i["name"] for i in output if i["type"] == "function_call"}
        store.keep(rid, stored + [{"role": "assistant", "content": said}], names | new)
    return response_object(body, rid, output, cut and not calls, n_in, n_out)


def events(response: dict[str, Any]) -> Iterator[str]:
    """A finished Response as the stream of events the SDK accumulates, in its order."""
    seq = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(seq), **fields})}\n\n"

    start = {**response, "status": "in_progress", "output": [], "incomplete_details": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for k, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added", output_index=k, item={**item, "status": "in_progress", "content": []}
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            at = {"item_id": item["id"], "output_index": k, "content_index": 0}
            yield event("response.content_part.added", **at, part=part)
            if text:
                yield event("response.output_text.delta", **at, delta=text, logprobs=[])
            yield event("response.output_text.done", **at, text=text, logprobs=[])
            yield event("response.content_part.done", **at, part={**part, "text": text})
        else:
            yield event(
                "response.output_item.added", output_index=k, item={**item, "status": "in_progress", "arguments": ""}
            )
            at = {"item_id": item["id"], "output_index": k}
            yield event("response.function_call_arguments.delta", **at, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **at, arguments=item["arguments"], name=item["name"])
        yield event("response.output_item.done", output_index=k, item=item)
    yield event("response.completed" if response["status"] == "completed" else "response.incomplete", response=response)


def streamed(response: dict[str, Any], headers: dict[str, str] | None = None) -> StreamingResponse:
    return StreamingResponse(
        events(response), media_type="text/event-stream", headers=(headers or {}) | {"cache-control": "no-cache"}
    )


def add_routes(router: APIRouter, server) -> None:
    store = ResponseStore()

    @router.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request):
        user = request.headers.get("x-rlvr-user") or body.user
        arm = server.resolve(body.model, user, request)
        tools = body.function_tools()
        messages, stored, names = conversation(body, store)
        rid = call_id("resp_")
        job = server.job(
            arm,
            arm.chat_ids(messages, tools or None),
            max_tokens=body.max_output_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            stop=[],
            metadata=body.metadata,
            rid=rid,
            conversation=messages,
        )
        stream = await server.complete(job, server.admit())
        content, found = split_calls(stream.text, {t["function"]["name"] for t in tools})
        calls = [(c.name, c.arguments) for c in found]
        reply = (content, calls, stream.reason == "length", len(job.prompt_ids), stream.completion_tokens)
        response = answered(body, store, stored, names, rid, reply)
        headers = {"x-rlvr-arm": arm.key}
        return streamed(response, headers) if body.stream else JSONResponse(response, headers=headers)
