"""Environments: what answers the policy between its turns, gymnasium-shaped for text.

    env = make_env(cfg.env, problem)                 # one per trajectory
    first = env.reset(problem, seed)                 # chat messages, or text for a text prompt
    result = env.step(assistant_turn_text)           # StepResult(messages | None, components, done, info)

`single_turn` (the default) ends every episode after the first assistant turn: a
single-turn task is a trajectory of one turn on the same rollout path. `tools` runs
the tool calls of each turn (rlvr.tools) and answers with their results, until a
turn calls none. `frozenlake` and `breakout` adapt gymnasium environments
(rlvr.envs.gym), `inverted_pendulum` a MuJoCo one with continuous actions (rlvr.envs.control). A user environment is a subclass of `Environment` named by its
import path ('mypkg.envs:Maze') or registered with `@register_env("maze")`.

Reward components an environment reports (its `components`, name -> default weight)
join the verifier's in the reward composition (rlvr.rewards.compose): weighted by
`reward.weights`, normalised per group with reward.normalize=group, and logged as
`reward/<name>/mean`.
"""

from __future__ import annotations

import importlib
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlvr.config.env import EnvConfig
from rlvr.configlib import import_object
from rlvr.records import Message, Problem
from rlvr.tools import parse_tool_calls, run_tool


@dataclass
class StepResult:
    messages: list[Message] | None
    """What the environment says next (appended to the trajectory as context); None: nothing."""
    components: dict[str, float] = field(default_factory=dict)
    """Reward components earned by this step (summed over the episode)."""
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    """Recorded with the turn; `success` (bool) and `return` (float) are the episode's outcome
    for verifier 'env' and evaluation; `tool_calls` describes the turn's tool use."""


class Environment(ABC):
    """Base class: override `reset` and `step`; `components` names the reward components a step may
    report, with their default weights; `max_turns` the episode length when env.max_turns is 0."""

    components: ClassVar[dict[str, float]] = {}
    max_turns: ClassVar[int] = 8
    multi_turn: ClassVar[bool] = True
    hosts_user_code: ClassVar[bool] = False
    """rlvr's own class around user code (an adapter): env.isolation=auto runs it in worker processes."""
    settings_keys: ClassVar[frozenset[str] | None] = None
    """The env.settings keys it reads (a key it would ignore is a config error); None: any."""

    def __init__(self, settings: dict[str, Any] | None = None, **context: Any) -> None:
        self.settings = dict(settings or {})
        self.context = context

    @property
    def tools(self) -> list:
        """rlvr.tools.Tool objects the model may call (described to it in the prompt)."""
        return []

    def reset(self, problem: Problem, seed: int) -> list[Message] | str:
        return problem.prompt

    def close(self) -> None:  # noqa: B027  (optional: most environments hold nothing to release)
        """Called once the episode is over, however it ended (release what reset acquired)."""

    @abstractmethod
    def step(self, assistant_turn: str) -> StepResult:
        """React to the policy's turn (its decoded text, special tokens removed)."""


class SingleTurn(Environment):
    """One assistant turn, graded by the problem's verifier."""

    max_turns = 1
    multi_turn = False
    settings_keys = frozenset()

    def step(self, assistant_turn: str) -> StepResult:
        return StepResult(None, done=True)


class ToolUse(Environment):
    """The model calls tools (rlvr.tools) in `<tool_call>` blocks; each call's result comes back as a
    tool message; the first turn without a call is the final answer, graded by the verifier.
    Settings come from env.tools, env.tool_format and env.tool_timeout_s."""

    max_turns = 4
    settings_keys = frozenset()

    def __init__(
        self,
        settings: dict[str, Any] | None = None,
        *,
        tools: dict | None = None,
        tool_format: str = "hermes",
        tool_timeout_s: float = 5.0,
        **context: Any,
    ) -> None:
        super().__init__(settings, **context)
        self._tools, self.tool_format, self.tool_timeout_s = dict(tools or {}), tool_format, tool_timeout_s

    @property
    def tools(self) -> list:
        return list(self._tools.values())

    def step(self, assistant_turn: str) -> StepResult:
        calls = parse_tool_calls(assistant_turn, self.tool_format)
        if not calls:
            return StepResult(None, done=True, info={"tool_calls": []})
        messages, described = [], []
        for call in calls:
            result = run_tool(self._tools, call, self.tool_timeout_s)
            messages.append({"role": "tool", "name": call.name or "unknown", "content": result.content})
            described.append(
                {
                    "name": call.name,
                    "arguments": call.arguments,
                    "ok": result.ok,
                    "error": result.error,
                    "timeout": result.timeout,
                }
            )
        return StepResult(messages, info={"tool_calls": described})


class AgentProgram(Environment):
    """env.name=agent: a program of the user's drives each episode through an API (rlvr.agents); this
    entry names its reward component (a reward it returns) and is never stepped."""

    components: ClassVar[dict[str, float]] = {"agent": 1.0}
    settings_keys = frozenset()

    def step(self, assistant_turn: str) -> StepResult:
        raise RuntimeError("an agent program's episodes are run by rlvr.agents, never stepped")


ENVS: dict[str, type[Environment]] = {"single_turn": SingleTurn, "tools": ToolUse, "agent": AgentProgram}


def episode_returns(completions) -> list[float]:
    """Each episode's return when its environment reports one (`info["return"]`); an episode cut
    before its first step (a turn that ran out of tokens) earned 0. Empty when none reports one."""
    if not any("return" in c.env_info for c in completions):
        return []
    return [float(c.env_info.get("return", 0.0)) for c in completions]


def schemas(tools: list) -> list[dict]:
    """OpenAI-style tool descriptions, of rlvr.tools.Tool objects or of descriptions already."""
    return [t if isinstance(t, dict) else t.schema() for t in tools]


def register_env(name: str):
    """Class decorator: `@register_env("maze")` makes env.name=maze build this class."""

    def wrap(cls: type[Environment]) -> type[Environment]:
        ENVS[name] = cls
        return cls

    return wrap


BUILT_IN = {
    "frozenlake": "rlvr.envs.gym",
    "breakout": "rlvr.envs.gym",
    "inverted_pendulum": "rlvr.envs.control",
    "openenv": "rlvr.envs.openenv",
}
"""Environments registered when their module is imported (each needs a package of the envs extra)."""
GAMES = ("frozenlake", "breakout", "inverted_pendulum")
"""Built-in environments whose episodes are the built-in task of the same name (rlvr.tasks.games)."""


def env_class(name: str) -> type[Environment]:
    """The class env.name names: a registered name, a built-in gymnasium adapter, or 'module:Class'."""
    if name not in ENVS and name in BUILT_IN:
        importlib.import_module(BUILT_IN[name])  # registers it (imports gymnasium)
    if name.startswith("verifiers:"):  # a verifiers environment's id: rlvr.envs.verifiers_hub
        return importlib.import_module("rlvr.envs.verifiers_hub").Verifiers
    if name in ENVS:
        return ENVS[name]
    if ":" in name:
        cls = import_object(name, "env.name")
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise ValueError(f"env.name {name!r}: {cls!r} is not a subclass of rlvr.envs.Environment")
        return cls
    raise ValueError(
        f"env.name {name!r}: not a known environment ({', '.join(sorted(set(ENVS) | set(BUILT_IN)))}) "
        "nor an import path 'module:Class'"
    )


def env_components(env: EnvConfig) -> dict[str, float]:
    """The reward components the environment `env` (a run's section env) reports, with their default weights."""
    cls = env_class(env.name)
    read = getattr(cls, "components_of", None)  # a verifiers environment's: its rubric's functions
    return read(env) if read is not None else dict(cls.components)


def episode_seed(problem: Problem) -> int:
    """The seed of a problem's episodes: its own `seed` in its metadata (a game's map), else a
    stable hash of its id; the same for every sample of the group."""
    if "seed" in problem.metadata:
        return int(problem.metadata["seed"])
    return zlib.crc32(problem.id.encode())


__all__ = [
    "ENVS",
    "AgentProgram",
    "Environment",
    "SingleTurn",
    "StepResult",
    "ToolUse",
    "env_class",
    "env_components",
    "episode_seed",
    "register_env",
    "schemas",
]
