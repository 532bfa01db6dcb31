"""What scores completions, as protocols: every scorer of a run is one of these two.

Scorer            problems, texts (+ group ids, episode outcomes) -> a RewardResult each: the
                  rules (rlvr.rewards.Reward), the rules with learned components
                  (rlvr.inference.reward_models.LearnedReward), the Ray reward pool
                  (rlvr.deploy.ray.source)
ComponentScorer   problems, texts -> one learned component's score each, or the error that kept
                  it from one: a reward model, an LLM judge, either on the Ray inference pool
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rlvr.records import Problem, RewardResult

EnvOutcome = tuple[dict[str, float], dict[str, Any]]
"""An episode's outcome as the reward reads it: (the environment's reward components, its info)."""


class Scorer(Protocol):
    def score(
        self,
        problems: Sequence[Problem],
        texts: Sequence[str],
        group_ids: Sequence[Any] | None = None,
        env: Sequence[EnvOutcome] | None = None,
    ) -> list[RewardResult]:
        """One result per text, in order; a sample that could not be scored is invalid, never an exception.
        group_ids: each text's group (for standardisation within groups); env: each text's episode outcome,
        passed only where an environment reported one (a scorer for single-turn runs may take no env=)."""
        ...


class ComponentScorer(Protocol):
    def score(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[float | Exception]:
        """One score per text, in order, or the exception that kept that text from a score."""
        ...
