"""The `rlvr serve` application: one or two models (A/B arms) behind OpenAI- and Anthropic-style routes.

    server = Server([Arm(...)], cfg.serve, reward=reward)
    app = build_app(server)          # FastAPI; uvicorn runs it (rlvr.cli.serve)

Every route goes through the same path: authenticate, resolve the model (the A/B arm of the user),
render the prompt, admit into a bounded queue (429 when it is full), generate on the arm's backend
with at most serve.max_concurrency generations at once, stream text deltas, count tokens, verify
the response when the request carries ground truth.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import ipaddress
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from rlvr.config.serve import ServeConfig
from rlvr.configlib import ConfigError
from rlvr.records import Problem
from rlvr.rollout.tool_prompt import describe_tools, with_tools_described
from rlvr.serve.ab import ABTest, ground_truth, problem_key
from rlvr.serve.backends import Backend, GenParams
from rlvr.serve.errors import APIError, install_handlers
from rlvr.serve.metrics import MetricsMiddleware, ServeMetrics
from rlvr.serve.text import TextStream


KEEP_ALIVE_S = 3600
"""How long an idle client connection stays open (uvicorn closes it after 5 s by default): longer than
anything between two requests of one client (a training step between two rollouts), so a client that
reuses its connection with retries off never has it closed under it."""


@dataclass
class Arm:
    key: str
    """'a' or 'b' (the A/B arm); 'a' for a single model."""
    name: str
    """The model id clients send."""
    tokenizer: Any
    backend: Backend
    chat_template: str | None
    """A Jinja chat template, or None: the messages' contents one per line (serve.chat_template=plain)."""
    max_tokens: int
    """max_tokens of a request that names none."""

    def chat_ids(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        """The prompt of a conversation; `tools` (OpenAI-style descriptions) go to the template's `tools`,
        or into the system message when the template takes none (rlvr.rollout.episodes)."""
        encodable({"messages": messages, "tools": tools})
        if self.chat_template is None:
            return self.text_ids((describe_tools(tools) if tools else "") + "\n".join(m["content"] for m in messages))
        kwargs: dict[str, Any] = {}
        if tools and "tools" in self.chat_template:
            kwargs["tools"] = tools
        elif tools:
            messages = with_tools_described(messages, tools)
        try:
            return list(
                self.tokenizer.apply_chat_template(
                    messages,
                    chat_template=self.chat_template,
                    **kwargs,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                )
            )
        except Exception as exc:  # jinja's TemplateError and the template's own raise_exception
            raise APIError(400, f"the model's chat template rejected these messages: {exc}", param="messages") from None

    def text_ids(self, text: str) -> list[int]:
        encodable(text)
        return self.tokenizer(text, add_special_tokens=False).input_ids


def encodable(value: Any) -> None:
    """Text a tokenizer takes: valid UTF-8 (JSON lets a client send lone surrogates), or a 400."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError, ValueError) as exc:
        raise APIError(
            400, f"the request's text cannot be tokenised ({type(exc).__name__}: {str(exc)[:200]})", param="messages"
        ) from None


@dataclass
class Job:
    arm: Arm
    prompt_ids: list[int]
    params: GenParams
    stop: list[str]
    truth: Problem | None = None
    stream: TextStream | None = None
    """The finished text, finish reason and token counts, once run() is done."""
    id: str = ""
    """The response's id, as its route answers it (what feedback names)."""
    conversation: Any = None
    """What was asked (chat messages as rendered, or the text prompt), for serve --record."""


class Slot:
    """A place in the queue, taken at admission and given back once (also when a stream is dropped
    unstarted: its generator's frame goes, and with it the slot)."""

    def __init__(self, server: "Server") -> None:
        self.server, self.held = server, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.server.pending -= 1
            self.server.update_gauges()

    __del__ = release


@dataclass
class Server:
    arms: list[Arm]
    cfg: ServeConfig
    reward: Any = None
    """rlvr's reward (rlvr.rewards.build_reward), for requests with ground truth; None: not verified."""
    split: float = 0.0
    """Share of users sent to arm B."""
    api_keys: list[str] = field(default_factory=list)
    metrics: ServeMetrics = field(default_factory=ServeMetrics)
    recorder: Any = None
    """rlvr.serve.record.Recorder (serve --record DIR): every response kept with its tokens; None: none."""

    def __post_init__(self) -> None:
        self.name = self.arms[0].name
        self.by_name = {self.name: None} | (
            {f"{self.name}:{a.key}": a for a in self.arms} if len(self.arms) > 1 else {}
        )
        self.ab = ABTest([a.key for a in self.arms], self.split, self.cfg.ab_salt, self.reward, self.metrics)
        self.pending = self.running = 0
        self._slots: asyncio.Semaphore | None = None
        self.started = time.time()

    # -- a request's way through ------------------------------------------------------------------

    def resolve(self, model: str, user: str | None, request: Request) -> Arm:
        """The arm that answers: the user's A/B arm for the served name, or one arm by its own name."""
        if model not in self.by_name:
            raise APIError(
                404,
                f"model {model!r} is not served here (GET /v1/models lists {sorted(self.by_name)})",
                param="model",
                code="model_not_found",
            )
        arm = self.by_name[model]
        if arm is None:
            key = self.ab.assign(user)
            arm = next(a for a in self.arms if a.key == key)
        request.state.model, request.state.arm = arm.name if len(self.arms) == 1 else f"{self.name}:{arm.key}", arm.key
        return arm

    def job(
        self,
        arm: Arm,
        prompt_ids: list[int],
        *,
        max_tokens: int | None,
        temperature: float,
        top_p: float,
        top_k: int = 0,
        stop: list[str] | None = None,
        metadata: dict | None = None,
        rid: str = "",
        conversation: Any = None,
    ) -> Job:
        context = arm.backend.context_len
        if max_tokens is None:
            max_tokens = min(arm.max_tokens, context - len(prompt_ids))
        if len(prompt_ids) + max_tokens > context or max_tokens < 1:
            raise APIError(
                400,
                f"the prompt ({len(prompt_ids)} tokens) plus max_tokens ({max_tokens}) exceeds the "
                f"model's context of {context} tokens; shorten the prompt or lower max_tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )
        truth = ground_truth(metadata, key="")
        if truth is not None:
            truth = dataclasses.replace(truth, id=problem_key(prompt_ids, truth))
            if self.reward is None:
                raise APIError(400, "metadata.answer/tests: this server does not verify responses", param="metadata")
        return Job(
            arm,
            prompt_ids,
            GenParams(max_tokens, temperature, top_p, top_k),
            list(stop or []),
            truth,
            id=rid,
            conversation=conversation,
        )

    def admit(self) -> Slot:
        """A place in the queue, or 429 when serve.max_concurrency run and serve.max_queue wait."""
        if self.pending >= self.cfg.max_concurrency + self.cfg.max_queue:
            raise APIError(
                429,
                f"the server is at capacity ({self.cfg.max_concurrency} generating, "
                f"{self.cfg.max_queue} waiting); retry shortly",
                code="rate_limit_exceeded",
            )
        self.pending += 1
        self.update_gauges()
        return Slot(self)

    def update_gauges(self) -> None:
        self.metrics.in_flight.set(self.running)
        self.metrics.queued.set(max(0, self.pending - self.running))

    async def run(self, job: Job, slot: Slot) -> AsyncIterator[str]:
        """The response's text deltas; job.stream holds the outcome once the iteration ends."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.cfg.max_concurrency)
        try:
            async with self._slots:
                self.running += 1
                self.update_gauges()
                try:
                    async for delta in self._generate(job):
                        yield delta
                finally:
                    self.running -= 1
        finally:
            slot.release()

    async def _generate(self, job: Job) -> AsyncIterator[str]:
        arm, start = job.arm, time.perf_counter()
        stream = job.stream = TextStream(arm.tokenizer, arm.backend.eos_ids, job.stop, job.params.max_tokens)
        tokens = arm.backend.stream(job.prompt_ids, job.params)
        first, sampled = True, []
        try:
            async for ids in tokens:
                sampled += ids
                if first:
                    self.metrics.first_token.labels(model=arm.name).observe(time.perf_counter() - start)
                    first = False
                if delta := stream.feed(ids):
                    yield delta
                if stream.done:
                    break
        finally:
            await tokens.aclose()
            self.metrics.prompt_tokens.labels(model=arm.name).inc(len(job.prompt_ids))
            self.metrics.completion_tokens.labels(model=arm.name).inc(stream.completion_tokens)
        if tail := stream.finish():
            yield tail
        if job.truth is not None:
            self.ab.verify(arm.key, job.truth, stream.text)
        if self.recorder is not None and job.id:
            self.recorder.served(
                job.id,
                arm.name,
                arm.key,
                job.conversation,
                list(job.prompt_ids),
                sampled[: stream.completion_tokens],
                stream.text,
                stream.reason,
            )

    async def complete(self, job: Job, slot: Slot) -> TextStream:
        """The whole response (non-streaming routes)."""
        async for _ in self.run(job, slot):
            pass
        return job.stream

    # -- access -------------------------------------------------------------------------------------

    def authenticate(self, request: Request) -> None:
        if not self.api_keys:
            return
        auth = request.headers.get("authorization", "")
        key = request.headers.get("x-api-key") or (auth[7:].strip() if auth.lower().startswith("bearer ") else None)
        if not key:
            raise APIError(401, "no API key: send `Authorization: Bearer KEY` or `x-api-key: KEY`")
        if not any(hmac.compare_digest(key.encode(), k.encode()) for k in self.api_keys):
            raise APIError(401, "invalid API key", code="invalid_api_key")

    def close(self) -> None:
        self.ab.close()
        for arm in self.arms:
            arm.backend.close()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def model_list(server: Server) -> dict:
    """GET /v1/models in a shape both SDKs read (OpenAI's list, Anthropic's page)."""
    data = [
        {
            "id": name,
            "object": "model",
            "type": "model",
            "display_name": name,
            "owned_by": "rlvr",
            "created": int(server.started),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(server.started)),
        }
        for name in server.by_name
    ]
    return {"object": "list", "data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}


def build_app(server: Server) -> FastAPI:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from rlvr.serve import anthropic_api, openai_api, responses_api

    app = FastAPI(title="rlvr serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server
    install_handlers(app)
    app.add_middleware(MetricsMiddleware, metrics=server.metrics)

    @app.get("/healthz")
    async def healthz():
        return {
            "status": "ok",
            "models": list(server.by_name),
            "in_flight": server.running,
            "queued": max(0, server.pending - server.running),
        }

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    api = APIRouter(dependencies=[Depends(server.authenticate)])

    @api.get("/v1/models")
    async def models():
        return JSONResponse(model_list(server))

    @api.get("/ab")
    async def ab():
        return await asyncio.get_running_loop().run_in_executor(None, server.ab.report)

    @api.post("/v1/feedback")
    async def feedback(request: Request):
        """A score or a preferred alternative for a recorded response (serve --record)."""
        if server.recorder is None:
            raise APIError(404, "feedback is taken when the server records: rlvr serve --record DIR")
        try:
            body = await request.json()
        except ValueError:
            raise APIError(400, "the body is not valid JSON") from None
        return JSONResponse(server.recorder.feedback(body))

    openai_api.add_routes(api, server)
    anthropic_api.add_routes(api, server)
    responses_api.add_routes(api, server)
    app.include_router(api)
    return app


def listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise ConfigError(f"serve.host/serve.port: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(2048)
    return sock
