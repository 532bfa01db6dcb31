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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlvr.configlib import ConfigError
from rlvr.envs import Environment, StepResult, episode_seed
from rlvr.records import Completion, Message, Problem, Turn

Sample = tuple[list[int], list[float], str]
"""(token ids, behaviour log-probs, finish reason 'stop' | 'length') of one sampled continuation."""


class TokenSampler(Protocol):
    tokenizer: Any
    version: int

    def sample(self, contexts: Sequence[Sequence[int]], params, group_size: int) -> list[Sample]:
        """`group_size` continuations of each context, context after context."""
        ...


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
    step_timeout_s: float = 600.0
    """An environment step (tools included) that has not answered in this time ends its episode, marked."""


def _single_turn(problem: Problem) -> Environment:
    from rlvr.envs import SingleTurn

    return SingleTurn()


SINGLE_TURN = EpisodeSpec(make_env=_single_turn)
"""The default: one assistant turn per trajectory."""


def episode_spec(cfg, tool_host=None) -> EpisodeSpec:
    """A run's episodes, from its `Config` (sections env, and reward.code for the python tool).
    tool_host(call, timeout_s) -> ToolResult: where the tool calls run (rlvr.tools.hosted); None: here."""
    from rlvr.envs import env_class

    e = cfg.env
    cls = env_class(e.name)
    if e.name == "single_turn":
        return SINGLE_TURN
    tools = {}
    if e.tools:
        from rlvr.tools import resolve_tools
        tools = resolve_tools(e.tools, cfg.reward.code)
        if tool_host is not None:
            from rlvr.tools import hosted
            tools = hosted(tools, tool_host)
    settings = dict(e.settings)

    max_turns = e.max_turns or cls.max_turns

    def make_env(problem: Problem) -> Environment:
        return cls(settings, tools=tools, tool_format=e.tool_format, tool_timeout_s=e.tool_timeout_s,
                   max_turns=max_turns)

    return EpisodeSpec(make_env, max_turns=max_turns, max_tokens=e.max_tokens,
                       history=e.history, step_wait_s=e.step_wait_s)


# --- rendering ---------------------------------------------------------------------------------

class Renderer:
    """Token ids of prompts and of what environments say, for one tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
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
            raise ConfigError("the prompt is chat messages but the model's tokenizer has no chat template; use a "
                              "chat model, or data.chat=false to feed text prompts as they are")
        messages = list(first) if not tools or self.supports_tools else with_tools_described(list(first), tools)
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
        if full[:len(base)] != base:
            raise ValueError("the chat template renders an earlier turn differently once more messages follow; "
                             "trajectories cannot be token-exact with it")
        return self.after_eos(base) + full[len(base):]

    def after_eos(self, base: list[int]) -> list[int]:
        """What the template puts after an assistant turn's end-of-sequence token (ChatML: a newline)."""
        eos = self.tokenizer.eos_token_id
        if eos not in base:
            raise ValueError(f"the chat template does not close an assistant turn with the eos token "
                             f"{self.tokenizer.eos_token!r}, where sampling stops; trajectories cannot be token-exact")
        return base[len(base) - base[::-1].index(eos):]


def _text_of(message: Message) -> str:
    content = str(message.get("content", ""))
    return f"<tool_response>{content}</tool_response>" if message.get("role") == "tool" else content


def schemas(tools: list) -> list[dict]:
    """OpenAI-style tool descriptions, of rlvr.tools.Tool objects or of descriptions already."""
    return [t if isinstance(t, dict) else t.schema() for t in tools]


def with_tools_described(messages: list[Message], tools: list) -> list[Message]:
    """For a template that cannot take `tools`: the tools described in the system message."""
    messages = list(messages)
    if messages and messages[0].get("role") == "system":
        messages[0] = {**messages[0], "content": describe_tools(tools) + str(messages[0]["content"])}
    else:
        messages.insert(0, {"role": "system", "content": describe_tools(tools).rstrip()})
    return messages


def describe_tools(tools: list) -> str:
    """The tools in the Hermes system prompt's words, for templates that cannot take `tools`."""
    import json

    lines = "\n".join(json.dumps(s) for s in schemas(tools))
    return ("You may call tools. For each call write <tool_call>{\"name\": <name>, \"arguments\": <arguments as "
            f"JSON>}}</tool_call>; the result comes back in <tool_response></tool_response>.\n<tools>\n{lines}\n</tools>\n")


# --- the episodes --------------------------------------------------------------------------------

@dataclass
class _Trajectory:
    problem: Problem
    group: int
    index: int
    env: Environment
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    finish: str | None = None
    chat: bool = False
    """The prompt went through the chat template: so do the environment's messages."""

    @property
    def assistant_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.role == "assistant"]

    def context(self, history: int) -> tuple[list[int], int]:
        """(the tokens the policy sees for its next turn, where they start in `tokens`)."""
        start = 0
        if history:
            mine = self.assistant_turns
            if len(mine) >= history:
                start = mine[len(mine) - history].start
        return self.prompt_ids + self.tokens[start:], start


def run_episodes(sampler: TokenSampler, problems: Sequence[Problem], params, spec: EpisodeSpec, *,
                 group_offset: int = 0) -> list[Completion]:
    """G trajectories per problem (1 when greedy), group after group: problem i's get group id
    group_offset + i. Every environment is closed at the end, however the episodes ended."""
    g = 1 if params.greedy else params.group_size
    renderer = Renderer(sampler.tokenizer)
    trajs: list[_Trajectory] = []
    budget = spec.max_tokens or 1 << 62
    limit = getattr(sampler, "max_context", None) or 1 << 62  # prompt + trajectory, the model's positions
    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(32, len(problems) * g)), thread_name_prefix="rlvr-env")
    try:
        for i, problem in enumerate(problems):
            for j in range(g):
                env = spec.make_env(problem)
                trajs.append(_Trajectory(problem, group_offset + i, j, env, []))
                first = env.reset(problem, episode_seed(problem))
                trajs[-1].chat = not isinstance(first, str)
                try:
                    trajs[-1].prompt_ids = renderer.prompt(first, env.tools or None)
                except ConfigError as exc:
                    raise ConfigError(f"problem {problem.id!r}: {exc}") from None
        _first_turns(sampler, trajs, params, g, spec)
        for traj in trajs:  # a single-turn environment's step is immediate: no thread
            if traj.finish is None and not traj.env.multi_turn:
                _after_step(traj, _step(traj.env, traj.assistant_turns[-1].text), renderer, spec, budget)
        pending = {t_id: pool.submit(_step, t.env, t.assistant_turns[-1].text)
                   for t_id, t in enumerate(trajs) if t.finish is None}
        while pending:
            done, _ = cf.wait(list(pending.values()), timeout=spec.step_wait_s)
            if not done:
                done, _ = cf.wait(list(pending.values()), timeout=spec.step_timeout_s, return_when=cf.FIRST_COMPLETED)
            if not done:  # no environment answered in step_timeout_s: those episodes end, marked
                for t_id in pending:
                    trajs[t_id].info["error"] = f"the environment did not answer within {spec.step_timeout_s:g} s"
                    trajs[t_id].finish = "env_done"
                break
            ready = []
            for t_id in sorted(t for t, f in pending.items() if f in done):  # trajectory order: deterministic
                traj = trajs[t_id]
                if _after_step(traj, pending.pop(t_id).result(), renderer, spec, budget):
                    ready.append(t_id)
            if ready:
                _next_turns(sampler, [trajs[t] for t in ready], params, spec, budget, limit)
                for t_id in ready:
                    if trajs[t_id].finish is None:
                        pending[t_id] = pool.submit(_step, trajs[t_id].env, trajs[t_id].assistant_turns[-1].text)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for traj in trajs:
            traj.env.close()
    return [_completion(t, sampler) for t in trajs]


def _step(env: Environment, text: str) -> StepResult | BaseException:
    try:
        return env.step(text)
    except Exception as exc:  # an environment's failure ends its episode, marked; never the step
        return exc


def _record_turn(traj: _Trajectory, sample: Sample, context_start: int, tokenizer) -> None:
    ids, logps, finish = sample
    start = len(traj.tokens)
    traj.tokens += ids
    traj.logprobs += logps
    traj.mask += [1] * len(ids)
    traj.turns.append(Turn("assistant", start, len(traj.tokens), tokenizer.decode(ids, skip_special_tokens=True),
                           context_start))
    if finish == "length":  # cut at its budget: the environment never sees a truncated turn
        traj.finish = "length"


def _first_turns(sampler: TokenSampler, trajs: list[_Trajectory], params, g: int, spec: EpisodeSpec) -> None:
    """Turn one: when every sample of a problem starts from the same prompt (the usual case), the G
    continuations of each prompt come from one context, sampled together."""
    shared = all(trajs[k].prompt_ids == trajs[k - k % g].prompt_ids for k in range(len(trajs)))
    turn = _turn_params(params, spec, spec.max_tokens or None)
    if shared:
        samples = sampler.sample([trajs[k].prompt_ids for k in range(0, len(trajs), g)], turn, g)
    else:
        samples = sampler.sample([t.prompt_ids for t in trajs], turn, 1)
    for traj, sample in zip(trajs, samples):
        _record_turn(traj, sample, 0, sampler.tokenizer)


def _turn_params(params, spec: EpisodeSpec, remaining: int | None = None):
    if remaining is None or remaining >= params.max_new_tokens:
        return params
    import dataclasses
    return dataclasses.replace(params, max_new_tokens=remaining)


def _next_turns(sampler: TokenSampler, trajs: list[_Trajectory], params, spec: EpisodeSpec, budget: int,
                limit: int) -> None:
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
        samples = sampler.sample([c for _, c, _ in group], _turn_params(params, spec, remaining), 1)
        for (traj, _, start), sample in zip(group, samples):
            _record_turn(traj, sample, start, sampler.tokenizer)


def _after_step(traj: _Trajectory, result: StepResult | BaseException, renderer: Renderer, spec: EpisodeSpec,
                budget: int) -> bool:
    """Take the environment's answer; True when the trajectory goes on to another turn."""
    last = traj.assistant_turns[-1]
    if isinstance(result, BaseException):
        traj.info["error"] = f"environment {type(traj.env).__name__} failed: {type(result).__name__}: {result}"
        traj.finish = "env_done"
        return False
    for name, value in result.components.items():
        traj.components[name] = traj.components.get(name, 0.0) + float(value)
    last.info["components"] = dict(result.components)  # the reward this turn earned (per-turn credit)
    if "tool_calls" in result.info:
        last.info["tool_calls"] = result.info["tool_calls"]
    traj.info.update({k: v for k, v in result.info.items() if k != "tool_calls"})
    if result.done or not result.messages:
        traj.finish = "env_done" if traj.env.multi_turn else "stop"
        return False
    if len(traj.assistant_turns) >= spec.max_turns:
        traj.finish = "max_turns"
        return False
    try:
        appended = renderer.continuation(result.messages, traj.env.tools or None, traj.chat)
    except Exception as exc:
        traj.info["error"] = f"rendering the environment's message failed: {exc}"
        traj.finish = "env_done"
        return False
    if len(traj.tokens) + len(appended) >= budget:
        traj.finish = "length"  # no room left for another turn
        return False
    start = len(traj.tokens)
    traj.tokens += appended
    traj.logprobs += [0.0] * len(appended)
    traj.mask += [0] * len(appended)
    text = renderer.tokenizer.decode(appended, skip_special_tokens=False)
    traj.turns.append(Turn("env", start, len(traj.tokens), text,
                           info={"components": dict(result.components),
                                 "messages": [dict(m) for m in result.messages]}))
    return True


def _completion(traj: _Trajectory, sampler: TokenSampler) -> Completion:
    one_turn = all(traj.mask)
    return Completion(problem_id=traj.problem.id, group_id=traj.group, index=traj.index,
                      text=traj.assistant_turns[-1].text, prompt_ids=traj.prompt_ids, token_ids=traj.tokens,
                      logprobs=traj.logprobs, finish_reason=traj.finish or "stop",  # type: ignore[arg-type]
                      policy_version=sampler.version, loss_mask=None if one_turn else traj.mask, turns=traj.turns,
                      env_components=traj.components, env_info=traj.info)
