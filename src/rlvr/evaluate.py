"""Evaluation: greedy held-out accuracy (training's), and sampled evaluation for `rlvr eval` and
`rlvr compare` (pass@k, maj@k, avg@k per source; rlvr.stats)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from rlvr.algos.truncation import Truncation
from rlvr.envs import episode_returns
from rlvr.records import Problem
from rlvr.rewards.canonical import normalise
from rlvr.rewards.compose import env_kwargs
from rlvr.rewards.scorer import Scorer
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.stats import majority_correct, pass_at_k


ProblemResult = TypedDict("ProblemResult", {"id": str, "source": str, "correct": bool, "return": float}, total=False)
"""One held-out problem's greedy result, for paired tests between runs: id, source, correct, and
"return" where the episodes' environment reports returns."""


class _Evaluation(TypedDict):
    accuracy: float
    n: int
    format: float
    len_mean: float
    problems: list[ProblemResult]


class Evaluation(_Evaluation, total=False):
    """What `evaluate` returns (and summary.json and a checkpoint keep, as JSON): accuracy, format
    and mean length over the problems, each problem's result; with several sources the accuracy
    of each; for agents the tool calls per solved problem and per problem, and the mean return
    (rlvr.envs.episode_returns)."""

    by_source: dict[str, float]
    tool_calls_per_solved: float
    tool_calls_mean: float
    return_mean: float


def evaluate(
    engine: RolloutEngine, problems: Sequence[Problem], reward: Scorer, *, max_new_tokens: int, batch_size: int = 500
) -> Evaluation:
    """The greedy evaluation of `problems` (an `Evaluation`), decoding with `engine`, `batch_size`
    problems per engine call."""
    params = SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    completions = [
        c
        for start in range(0, len(problems), batch_size)
        for c in engine.generate(problems[start : start + batch_size], params)
    ]
    results = reward.score(list(problems), [c.text for c in completions], **env_kwargs(completions))
    n = len(problems)
    passes = _passes(results)  # a code answer counts when all its tests pass
    out: Evaluation = {
        "accuracy": sum(passes) / n,
        "n": n,
        "format": sum(r.components.get("format", 0.0) for r in results) / n,
        "len_mean": sum(len(c.token_ids) for c in completions) / n,
        "problems": [{"id": p.id, "source": p.source, "correct": ok} for p, ok in zip(problems, passes)],
    }
    calls = [sum(len(t.info.get("tool_calls", [])) for t in c.turns) for c in completions]
    if any(calls):  # agents: how much tool use a solved problem took
        solved = [k for k, ok in zip(calls, passes) if ok]
        out["tool_calls_per_solved"] = sum(solved) / len(solved) if solved else 0.0
        out["tool_calls_mean"] = sum(calls) / n
    returns = episode_returns(completions)
    if returns:  # environments: the mean episode return beside the success rate, and each episode's
        out["return_mean"] = sum(returns) / len(returns)
        for row, ret in zip(out["problems"], returns):
            row["return"] = ret
    sources = sorted({p.source for p in problems})
    if len(sources) > 1:
        out["by_source"] = {
            s: sum(ok for p, ok in zip(problems, passes) if p.source == s) / sum(p.source == s for p in problems)
            for s in sources
        }
    return out


def eval_metrics(result: Evaluation) -> dict[str, float]:
    """The metric keys of an `evaluate` result: eval/accuracy, eval/format, eval/source/<source>/accuracy, and
    for agents eval/tool_calls_per_solved, eval/tool_calls_mean, eval/return_mean."""
    out = {"eval/accuracy": result["accuracy"], "eval/format": result["format"]}
    out.update(
        {f"eval/{k}": result[k] for k in ("tool_calls_per_solved", "tool_calls_mean", "return_mean") if k in result}
    )
    out.update({f"eval/source/{s}/accuracy": acc for s, acc in result.get("by_source", {}).items()})
    return out


@dataclass
class Outcome:
    """One problem's results: the greedy sample and `samples` sampled ones (pass = fully correct)."""

    id: str
    source: str
    greedy: bool
    passed: list[bool] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    """The extracted final answer of each sample (math), for majority voting; None: none found."""
    greedy_return: float | None = None
    """The greedy episode's return, where the environment reports one (rlvr.envs.episode_returns)."""
    returns: list[float] = field(default_factory=list)
    """Each sampled episode's return, where the environment reports one."""


def _passes(results) -> list[bool]:
    # a code answer counts when every test passes (components["correct"] is the passed fraction)
    return [r.valid and r.components.get("correct", 0.0) >= 1.0 - 1e-9 for r in results]


def score_problems(
    engine: RolloutEngine,
    problems: Sequence[Problem],
    reward: Scorer,
    *,
    max_new_tokens: int,
    samples: int = 0,
    temperature: float = 1.0,
    truncation: Truncation = Truncation(),
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> list[Outcome]:
    """Greedy decoding of every problem, then `samples` completions each at `temperature` (truncated by
    `truncation`: the run's rollout.top_k/top_p/min_p), scored by `reward`; `batch_size` problems per
    engine call; progress(n) after each chunk."""
    greedy = SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    sampled = SamplingParams(
        group_size=max(samples, 1),
        temperature=temperature,
        top_p=truncation.top_p,
        top_k=truncation.top_k,
        min_p=truncation.min_p,
        max_new_tokens=max_new_tokens,
    )
    out: list[Outcome] = []
    greedy_info: list[tuple[Outcome, dict]] = []  # each episode's outcome and its environment's info
    sampled_info: list[tuple[Outcome, dict]] = []
    for start in range(0, len(problems), batch_size):
        chunk = list(problems[start : start + batch_size])
        greedy_runs = engine.generate(chunk, greedy)
        firsts = _passes(reward.score(chunk, [c.text for c in greedy_runs], **env_kwargs(greedy_runs)))
        outcomes = [Outcome(p.id, p.source, ok) for p, ok in zip(chunk, firsts)]
        greedy_info += zip(outcomes, (c.env_info for c in greedy_runs))
        if samples:
            completions = engine.generate(chunk, sampled)  # group after group; group id = index in chunk
            results = reward.score(
                [chunk[c.group_id] for c in completions], [c.text for c in completions], **env_kwargs(completions)
            )
            for c, r, ok in zip(completions, results, _passes(results)):
                answer = r.info.get("answer")
                outcomes[c.group_id].passed.append(ok)
                outcomes[c.group_id].answers.append(None if answer is None else normalise(str(answer)).strip())
            sampled_info += [(outcomes[c.group_id], c.env_info) for c in completions]
        out.extend(outcomes)
        if progress is not None:
            progress(len(chunk))
    if any("return" in info for _, info in greedy_info + sampled_info):  # as episode_returns counts them:
        for o, info in greedy_info:  # an episode cut before its first step earned 0
            o.greedy_return = float(info.get("return", 0.0))
        for o, info in sampled_info:
            o.returns.append(float(info.get("return", 0.0)))
    return out


def summarize(outcomes: Sequence[Outcome], ks: Sequence[int]) -> dict:
    """Per source and overall: n, greedy accuracy, and with samples pass@k (unbiased), maj@k (math
    answers only) and avg@k (mean correctness of k samples) for every k <= the samples drawn; where
    the environment reports episode returns, the greedy episodes' mean (greedy_return_mean) and the
    sampled ones' (return_mean)."""
    groups: dict[str, list[Outcome]] = {"all": list(outcomes)}
    for o in outcomes:
        groups.setdefault(o.source, []).append(o)
    report = {}
    for name, rows in groups.items():
        entry = {"n": len(rows), "greedy_accuracy": sum(o.greedy for o in rows) / len(rows)}
        n = min((len(o.passed) for o in rows), default=0)
        for k in (k for k in ks if 1 <= k <= n):
            entry[f"pass@{k}"] = sum(pass_at_k(n, sum(o.passed[:n]), k) for o in rows) / len(rows)
            entry[f"avg@{k}"] = sum(sum(o.passed[:k]) / k for o in rows) / len(rows)
            voting = [o for o in rows if any(a is not None for a in o.answers)]
            if voting:
                entry[f"maj@{k}"] = sum(majority_correct(o.answers[:k], o.passed[:k]) for o in rows) / len(rows)
        greedy_returns = [o.greedy_return for o in rows if o.greedy_return is not None]
        if greedy_returns:
            entry["greedy_return_mean"] = sum(greedy_returns) / len(greedy_returns)
        sampled_returns = [r for o in rows for r in o.returns]
        if sampled_returns:
            entry["return_mean"] = sum(sampled_returns) / len(sampled_returns)
        report[name] = entry
    return report
