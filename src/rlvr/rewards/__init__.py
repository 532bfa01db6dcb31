"""Rule-based rewards: answer extraction, math verification, format checks, composition.

    from rlvr.rewards import build_reward, reward_metrics, RewardMonitor
    reward = build_reward(cfg.reward)
    results = reward.score(problems, texts, group_ids=None)   # list[RewardResult], same order
    metrics = reward_metrics(problems, results)               # reward/mean, reward/source/<s>/...
    alerts = monitor.update(step, metrics)                    # "source stuck at 0" messages
    reward.close()                                            # stops verification workers, if any

Everything that scores completions is a `Scorer` (or, one learned component, a `ComponentScorer`):
rlvr.rewards.scorer.

Importing this package is cheap: sympy and math-verify load only in the
verification workers, which start on the first answer that needs them.
"""

from rlvr.rewards.compose import VERIFIERS, Reward, build_reward, env_kwargs, env_outcomes
from rlvr.config.reward import FormatConfig, MathConfig, MonitorConfig, RewardConfig
from rlvr.rewards.monitor import RewardMonitor, reward_metrics
from rlvr.rewards.scorer import ComponentScorer, EnvOutcome, Scorer

__all__ = [
    "VERIFIERS",
    "env_kwargs",
    "env_outcomes",
    "ComponentScorer",
    "EnvOutcome",
    "FormatConfig",
    "MathConfig",
    "MonitorConfig",
    "Reward",
    "RewardConfig",
    "RewardMonitor",
    "Scorer",
    "build_reward",
    "reward_metrics",
]
