"""Agents written as programs: trained through an OpenAI/Anthropic-compatible rollout endpoint.

    env.name=agent env.agent=mypkg.agents:solve      # def solve(base_url, model, problem) -> answer
    env.name=agent env.agent_command="node agent.js" # any language: rlvr.agents.command

For each episode rlvr opens a session on its endpoint (rlvr.agents.endpoint) and runs the agent
function in a worker process (rlvr.harness: the same time bounds and containment as an
environment's) with the session's base URL, a model name and the problem (a dict: id, prompt,
answer, metadata). The agent talks to the policy only through that URL, with the ordinary SDKs
(`OpenAI(base_url=base_url, api_key="rlvr")`, `Anthropic(base_url=...)` without the `/v1`), and
returns its final answer (a str, graded by the problem's verifier), a reward (a number: the
`agent` component), or a dict with `answer` and/or `reward`. A function may be async. The
trajectory is built from the tokens the endpoint sampled (rlvr.agents.session): token-exact, the
loss on sampled tokens only, behaviour log-probs per token.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlvr.envs import Environment, StepResult, register_env
from rlvr.harness import CallFailed, safe_text
from rlvr.records import Completion, Problem


@register_env("agent")
class AgentProgram(Environment):
    """The registry's entry for env.name=agent: its reward component; the program drives its episodes."""

    components: ClassVar[dict[str, float]] = {"agent": 1.0}
    settings_keys = frozenset()

    def step(self, assistant_turn: str) -> StepResult:
        raise RuntimeError("an agent program's episodes are run by rlvr.agents.run_agent_episodes, never stepped")


@dataclass
class AgentSpec:
    """How agent episodes run (env.agent, env.agent_concurrency, env.tool_format)."""

    fn: Any
    concurrency: int = 256
    tool_format: str = "hermes"
    model: str = "policy"

    @property
    def name(self) -> str:
        return getattr(self.fn, "name", None) or getattr(self.fn, "__qualname__", "agent")
    endpoint: Any = field(default=None, repr=False)
    """Started on the first rollout (rlvr.agents.endpoint.Endpoint)."""


def agent_spec(env_cfg) -> AgentSpec:
    """The program env.agent (or env.agent_command) names."""
    from rlvr.configlib import ConfigError, import_object

    if env_cfg.agent_command:
        from rlvr.agents.command import Command
        return AgentSpec(Command.parse(env_cfg.agent_command), env_cfg.agent_concurrency, env_cfg.tool_format)
    try:
        fn = import_object(env_cfg.agent, "env.agent")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not callable(fn):
        raise ConfigError(f"env.agent {env_cfg.agent!r} is a {type(fn).__name__}, not a function")
    if env_cfg.agent.partition(":")[0].endswith(".py"):  # a file: each worker loads it itself (its globals too)
        fn = FileFunction(str(Path(env_cfg.agent.partition(":")[0]).resolve()), env_cfg.agent.partition(":")[2])
    return AgentSpec(fn, env_cfg.agent_concurrency, env_cfg.tool_format)


@dataclass(frozen=True)
class FileFunction:
    """A function of a Python file, loaded by the process that calls it (what travels is the path)."""

    path: str
    attr: str

    @property
    def name(self) -> str:
        return self.attr

    def __call__(self, *args: Any) -> Any:
        from rlvr.configlib import import_object
        return import_object(f"{self.path}:{self.attr}", "env.agent")(*args)


def _run_agent(fn, base_url: str, model: str, problem: dict[str, Any]) -> Any:
    """In the worker: the agent's call, sync or async; its value as plain data."""
    result = fn(base_url, model, problem)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return result if isinstance(result, (str, dict, int, float, type(None))) else repr(result)


def outcome(value: Any) -> tuple[str | None, dict[str, float], str | None]:
    """(the final answer, reward components, what is wrong with the value) of an agent's return."""
    if isinstance(value, str):
        return value, {}, None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        ok = math.isfinite(float(value))
        return None, {"agent": float(value)} if ok else {}, None if ok else f"returned {value}; a reward is finite"
    if isinstance(value, dict) and set(value) <= {"answer", "reward"} and value:
        answer, reward = value.get("answer"), value.get("reward", 0.0)
        if (answer is None or isinstance(answer, str)) and isinstance(reward, numbers.Real) and math.isfinite(reward):
            return answer, {"agent": float(reward)} if "reward" in value else {}, None
    return None, {}, (f"returned {safe_text(repr(value), 80)}; return the final answer (str), a reward (a number) "
                      "or {'answer': str, 'reward': number}")


def run_agent_episodes(sampler, problems: Sequence[Problem], params, spec, *, group_offset: int = 0) -> list[Completion]:
    """G episodes per problem of the agent program, at most spec.agent.concurrency at once, each bounded by
    env.episode_timeout_s (wall time: the policy's sampling happens inside the program's calls)."""
    from rlvr.agents.endpoint import Endpoint
    from rlvr.agents.session import Segment, Session
    from rlvr.envs.faults import record_fault
    from rlvr.rollout.episodes import Renderer

    agent = spec.agent
    if agent.endpoint is None:
        agent.endpoint = Endpoint(agent.tool_format)
    endpoint, renderer = agent.endpoint, Renderer(sampler.tokenizer)
    g = 1 if params.greedy else params.group_size
    todo = [(i, j) for i in range(len(problems)) for j in range(g)]
    running: dict[tuple[int, int], tuple] = {}
    done: dict[tuple[int, int], Completion] = {}

    def finish(key, sid, handle, future, started) -> None:
        session = endpoint.close(sid)
        info: dict[str, Any] = {}
        answer, components, wrong = None, {}, None
        if not future.done():
            spec.host.abandon(handle)
            wrong = ("timeout", f"did not return within {spec.episode_timeout_s:g} s (env.episode_timeout_s)")
        else:
            try:
                answer, components, problem = outcome(future.result())
                wrong = None if problem is None else ("bad_result", problem)
            except CallFailed as exc:
                wrong = (exc.kind, exc.message, exc.type_name)
        if not session.segments:  # no request: one unsampled token stands for the episode (never in the loss)
            wrong = wrong or ("bad_result", "made no request to the policy")
            session.segments.append(Segment(renderer.prompt(session.problem.prompt)))
            session.segments[0].append([sampler.tokenizer.eos_token_id], None, "", "env")
        last = [t for s in session.segments for t in s.turns if t.role == "assistant"]
        text = answer if answer is not None else (last[-1].text if last else "")
        completion = session.completion(group_offset + key[0], key[1], sampler.version, text, "env_done")
        completion.env_components = components
        if wrong is not None:
            holder = _Holder(handle, info)
            record_fault(holder, {"method": "__call__", "kind": wrong[0], "type": wrong[2] if len(wrong) > 2 else "",
                                  "message": wrong[1]})
            completion.finish_reason = "env_done"  # type: ignore[assignment]
        completion.env_info = info
        done[key] = completion

    while todo or running:
        while todo and len(running) < agent.concurrency:
            key = todo.pop(0)
            problem = problems[key[0]]
            sid = endpoint.open(Session(problem, renderer, agent.tool_format))
            handle, future = spec.host.run(agent.name, _run_agent, agent.fn, endpoint.base_url(sid), agent.model,
                                           _problem_dict(problem))
            running[key] = (sid, handle, future, time.monotonic())

        def settled() -> bool:
            now = time.monotonic()
            return any(f.done() or now - t0 > spec.episode_timeout_s for _, _, f, t0 in running.values())

        endpoint.pump.serve(sampler, params, settled, expected=lambda: len(running), gap_s=spec.step_wait_s)
        now = time.monotonic()
        for key in sorted(running):
            sid, handle, future, t0 = running[key]
            if future.done() or now - t0 > spec.episode_timeout_s:
                del running[key]
                finish(key, sid, handle, future, t0)
    spec.host.recycle()
    out = [done[(i, j)] for i in range(len(problems)) for j in range(g)]
    spec.faults.record(out)
    return out


@dataclass
class _Holder:
    """What record_fault marks: an episode's handle and info (an agent episode has no _Trajectory)."""

    handle: Any
    info: dict[str, Any]
    finish: str | None = None


def _problem_dict(problem: Problem) -> dict[str, Any]:
    return {"id": problem.id, "prompt": problem.prompt, "answer": problem.answer, "source": problem.source,
            "metadata": dict(problem.metadata)}
