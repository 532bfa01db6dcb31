"""Trajectories: every engine's rollouts, one turn or many, on one path.

    completions = run_episodes(engine, problems, params, spec, group_offset=offset)

An engine contributes `sample(contexts, params, group_size)`: continuations of token
contexts, (token ids, behaviour log-probs, finish) each. This module runs the
episodes around it: G trajectories per problem, each with its environment
(rlvr.envs); the first turn samples the G continuations of each prompt in one call
(the loop engine prefills the prompt once for all G); after each turn the
environments step, concurrently in threads, and the turns of every trajectory that
is ready are sampled together, so a trajectory waiting on a slow tool does not hold
the others (past env.step_wait_s they go on without it).

Token-exact: a trajectory's tokens are exactly those the engine sampled plus those the
environment's messages rendered to, appended once; sampled text is never re-tokenised.
A message is rendered with the chat template's incremental form: the template applied
to a fixed two-message conversation and to the same conversation with the new messages
and the generation prompt; what the second adds is appended, after the tokens the
template puts behind an assistant turn's end-of-sequence token (ChatML's newline).
Text prompts (no chat template, the tiny model) append the message text itself, a tool
result as `<tool_response>...</tool_response>`. The loss mask is 1 on sampled tokens only.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.configlib import ConfigError
from rlvr.envs import Environment, SingleTurn, episode_seed, schemas
from rlvr.envs.checks import Limits
from rlvr.envs.faults import FaultLedger, overran, record_fault
from rlvr.envs.host import EnvHost, Handle, ThreadHost
from rlvr.records import Completion, Message, Problem, Turn, fingerprint
from rlvr.rollout.controls import Bounded, NewWeights
from rlvr.rollout.samples import TokenSampler, kept_of
from rlvr.rollout.tool_prompt import with_tools_described

Versioned = tuple[list[int], list[float], str, list[int], list[int]]
"""A Sample's ids, log-probs and finish, the policy version that sampled each token, and each
token's kept-set record (0: untruncated)."""


@dataclass(frozen=True)
class EpisodeSpec:
    """How episodes run (from the `env` config section)."""

    make_env: Callable[[Problem], Environment]
    max_turns: int = 1
    max_tokens: int = 0
    """Tokens after the prompt, sampled and appended, of a whole trajectory; 0: no limit but max_turns
    turns of at most max_new_tokens each."""
    history: int = 0
    """0: each turn sees the whole trajectory; k: the prompt and the last k exchanges only."""
    step_wait_s: float = 0.05
    reset_timeout_s: float = 30.0
    """Construction and reset (and, at the end, close) of an episode's environment."""
    step_timeout_s: float = 60.0
    """One step (its tool calls included)."""
    episode_timeout_s: float = 300.0
    """All of an episode's environment calls together (the policy's sampling not counted)."""
    limits: Limits = field(default_factory=Limits)
    host: EnvHost = field(default_factory=ThreadHost)
    """Where the environments live (rlvr.envs.host): worker processes for user code, threads for rlvr's own."""
    faults: FaultLedger = field(default_factory=FaultLedger)
    """Counts failed episodes, logs each kind once, and stops a run whose environment always fails."""
    agent: Any = None
    """env.name=agent: the agent program that drives each episode (rlvr.agents.AgentSpec: its `run`)."""
    tool_format: str = "hermes"
    """env.tool_format: how the environment reads calls, and so how the prompt describes them."""
    new_weights: NewWeights | None = None
    """Partial rollouts (a Ray rollout worker under deploy.partial_rollouts): weights taken between
    decode steps; None: a turn is sampled with the weights it started with."""


def _single_turn(problem: Problem) -> Environment:
    return SingleTurn()


SINGLE_TURN = EpisodeSpec(make_env=_single_turn, host=ThreadHost(inline=True))
"""The default: one assistant turn per trajectory (its trivial calls made in line)."""


# --- rendering ---------------------------------------------------------------------------------


class Renderer:
    """Token ids of prompts and of what environments say, for one tokenizer; `tool_format`: how a
    template that cannot take `tools` is told to write calls (env.tool_format)."""

    def __init__(self, tokenizer, tool_format: str = "hermes") -> None:
        self.tokenizer, self.tool_format = tokenizer, tool_format
        self._after_eos: dict[tuple, list[int]] = {}

    def _template(self, messages: list[Message], tools: list | None, generation_prompt: bool) -> list[int]:
        kwargs: dict[str, Any] = {"add_generation_prompt": generation_prompt, "tokenize": True, "return_dict": False}
        if tools and self.supports_tools:
            kwargs["tools"] = schemas(tools)
        return list(self.tokenizer.apply_chat_template(messages, **kwargs))

    @property
    def chat(self) -> bool:
        return getattr(self.tokenizer, "chat_template", None) is not None

    @property
    def supports_tools(self) -> bool:
        return "tools" in str(getattr(self.tokenizer, "chat_template", "") or "")

    def prompt(self, first: list[Message] | str, tools: list | None = None) -> list[int]:
        """A chat prompt through the template, its tools described (in the template's own words when it
        takes `tools`, else in a system message); a text prompt as it is."""
        if isinstance(first, str):  # a text prompt is fed as it is: the task's format teaches its tools
            return self.tokenizer(first, add_special_tokens=False).input_ids
        if not self.chat:
            raise ConfigError(
                "the prompt is chat messages but the model's tokenizer has no chat template; use a "
                "chat model, or data.chat=false to feed text prompts as they are"
            )
        as_given = not tools or self.supports_tools
        messages = list(first) if as_given else with_tools_described(list(first), tools, self.tool_format)
        return self._template(messages, tools, True)

    def continuation(self, messages: list[Message], tools: list | None = None, chat: bool | None = None) -> list[int]:
        """Tokens to append after an assistant turn that ended with eos, for the environment's messages
        and the next turn's generation prompt; `chat`: whether the prompt went through the template
        (a text prompt's episode stays text: default, whether the tokenizer has a template)."""
        if not (self.chat if chat is None else chat):
            return self.tokenizer("".join(_text_of(m) for m in messages), add_special_tokens=False).input_ids
        base_msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        base = self._template(base_msgs, tools, False)
        full = self._template(base_msgs + [dict(m) for m in messages], tools, True)
        if full[: len(base)] != base:
            raise ValueError(
                "the chat template renders an earlier turn differently once more messages follow; "
                "trajectories cannot be token-exact with it"
            )
        return self.after_eos(base) + full[len(base) :]

    def after_eos(self, base: list[int]) -> list[int]:
        """What the template puts after an assistant turn's end-of-sequence token (ChatML: a newline)."""
        eos = self.tokenizer.eos_token_id
        if eos not in base:
            raise ValueError(
                f"the chat template does not close an assistant turn with the eos token "
                f"{self.tokenizer.eos_token!r}, where sampling stops; trajectories cannot be token-exact"
            )
        return base[len(base) - base[::-1].index(eos) :]


def _text_of(message: Message) -> str:
    content = str(message.get("content", ""))
    return f"<tool_response>{content}</tool_response>" if message.get("role") == "tool" else content


# --- the episodes --------------------------------------------------------------------------------


@dataclass
class _Trajectory:
    problem: Problem
    group: int
    index: int
    handle: Handle
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    """Each token's kept-set record (rlvr.algos.truncation; 0: untruncated or appended)."""
    mask: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    """The policy version behind each token (an appended token: its turn's last sampled token's)."""
    turns: list[Turn] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    finish: str | None = None
    chat: bool = False
    """The prompt went through the chat template: so do the environment's messages."""
    env_s: float = 0.0
    """Time its environment's calls took so far (env.episode_timeout_s bounds it)."""

    @property
    def assistant_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.role == "assistant"]

    @property
    def tools(self) -> list | None:
        return self.handle.info.get("tools") or None

    def context(self, history: int) -> tuple[list[int], int]:
        """(the tokens the policy sees for its next turn, where they start in `tokens`)."""
        start = 0
        if history:
            mine = self.assistant_turns
            if len(mine) >= history:
                start = mine[len(mine) - history].start
        return self.prompt_ids + self.tokens[start:], start


def run_episodes(
    engine: TokenSampler, problems: Sequence[Problem], params, spec: EpisodeSpec, *, group_offset: int = 0
) -> list[Completion]:
    """G trajectories per problem (1 when greedy), group after group: problem i's get group id
    group_offset + i. Every environment call is bounded in time and contained (rlvr.envs.host): an
    episode whose environment fails, overruns or answers with the wrong shape ends, marked (its
    `env_info` has `error` and `env_error`, the kind), and is never rewarded. Every environment is
    closed at the end, however the episodes ended. Raises EnvironmentBroken when the run's first
    env.fail_fast episodes all failed the same way."""
    if spec.agent is not None:  # a program drives the episodes (rlvr.agents)
        return spec.agent.run(engine, problems, params, spec, group_offset=group_offset)
    g = 1 if params.greedy else params.group_size
    renderer = Renderer(engine.tokenizer, spec.tool_format)
    host, trajs = spec.host, []
    budget = spec.max_tokens or 1 << 62
    limit = (engine.max_context if isinstance(engine, Bounded) else None) or 1 << 62  # the model's positions
    try:
        opening = {}
        for i, problem in enumerate(problems):
            seed = episode_seed(problem)
            for j in range(g):
                handle, opening[len(trajs)] = host.open(spec.make_env, problem, seed, spec.limits)
                trajs.append(_Trajectory(problem, group_offset + i, j, handle, []))
        opened = _wait_all(opening, trajs, spec, "reset", spec.reset_timeout_s)
        for t_id, traj in enumerate(trajs):  # one that overran is marked already: it gets the problem's prompt
            _opened(traj, opened.get(t_id, {}), renderer)
        _first_turns(engine, trajs, params, g, spec)
        pending = {t_id: _step(spec, t) for t_id, t in enumerate(trajs) if t.finish is None}
        while pending:
            futures = [f for f, _, _ in pending.values()]
            done, _ = cf.wait(futures, timeout=spec.step_wait_s)
            if not done:  # nothing answered at once: wait for the first answer, or the first deadline
                first_deadline = min(deadline for _, deadline, _ in pending.values())
                cf.wait(futures, timeout=max(0.0, first_deadline - time.monotonic()), return_when=cf.FIRST_COMPLETED)
            now, ready = time.monotonic(), []
            for t_id in sorted(pending):  # trajectory order: deterministic
                future, deadline, started = pending[t_id]
                traj = trajs[t_id]
                if future.done():
                    del pending[t_id]
                    traj.env_s += now - started
                    if _after_step(traj, future.result(), renderer, spec, budget):
                        ready.append(t_id)
                elif now >= deadline:
                    del pending[t_id]
                    overran(traj, spec, host, "step", now - started)
            if ready:
                _next_turns(engine, [trajs[t] for t in ready], params, spec, budget, limit)
                for t_id in ready:
                    if trajs[t_id].finish is None:
                        pending[t_id] = _step(spec, trajs[t_id])
    finally:
        _close_all(trajs, spec)
        host.recycle()
    completions = [_completion(t, engine) for t in trajs]
    spec.faults.record(completions)
    return completions


def _step(spec: EpisodeSpec, traj: _Trajectory) -> tuple[cf.Future, float, float]:
    """(the step's future, its deadline, when it started)."""
    now = time.monotonic()
    left = min(spec.step_timeout_s, spec.episode_timeout_s - traj.env_s)
    return spec.host.step(traj.handle, traj.assistant_turns[-1].text, spec.limits), now + max(0.0, left), now


def _wait_all(
    futures: dict[int, cf.Future], trajs: list[_Trajectory], spec: EpisodeSpec, method: str, timeout_s: float
) -> dict[int, dict]:
    """The outcomes of calls made together, within one deadline; those that overran are marked. Each
    episode is charged its own call's time."""
    t0 = time.monotonic()
    answered: dict[int, float] = {}
    for t_id, future in futures.items():
        future.add_done_callback(lambda f, t_id=t_id: answered.setdefault(t_id, time.monotonic()))
    cf.wait(list(futures.values()), timeout=timeout_s)
    out = {}
    for t_id, future in futures.items():
        if future.done():
            out[t_id] = future.result()
            trajs[t_id].env_s += answered.get(t_id, t0) - t0
        else:
            overran(trajs[t_id], spec, spec.host, method, time.monotonic() - t0)
    return out


def _opened(traj: _Trajectory, outcome: dict, renderer: Renderer) -> None:
    """The environment's first messages become the prompt; an environment that failed to open gets the
    problem's own prompt (its first turn is sampled with the others, then the episode ends, marked)."""
    traj.handle.info.update({k: v for k, v in outcome.items() if k != "fault"})
    first = outcome.get("first", traj.problem.prompt)
    if "fault" in outcome:
        record_fault(traj, outcome["fault"])
    traj.handle.built = "class" in outcome and outcome.get("fault", {}).get("method") != "__init__"
    traj.chat = not isinstance(first, str)
    try:
        traj.prompt_ids = renderer.prompt(first, traj.tools)
    except ConfigError as exc:
        raise ConfigError(f"problem {traj.problem.id!r}: {exc}") from None


def _close_all(trajs: list[_Trajectory], spec: EpisodeSpec) -> None:
    closing = {}
    for t_id, traj in enumerate(trajs):
        future = spec.host.close(traj.handle) if traj.handle.built and not traj.handle.abandoned else None
        if future is not None:
            closing[t_id] = future
    for t_id, outcome in _wait_all(closing, trajs, spec, "close", spec.reset_timeout_s).items():
        if "fault" in outcome and "env_error" not in trajs[t_id].info:
            record_fault(trajs[t_id], outcome["fault"])


def _sample(
    engine: TokenSampler, contexts: Sequence[Sequence[int]], params, group_size: int, spec: EpisodeSpec
) -> list[Versioned]:
    """`engine.sample`, each token with the version that sampled it. With partial rollouts, rows the
    engine stopped for new weights are sampled on with them, from where they stopped, until they
    finish; their behaviour log-probs are each token's own (the update corrects every token for the
    policy that sampled it)."""
    if spec.new_weights is not None and spec.new_weights.arrived.is_set():  # arrived before this turn
        spec.new_weights.take()
    out = [
        (s[0], s[1], s[2], [engine.version] * len(s[0]), kept_of(s))
        for s in engine.sample(contexts, params, group_size)
    ]
    while spec.new_weights is not None and any(s[2] == "interrupted" for s in out):
        spec.new_weights.take()
        by_left: dict[int, list[int]] = {}  # rows stopped together have the same budget left
        for k, (ids, _, finish, _, _) in enumerate(out):
            if finish == "interrupted":
                by_left.setdefault(params.max_new_tokens - len(ids), []).append(k)
        for left, rows in sorted(by_left.items()):
            more = engine.sample(
                [[*contexts[k // group_size], *out[k][0]] for k in rows], _turn_params(params, spec, left), 1
            )
            for k, sample in zip(rows, more):
                ids, logps, finish = sample[:3]
                done, done_logps, _, versions, kept = out[k]
                out[k] = (
                    done + ids,
                    done_logps + logps,
                    finish,
                    versions + [engine.version] * len(ids),
                    kept + kept_of(sample),
                )
    return out


def _record_turn(traj: _Trajectory, sample: Versioned, context_start: int, tokenizer) -> None:
    ids, logps, finish, versions, kept = sample
    start = len(traj.tokens)
    traj.tokens += ids
    traj.logprobs += logps
    traj.kept += kept
    traj.mask += [1] * len(ids)
    traj.versions += versions
    text = tokenizer.decode(ids, skip_special_tokens=True)
    traj.turns.append(Turn("assistant", start, len(traj.tokens), text, context_start, sampled=fingerprint(ids)))
    if finish == "length" and traj.finish is None:  # cut at its budget: the environment never sees a truncated turn
        traj.finish = "length"


def _first_turns(engine: TokenSampler, trajs: list[_Trajectory], params, g: int, spec: EpisodeSpec) -> None:
    """Turn one: when every sample of a problem starts from the same prompt (the usual case), the G
    continuations of each prompt come from one context, sampled together."""
    shared = all(trajs[k].prompt_ids == trajs[k - k % g].prompt_ids for k in range(len(trajs)))
    turn = _turn_params(params, spec, spec.max_tokens or None)
    if shared:
        samples = _sample(engine, [trajs[k].prompt_ids for k in range(0, len(trajs), g)], turn, g, spec)
    else:
        samples = _sample(engine, [t.prompt_ids for t in trajs], turn, 1, spec)
    for traj, sample in zip(trajs, samples):
        _record_turn(traj, sample, 0, engine.tokenizer)


def _turn_params(params, spec: EpisodeSpec, remaining: int | None = None):
    if remaining is None or remaining >= params.max_new_tokens:
        return params
    import dataclasses

    return dataclasses.replace(params, max_new_tokens=remaining)


def _next_turns(
    engine: TokenSampler, trajs: list[_Trajectory], params, spec: EpisodeSpec, budget: int, limit: int
) -> None:
    """Sample the next turn of every trajectory in `trajs` together (those with the same token budget
    left in one call; usually all). A trajectory whose context leaves the model no position for a
    token ends with finish reason 'length'."""
    by_budget: dict[int, list[tuple[_Trajectory, list[int], int]]] = {}
    for traj in trajs:
        context, start = traj.context(spec.history)
        remaining = min(params.max_new_tokens, budget - len(traj.tokens), limit - len(context))
        if remaining < 1:
            traj.finish = "length"
            continue
        by_budget.setdefault(remaining, []).append((traj, context, start))
    for remaining, group in sorted(by_budget.items()):
        samples = _sample(engine, [c for _, c, _ in group], _turn_params(params, spec, remaining), 1, spec)
        for (traj, _, start), sample in zip(group, samples):
            _record_turn(traj, sample, start, engine.tokenizer)


def _after_step(traj: _Trajectory, outcome: dict, renderer: Renderer, spec: EpisodeSpec, budget: int) -> bool:
    """Take the environment's answer (checked: rlvr.envs.checks); True when the trajectory goes on
    to another turn."""
    last = traj.assistant_turns[-1]
    if "fault" in outcome:
        record_fault(traj, outcome["fault"])
        return False
    messages, components = outcome["messages"], outcome["components"]
    for name, value in components.items():
        traj.components[name] = traj.components.get(name, 0.0) + value
    last.info["components"] = dict(components)  # the reward this turn earned (per-turn credit)
    info = outcome["info"]
    if "tool_calls" in info:
        last.info["tool_calls"] = info["tool_calls"]
    traj.info.update({k: v for k, v in info.items() if k != "tool_calls"})
    if outcome["done"] or not messages:
        traj.finish = "env_done" if traj.handle.info.get("multi_turn", True) else "stop"
        return False
    if len(traj.assistant_turns) >= spec.max_turns:
        traj.finish = "max_turns"
        return False
    try:
        appended = renderer.continuation(messages, traj.tools, traj.chat)
    except Exception as exc:
        record_fault(
            traj,
            {
                "method": "step",
                "kind": "bad_result",
                "type": "",
                "message": f"its message could not be rendered: {type(exc).__name__}: {exc}"[:2000],
            },
        )
        return False
    if len(traj.tokens) + len(appended) >= budget:
        traj.finish = "length"  # no room left for another turn
        return False
    start = len(traj.tokens)
    traj.tokens += appended
    traj.logprobs += [0.0] * len(appended)
    traj.kept += [0] * len(appended)
    traj.mask += [0] * len(appended)
    traj.versions += traj.versions[-1:] * len(appended)
    text = renderer.tokenizer.decode(appended, skip_special_tokens=False)
    traj.turns.append(
        Turn("env", start, len(traj.tokens), text, info={"components": dict(components), "messages": messages})
    )
    return True


def _completion(traj: _Trajectory, engine: TokenSampler) -> Completion:
    one_turn = all(traj.mask)
    sampled_by = {v for v, m in zip(traj.versions, traj.mask) if m}
    return Completion(
        problem_id=traj.problem.id,
        group_id=traj.group,
        index=traj.index,
        text=traj.assistant_turns[-1].text,
        prompt_ids=traj.prompt_ids,
        token_ids=traj.tokens,
        logprobs=traj.logprobs,
        kept=traj.kept if any(traj.kept) else None,
        finish_reason=traj.finish or "stop",  # type: ignore[arg-type]
        policy_version=min(sampled_by, default=engine.version),
        token_versions=traj.versions if len(sampled_by) > 1 else None,
        loss_mask=None if one_turn else traj.mask,
        turns=traj.turns,
        env_components=traj.components,
        env_info=traj.info,
    )
