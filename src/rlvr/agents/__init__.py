"""Agents written as programs: trained through an OpenAI/Anthropic-compatible rollout endpoint.

    env.name=agent env.agent=mypkg.agents:solve      # def solve(base_url, model, problem) -> answer
    env.name=agent env.agent_command="node agent.js" # any language: rlvr.agents.command
    env.agent_protocol=lines                         # ... as long-lived processes, episodes as JSON lines

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.agents.command import Command
from rlvr.configlib import ConfigError, import_object
from rlvr.envs import AgentProgram, verifiers_hub


@dataclass
class AgentSpec:
    """How agent episodes run (env.agent, env.agent_concurrency, env.tool_format)."""

    fn: Any
    concurrency: int = 256
    tool_format: str = "hermes"
    model: str = "policy"
    components: frozenset[str] = frozenset()
    """Reward components it may return besides its reward (a verifiers rubric's functions)."""
    scores: bool = False
    """Its reward is the episode's score: `correct` for verifier 'env' (a verifiers rubric's reward)."""

    @property
    def name(self) -> str:
        return getattr(self.fn, "name", None) or getattr(self.fn, "__qualname__", "agent")

    def run(self, engine, problems, params, spec, *, group_offset: int = 0):
        """G episodes per problem of the program (rlvr.agents.episodes): what run_episodes does for it."""
        from rlvr.agents.episodes import run_agent_episodes

        return run_agent_episodes(engine, problems, params, spec, group_offset=group_offset)

    endpoint: Any = field(default=None, repr=False)
    """Started on the first rollout (rlvr.agents.endpoint.Endpoint)."""


PROCESS_PER_EPISODE_CONCURRENCY = 32
"""env.agent_concurrency's default for a command started per episode: measured on the tool task (Node,
256 episodes a step, 2 cores), 32 processes at once take no longer than 256 and a small part of the memory."""


def concurrency(env_cfg) -> int:
    """Episodes in flight at once: env.agent_concurrency, or its default (0)."""
    if env_cfg.agent_concurrency:
        return env_cfg.agent_concurrency
    once = bool(env_cfg.agent_command) and env_cfg.agent_protocol == "once"
    return PROCESS_PER_EPISODE_CONCURRENCY if once else 256


def agent_spec(env_cfg) -> AgentSpec:
    """The program env.agent (or env.agent_command) names, or a verifiers environment's rollout."""
    if verifiers_hub.is_verifiers(env_cfg.name):
        v1 = env_cfg.python  # a v1 environment: its runner, a long-lived command of env.python
        return AgentSpec(
            Command(verifiers_hub.v1_argv(env_cfg), "lines", env_cfg.name) if v1 else verifiers_hub.program(env_cfg),
            concurrency(env_cfg),
            env_cfg.tool_format,
            components=frozenset(verifiers_hub.components(env_cfg)),
            scores=True,
        )
    if env_cfg.agent_command:
        command = Command.parse(env_cfg.agent_command, env_cfg.agent_protocol)
        return AgentSpec(command, concurrency(env_cfg), env_cfg.tool_format)
    try:
        fn = import_object(env_cfg.agent, "env.agent")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not callable(fn):
        raise ConfigError(f"env.agent {env_cfg.agent!r} is a {type(fn).__name__}, not a function")
    if env_cfg.agent.partition(":")[0].endswith(".py"):  # a file: each worker loads it itself (its globals too)
        fn = FileFunction(str(Path(env_cfg.agent.partition(":")[0]).resolve()), env_cfg.agent.partition(":")[2])
    return AgentSpec(fn, concurrency(env_cfg), env_cfg.tool_format)


@dataclass(frozen=True)
class FileFunction:
    """A function of a Python file, loaded by the process that calls it (what travels is the path)."""

    path: str
    attr: str

    @property
    def name(self) -> str:
        return self.attr

    def __call__(self, *args: Any) -> Any:
        return import_object(f"{self.path}:{self.attr}", "env.agent")(*args)


__all__ = ["AgentProgram", "AgentSpec", "FileFunction", "agent_spec"]
