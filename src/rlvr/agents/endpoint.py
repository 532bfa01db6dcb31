"""The rollout endpoint agent programs talk to: OpenAI- and Anthropic-style routes per session.

    endpoint = Endpoint(tool_format)                   # uvicorn in a thread, 127.0.0.1, a free port
    sid = endpoint.open(session)                       # base URL: endpoint.base_url(sid)
    endpoint.pump.serve(engine, params, until)         # in the rollout's thread: samples what agents ask

Routes under `/s/<session>/v1`: `chat/completions` (tools and tool_calls; `stream` answered as
one chunk of content, its calls, and the finish), `completions` (text), `messages` (Anthropic;
tools and tool_use), `responses` (OpenAI Responses, rlvr.serve.responses_api: function calls,
`previous_response_id` within the session, streamed as its events). Requests are parsed and checked by rlvr.serve's own models (a malformed
request is a 400 in the API's shape); each becomes a token context (rlvr.agents.session) that
waits in the pump; the thread that runs the rollout samples every waiting context together with
the rollout engine and its sampling settings (rollout.temperature and the rest: a request's own
temperature or top_p is not used, as in any RL rollout endpoint), `max_tokens` capped at
rollout.max_new_tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from fastapi import FastAPI

from rlvr.agents.session import Session
from rlvr.rollout.controls import Bounded
from rlvr.serve.anthropic_api import MessagesRequest
from rlvr.serve.app import KEEP_ALIVE_S, listen
from rlvr.serve.anthropic_api import chat_messages as anthropic_messages
from rlvr.serve.errors import APIError, install_handlers
from rlvr.serve.openai_api import ChatRequest, CompletionRequest, chat_messages
from rlvr.serve.responses_api import ResponseStore, ResponsesRequest, answered, conversation, streamed
from rlvr.serve.tools import openai_tool_calls
from rlvr.tools import ToolCall

_FINISH = {"stop": "stop", "length": "length"}


@dataclasses.dataclass
class _Ask:
    context: list[int]
    max_tokens: int
    future: Future


class Pump:
    """Contexts the agents' requests wait on, sampled together by the rollout's own thread."""

    def __init__(self) -> None:
        self._asks: queue.SimpleQueue[_Ask] = queue.SimpleQueue()

    def ask(self, context: list[int], max_tokens: int) -> Future:
        future: Future = Future()
        self._asks.put(_Ask(context, max_tokens, future))
        return future

    def serve(
        self,
        engine,
        params,
        until: Callable[[], bool],
        expected: Callable[[], int] = lambda: 1,
        gap_s: float = 0.05,
        poll_s: float = 0.02,
    ) -> None:
        """Sample what is asked until `until()`. Once a request waits, more are gathered until `expected()`
        wait (every episode in flight) or none arrived for `gap_s` (an agent busy with its own work is
        not waited for longer), then sampled in one call (those with the same token budget together)."""
        limit = (engine.max_context if isinstance(engine, Bounded) else None) or 1 << 62
        while not until():
            try:
                asks = [self._asks.get(timeout=poll_s)]
            except queue.Empty:
                continue
            while len(asks) < expected():
                try:
                    asks.append(self._asks.get(timeout=gap_s))
                except queue.Empty:
                    break
            by_budget: dict[int, list[_Ask]] = {}
            for a in asks:
                budget = min(a.max_tokens, params.max_new_tokens, limit - len(a.context))
                if budget < 1:
                    a.future.set_exception(
                        ValueError(
                            f"the conversation ({len(a.context)} tokens) leaves the model "
                            f"no position to answer in (the maximum context length is "
                            f"{limit} tokens)"
                        )
                    )
                else:
                    by_budget.setdefault(budget, []).append(a)
            for budget, group in sorted(by_budget.items()):
                try:
                    samples = engine.sample(
                        [a.context for a in group], dataclasses.replace(params, max_new_tokens=budget), 1
                    )
                except Exception as exc:  # noqa: BLE001 - the requests fail, the rollout goes on
                    for a in group:
                        a.future.set_exception(exc)
                    continue
                for a, sample in zip(group, samples):
                    a.future.set_result(sample)


class Endpoint:
    def __init__(self, tool_format: str = "hermes") -> None:
        import uvicorn

        self.tool_format = tool_format
        self.pump = Pump()
        self.sessions: dict[str, Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._responses: dict[str, ResponseStore] = {}
        """A session's stored responses (`previous_response_id`), gone with it."""
        sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(self._app(), log_level="warning", timeout_keep_alive=KEEP_ALIVE_S)
        self._server = uvicorn.Server(config)
        threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="rlvr-agent-endpoint", daemon=True
        ).start()
        deadline = time.time() + 30
        while not self._server.started:
            if time.time() > deadline:
                raise RuntimeError("the agents' endpoint did not start")
            time.sleep(0.01)

    def base_url(self, sid: str) -> str:
        return f"{self.url}/s/{sid}/v1"

    def open(self, session: Session) -> str:
        sid = uuid.uuid4().hex
        self.sessions[sid] = session
        return sid

    def close(self, sid: str) -> Session:
        self._locks.pop(sid, None)
        self._responses.pop(sid, None)
        return self.sessions.pop(sid)

    def stop(self) -> None:
        self._server.should_exit = True

    # --- the routes ---------------------------------------------------------------------------

    def _app(self) -> FastAPI:
        app = FastAPI()
        install_handlers(app)

        async def sampled(sid: str, context: Callable[[Session], list[int]], max_tokens: int | None):
            session = self.sessions.get(sid)
            if session is None:
                raise APIError(404, f"no open session {sid[:40]!r} (its episode is over, or it never was)")
            async with self._locks.setdefault(sid, asyncio.Lock()):  # one request of a session at a time
                ids = context(session)
                try:
                    sample = await asyncio.wrap_future(self.pump.ask(ids, max_tokens or 1 << 30))
                except ValueError as exc:
                    session.refused = str(exc)  # what the episode's failure says if nothing was sampled
                    raise APIError(400, str(exc), code="context_length_exceeded") from None
                return session, sample, len(ids)

        @app.post("/s/{sid}/v1/chat/completions")
        async def chat(sid: str, body: ChatRequest):
            tools = [t.model_dump(exclude_none=True) for t in body.tools or []] if body.tool_choice != "none" else []
            messages = chat_messages(body)
            _no_stops(body.stops())
            session, sample, n_prompt = await sampled(
                sid, lambda s: s.chat_context(messages, tools or None), body.max_completion_tokens or body.max_tokens
            )
            content, calls, finish = session.record(sample, tools or None)
            message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
            if calls:
                message["tool_calls"] = openai_tool_calls([ToolCall(n, a) for n, a in calls])
            reason = "tool_calls" if calls else _FINISH[finish]
            base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": body.model}
            usage = {
                "prompt_tokens": n_prompt,
                "completion_tokens": len(sample[0]),
                "total_tokens": n_prompt + len(sample[0]),
            }
            if not body.stream:
                return {
                    **base,
                    "object": "chat.completion",
                    "usage": usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}],
                }
            return _stream(base, message, reason)

        @app.post("/s/{sid}/v1/completions")
        async def complete(sid: str, body: CompletionRequest):
            if not isinstance(body.prompt, str):
                raise APIError(400, "prompt: one text per request in a session", param="prompt")
            _no_stops(body.stops())
            if body.stream:
                raise APIError(400, "stream: not built for text completions in an agent session", param="stream")
            session, sample, n_prompt = await sampled(sid, lambda s: s.text_context(body.prompt), body.max_tokens)
            text, _, finish = session.record(sample, None)
            return {
                "id": f"cmpl-{uuid.uuid4().hex[:24]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.model,
                "choices": [{"index": 0, "text": text, "finish_reason": _FINISH[finish], "logprobs": None}],
                "usage": {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": len(sample[0]),
                    "total_tokens": n_prompt + len(sample[0]),
                },
            }

        @app.post("/s/{sid}/v1/messages")
        async def messages(sid: str, body: MessagesRequest):
            if body.stream:
                raise APIError(400, "stream: not built for Anthropic messages in an agent session", param="stream")
            if body.stop_sequences:
                _no_stops(body.stop_sequences)
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
            convo = anthropic_messages(body)
            session, sample, n_prompt = await sampled(
                sid, lambda s: s.chat_context(convo, tools or None), body.max_tokens
            )
            content, calls, finish = session.record(sample, tools or None)
            blocks = ([{"type": "text", "text": content}] if content or not calls else []) + [
                {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": n, "input": a} for n, a in calls
            ]
            stop = "tool_use" if calls else {"stop": "end_turn", "length": "max_tokens"}[finish]
            return {
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "type": "message",
                "role": "assistant",
                "model": body.model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": n_prompt, "output_tokens": len(sample[0])},
            }

        @app.post("/s/{sid}/v1/responses")
        async def responses(sid: str, body: ResponsesRequest):
            if sid not in self.sessions:
                raise APIError(404, f"no open session {sid[:40]!r} (its episode is over, or it never was)")
            store = self._responses.setdefault(sid, ResponseStore(capacity=256))
            tools = body.function_tools()
            convo, stored, names = conversation(body, store)
            session, sample, n_prompt = await sampled(
                sid, lambda s: s.chat_context(convo, tools or None), body.max_output_tokens
            )
            content, calls, finish = session.record(sample, tools or None)
            reply = (content, calls, finish == "length", n_prompt, len(sample[0]))
            response = answered(body, store, stored, names, f"resp_{uuid.uuid4().hex[:24]}", reply)
            return streamed(response) if body.stream else response

        return app


def _no_stops(stops: list[str]) -> None:
    if stops:
        raise APIError(
            400,
            "stop: stop sequences are not built in an agent session (the rollout engine stops at "
            "the end-of-sequence token)",
            param="stop",
        )


def _stream(base: dict, message: dict, reason: str):
    from fastapi.responses import StreamingResponse

    def chunk(delta: dict, finish: str | None = None) -> str:
        return (
            "data: "
            + json.dumps(
                {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )
            + "\n\n"
        )

    def events():
        yield chunk({"role": "assistant", "content": message["content"] or ""})
        for i, call in enumerate(message.get("tool_calls", [])):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, reason)
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
