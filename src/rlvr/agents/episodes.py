"""Agent episodes: the program runs in a harness worker, its requests are sampled by the rollout's
own thread through the endpoint's pump, and each episode becomes a Completion from its session.

An episode fails (marked invalid, counted as an environment failure of the program) when the program
raises, exits, dies, overruns env.episode_timeout_s (wall time: the policy's sampling happens inside
its calls), returns something that is not an answer or a reward, or never asks the policy.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.agents.endpoint import Endpoint
from rlvr.agents.session import Segment, Session
from rlvr.envs.faults import record_fault
from rlvr.envs.host import Handle
from rlvr.harness import CallFailed, safe_text
from rlvr.records import Completion, Problem
from rlvr.rollout.episodes import Renderer


@dataclass
class _Episode:
    key: tuple[int, int]
    """(problem index, index in its group)."""
    sid: str
    handle: Handle
    future: Any
    started: float
    info: dict[str, Any] | None = None
    finish: str | None = None

    def overran(self, timeout_s: float, now: float) -> bool:
        return not self.future.done() and now - self.started > timeout_s


def run_agent_episodes(engine, problems: Sequence[Problem], params, spec, *, group_offset: int = 0) -> list[Completion]:
    """G episodes per problem of spec.agent's program, at most spec.agent.concurrency at once."""
    agent = spec.agent
    if agent.endpoint is None:
        agent.endpoint = Endpoint(agent.tool_format)
    endpoint, renderer = agent.endpoint, Renderer(engine.tokenizer, agent.tool_format)
    g = 1 if params.greedy else params.group_size
    todo = [(i, j) for i in range(len(problems)) for j in range(g)]
    running: dict[tuple[int, int], _Episode] = {}
    done: dict[tuple[int, int], Completion] = {}
    try:
        _drive(todo, running, done, problems, spec, endpoint, renderer, engine, params, group_offset)
    finally:
        spec.host.recycle()
    out = [done[(i, j)] for i in range(len(problems)) for j in range(g)]
    spec.faults.record(out)
    return out


def _drive(todo, running, done, problems, spec, endpoint, renderer, engine, params, group_offset) -> None:
    """Start episodes up to the concurrency bound, sample what they ask, and finish each as it ends."""
    agent, timeout_s = spec.agent, spec.episode_timeout_s

    def settled() -> bool:
        now = time.monotonic()
        return any(e.future.done() or e.overran(timeout_s, now) for e in running.values())

    while todo or running:
        while todo and len(running) < agent.concurrency:
            key = todo.pop(0)
            problem = problems[key[0]]
            sid = endpoint.open(Session(problem, renderer, agent.tool_format))
            handle, future = spec.host.run(
                agent.name, _run_agent, agent.fn, endpoint.base_url(sid), agent.model, _problem_dict(problem)
            )
            running[key] = _Episode(key, sid, handle, future, time.monotonic())
        endpoint.pump.serve(engine, params, settled, expected=lambda: len(running), gap_s=spec.step_wait_s)
        now = time.monotonic()
        for key in sorted(running):
            episode = running[key]
            if episode.future.done() or episode.overran(timeout_s, now):
                del running[key]
                if not episode.future.done():
                    spec.host.abandon(episode.handle)  # its worker is killed at the end of the rollout
                done[key] = _completion(
                    episode, endpoint.close(episode.sid), engine, renderer, agent, timeout_s, group_offset
                )


def _completion(
    episode: _Episode, session: Session, engine, renderer: Renderer, agent, timeout_s: float, group_offset: int
) -> Completion:
    answer, components, fault = _outcome(episode, agent, timeout_s)
    if not session.segments:  # no request: one unsampled token stands for the episode (never in the loss)
        why = f"its requests were refused: {session.refused}" if session.refused else "made no request to the policy"
        fault = fault or ("bad_result", "", why)
        session.segments.append(Segment(renderer.prompt(session.problem.prompt)))
        session.segments[0].append([engine.tokenizer.eos_token_id], None, "")
    said = [t for s in session.segments for t in s.turns if t.role == "assistant"]
    text = answer if answer is not None else (said[-1].text if said else "")
    completion = session.completion(group_offset + episode.key[0], episode.key[1], engine.version, text, "env_done")
    completion.env_components = components
    scored = agent.scores and "agent" in components  # its reward is the episode's outcome (verifier 'env')
    episode.info = completion.env_info = {"score": components["agent"], "return": components["agent"]} if scored else {}
    if fault is not None:
        kind, type_name, message = fault
        record_fault(episode, {"method": "__call__", "kind": kind, "type": type_name, "message": message})
    return completion


def _outcome(episode: _Episode, agent, timeout_s: float) -> tuple[str | None, dict[str, float], tuple | None]:
    """(the final answer, reward components, (kind, type, message) of a failure or None)."""
    if not episode.future.done():
        return None, {}, ("timeout", "", f"did not return within {timeout_s:g} s (env.episode_timeout_s)")
    try:
        value = episode.future.result()
    except CallFailed as exc:
        return None, {}, (exc.kind, exc.type_name, exc.message)
    answer, components, wrong = outcome(value, agent.components)
    return answer, components, None if wrong is None else ("bad_result", "", wrong)


def outcome(value: Any, named: frozenset[str] = frozenset()) -> tuple[str | None, dict[str, float], str | None]:
    """(the final answer, reward components, what is wrong with the value) of an agent's return.
    `named`: the components besides 'agent' (its reward) that it may return."""
    if isinstance(value, str):
        return value, {}, None
    if _finite(value):
        return None, {"agent": float(value)}, None
    if isinstance(value, dict) and set(value) <= {"answer", "reward", "components"} and value:
        answer, reward, parts = value.get("answer"), value.get("reward", 0.0), value.get("components", {})
        if (
            (answer is None or isinstance(answer, str))
            and _finite(reward)
            and isinstance(parts, dict)
            and all(_finite(v) for v in parts.values())
        ):
            if set(parts) - named:
                return (
                    None,
                    {},
                    (f"returned components {sorted(set(parts) - named)[:8]}; it may return {sorted(named) or 'none'}"),
                )
            components = {str(k): float(v) for k, v in parts.items()}
            return answer, {**components, "agent": float(reward)} if "reward" in value else components, None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return None, {}, f"returned {safe_text(repr(value), 80)}; a reward is finite"
    return (
        None,
        {},
        (
            f"returned {safe_text(repr(value), 80)}; return the final answer (str), a reward (a number) "
            "or {'answer': str, 'reward': number}"
        ),
    )


def _finite(value: Any) -> bool:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _run_agent(fn, base_url: str, model: str, problem: dict[str, Any]) -> Any:
    """In the worker: the agent's call, sync or async; its value as plain data (numpy numbers as floats)."""
    result = fn(base_url, model, problem)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return _plain(result)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, type(None))):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return repr(value)[:80]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)[:200]


def _problem_dict(problem: Problem) -> dict[str, Any]:
    return {
        "id": problem.id,
        "prompt": problem.prompt,
        "answer": problem.answer,
        "source": problem.source,
        "metadata": dict(problem.metadata),
    }
