"""Parts of a run built from its config, above the modules that define them.

    spec = episode_spec(cfg)          # what a run's rollouts run: environments, agents, their bounds

(The place where the rest of a run's assembly is to join it; rlvr.rollout, rlvr.envs and
rlvr.agents each take only what is built here.)
"""

from __future__ import annotations

from rlvr.agents import agent_spec
from rlvr.envs import AgentProgram, Environment, env_class
from rlvr.envs.checks import Limits
from rlvr.envs.faults import FaultLedger
from rlvr.envs.host import ProcessHost, ThreadHost
from rlvr.records import Problem
from rlvr.rollout.episodes import SINGLE_TURN, EpisodeSpec
from rlvr.tools import hosted, resolve_tools


def episode_spec(cfg, tool_host=None) -> EpisodeSpec:
    """A run's episodes, from its `Config` (sections env, and reward.code for the python tool).
    tool_host(call, timeout_s) -> ToolResult: where the tool calls run (rlvr.tools.hosted); None: here."""
    e = cfg.env
    cls = env_class(e.name)
    if e.name == "single_turn":
        return SINGLE_TURN
    bounds = dict(step_wait_s=e.step_wait_s, reset_timeout_s=e.reset_timeout_s, step_timeout_s=e.step_timeout_s,
                  episode_timeout_s=e.episode_timeout_s, limits=Limits(e.max_message_chars),
                  faults=FaultLedger(e.fail_fast))
    if issubclass(cls, AgentProgram):  # env.name=agent, verifiers:<id>
        return EpisodeSpec(cls, host=ProcessHost(e.workers), agent=agent_spec(e), **bounds)
    tools = {}
    if e.tools:
        tools = resolve_tools(e.tools, cfg.reward.code)
        if tool_host is not None:
            tools = hosted(tools, tool_host)
    settings = dict(e.settings)

    max_turns = e.max_turns or cls.max_turns

    def make_env(problem: Problem) -> Environment:
        return cls(settings, tools=tools, tool_format=e.tool_format, tool_timeout_s=e.tool_timeout_s,
                   max_turns=max_turns)

    make_env.env_name = cls.__name__  # type: ignore[attr-defined]  # names it when its constructor fails

    return EpisodeSpec(make_env, max_turns=max_turns, max_tokens=e.max_tokens, history=e.history,
                       host=ProcessHost(e.workers) if isolation(e.isolation, cls) == "process" else ThreadHost(),
                       **bounds)


def isolation(setting: str, cls: type) -> str:
    """'auto': worker processes for an environment of your own, threads for rlvr's (whose user code,
    the tools, runs contained at each call)."""
    if setting != "auto":
        return setting
    return "thread" if cls.__module__.startswith("rlvr.") and not cls.hosts_user_code else "process"
