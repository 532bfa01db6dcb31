"""Held-out accuracy: greedy decoding, scored by the task's outcome verifier."""

from __future__ import annotations

from collections.abc import Sequence

from rlvr.records import Problem
from rlvr.rollout import RolloutEngine, SamplingParams


def evaluate(engine: RolloutEngine, problems: Sequence[Problem], reward, *, max_new_tokens: int,
             batch_size: int = 500) -> dict[str, float]:
    """{"accuracy", "n", "format", "len_mean"} over `problems`, decoding greedily with `engine`,
    `batch_size` problems per engine call."""
    params = SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    completions = [c for start in range(0, len(problems), batch_size)
                   for c in engine.generate(problems[start:start + batch_size], params)]
    results = reward.score(list(problems), [c.text for c in completions])
    n = len(problems)
    return {
        "accuracy": sum(r.components.get("correct", 0.0) for r in results) / n,
        "n": n,
        "format": sum(r.components.get("format", 0.0) for r in results) / n,
        "len_mean": sum(len(c.token_ids) for c in completions) / n,
    }
