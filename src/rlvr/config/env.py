"""Configuration of episodes (section `env`, rlvr.envs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlvr.configlib import require


@dataclass
class EnvConfig:
    name: str = "single_turn"
    """The environment of each trajectory: 'single_turn' (one assistant turn, graded by the verifier),
    'tools' (the model calls env.tools until it answers), 'frozenlake' and 'breakout' (gymnasium games,
    rlvr.envs.gym), 'inverted_pendulum' (MuJoCo robot control, continuous actions: rlvr.envs.control), 'openenv' (an OpenEnv environment named in env.settings, rlvr.envs.openenv),
    'agent' (a program of your own, env.agent, talking to the policy through an
    OpenAI/Anthropic-style endpoint: rlvr.agents), 'verifiers:<id>' (a verifiers environment with
    task.name=verifiers; env.settings are its load_environment arguments: rlvr.envs.verifiers_hub), or a
    class of your own as 'module:Class' (a subclass of rlvr.envs.Environment)."""
    max_turns: int = 0
    """Assistant turns per trajectory; 0: the environment's own (single_turn 1, tools 4, frozenlake 12,
    breakout 64, inverted_pendulum 40). A trajectory that reaches it ends with finish reason 'max_turns'."""
    max_tokens: int = 0
    """Tokens after the prompt of a whole trajectory, sampled and appended; each turn samples at most
    rollout.max_new_tokens of what is left, and a trajectory with no room for another turn ends with
    finish reason 'length'. 0: no limit but env.max_turns turns (with env.history = 0, keep the whole
    trajectory within the model's context: set it)."""
    history: int = 0
    """What each turn sees: 0, the whole trajectory; k, the prompt and the last k exchanges (Markov
    environments such as games). With k the update scores each turn in the context it was sampled in."""
    credit: Literal["trajectory", "turn"] = "trajectory"
    """'trajectory': one group-normalised advantage for every token of a trajectory. 'turn': each turn's
    tokens get the return from that turn on (its step rewards and the final verdict), baselined and
    scaled by the group's total returns."""
    tools: list[str] = field(default_factory=list)
    """Tools of the 'tools' environment: 'calculator', 'python' (runs in the sandbox, reward.code's
    limits), or 'module:function' for a typed function of your own."""
    tool_format: Literal["hermes", "compact"] = "hermes"
    """How the model writes a call: 'hermes', <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    (chat templates with tools); 'compact', <tool_call>name(argument)</tool_call> (small models). A
    template that cannot take `tools` is told the format in the system message that lists them."""
    tool_timeout_s: float = 5.0
    """A tool that does not answer in this time answers the model with a timeout error."""
    step_wait_s: float = 0.05
    """After a turn, trajectories whose environment has not answered in this time (a slow tool) are
    left to catch up, and the others sample their next turn without them."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Your environment's own settings (its `settings` attribute; a verifiers environment's
    load_environment arguments); the built-in ones read none."""
    python: str = ""
    """env.name=verifiers:<id>: the interpreter its environment runs in, that of a virtual environment with
    verifiers>=0.4 and the environment's package (its v1 API, whose dependencies may conflict with the
    trainer's: rlvr.envs.verifiers_v1). '': the trainer's own, verifiers' classic API."""
    agent: str = ""
    """env.name=agent: the agent program, a function 'module:function' (or 'path/file.py:function') called
    as fn(base_url, model, problem) for each episode; it talks to the policy through base_url with the
    OpenAI or Anthropic SDK and returns its final answer, a reward, or {'answer', 'reward'} (rlvr.agents)."""
    agent_command: str = ""
    """env.name=agent: the agent program as a command in any language (instead of env.agent), run once
    per episode with RLVR_BASE_URL and RLVR_MODEL set and the problem as JSON on its standard input;
    what it prints last is its answer, a reward, or {"answer", "reward"} as JSON (rlvr.agents.command).
    Setting either of env.agent and env.agent_command in a later layer (an override) drops the other."""
    agent_protocol: Literal["once", "lines"] = "once"
    """How env.agent_command runs: 'once', a process per episode (the problem on its standard input, its
    result the last thing it prints); 'lines', one long-lived process in each of env.workers worker
    processes, sent episodes as JSON lines and answering each with a line (rlvr.agents.command)."""
    agent_concurrency: int = 0
    """env.name=agent: episodes in flight at once (their requests are sampled together: once a request
    waits, the others' are gathered until each episode in flight has asked or env.step_wait_s passes
    with none arriving). 0: 32 for env.agent_protocol=once (a process each), else 256."""
    isolation: Literal["auto", "process", "thread"] = "auto"
    """Where environments run. 'process': in env.workers worker processes, so one that hangs, exits or
    crashes is killed and costs only its own episodes; 'thread': in threads of the trainer (an
    overrun is abandoned but cannot be killed; for debugging with breakpoints). 'auto': 'process' for
    an environment of your own (and openenv's, which runs yours), 'thread' for rlvr's (their user
    code, the tools, runs contained)."""
    workers: int = 2
    """Worker processes of env.isolation=process; each hosts many environments, their calls in threads."""
    reset_timeout_s: float = 30.0
    """An environment's construction and reset (and, at the end, its close): past it the episode ends,
    invalid and counted (rollout/env_error/timeout_frac)."""
    step_timeout_s: float = 60.0
    """One step of an environment (its tool calls included); past it the episode ends, invalid and counted."""
    episode_timeout_s: float = 300.0
    """An episode's environment calls in all (reset and every step; the policy's sampling not counted)."""
    max_message_chars: int = 16384
    """A message an environment sends is cut to this many characters (marked) before it is tokenised;
    env.max_tokens then bounds the trajectory in tokens."""
    fail_fast: int = 16
    """Stop the run when its first fail_fast episodes all failed the same way (the same method of the
    same class, the same kind of failure), with a one-line error saying what was wrong; 0: never."""

    def __post_init__(self) -> None:
        require(self.max_turns >= 0, "max_turns", f"must be >= 0, got {self.max_turns}")
        require(self.max_tokens >= 0, "max_tokens", f"must be >= 0, got {self.max_tokens}")
        require(self.history >= 0, "history", f"must be >= 0 (0 = the whole trajectory), got {self.history}")
        require(
            self.tool_timeout_s > 0 and self.step_wait_s >= 0,
            "tool_timeout_s",
            "tool_timeout_s must be > 0 and step_wait_s >= 0",
        )
        for key in ("reset_timeout_s", "step_timeout_s", "episode_timeout_s"):
            require(getattr(self, key) > 0, key, f"must be > 0 seconds, got {getattr(self, key)}")
        require(self.workers >= 1, "workers", f"must be >= 1, got {self.workers}")
        require(self.max_message_chars >= 64, "max_message_chars", f"must be >= 64, got {self.max_message_chars}")
        require(
            (self.name == "agent") == bool(self.agent or self.agent_command)
            and not (self.agent and self.agent_command),
            "agent",
            "env.name=agent runs one program: env.agent='module:function' or env.agent_command='...'; "
            "set env.name=agent with exactly one of them, or neither",
        )
        require(
            self.agent_concurrency >= 0,
            "agent_concurrency",
            f"must be >= 0 (0: the default), got {self.agent_concurrency}",
        )
        require(
            self.agent_protocol == "once" or bool(self.agent_command),
            "agent_protocol",
            "env.agent_protocol=lines is how env.agent_command runs; set env.agent_command too",
        )
        require(
            not self.python or self.name.startswith("verifiers:"),
            "python",
            "env.python is the interpreter of a verifiers environment: set env.name=verifiers:<id> too",
        )
        require(self.fail_fast >= 0, "fail_fast", f"must be >= 0 (0: never stop), got {self.fail_fast}")
        require(
            not self.tools or self.name == "tools" or ":" in self.name,
            "tools",
            f"tools are called in the 'tools' environment; env.name={self.name} has none of its own",
        )
        if self.name == "single_turn":
            require(
                self.max_turns in (0, 1),
                "max_turns",
                "single_turn has one turn: set env.name=tools (or another multi-turn environment) for more",
            )
            require(
                self.history == 0 and self.max_tokens == 0 and self.credit == "trajectory",
                "history",
                "env.history, env.max_tokens and env.credit=turn act on multi-turn episodes: set env.name",
            )
