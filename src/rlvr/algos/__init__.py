"""rlvr.algos: the algorithm core as pure tensor functions.

Tensors in, tensors out, explicit scalars (never a config object), fp32
inside whatever the input dtype. Variants are registered by name under the
str Enums of `registry`; a config string selects one:

    ADVANTAGE_ESTIMATORS  grpo | rloo                      group_advantages(estimator=...)
    ADVANTAGE_SCALES      group | batch | none             group_advantages(scale=...)
    LOSS_AGGREGATIONS     grpo | token_mean | dr_grpo      LossSettings(loss_type=...)
    LOG_RATIOS            token | sequence (GSPO)          LossSettings(ratio_level=...)
    KL_ESTIMATORS         k1 | k2 | k3                     kl_estimate(kind=...), LossSettings(kl_kind=...)
    ROLLOUT_IS            none | token | sequence          rollout_is_weights(level=...): engine/trainer mismatch

Recipes (what the names add up to):
    GRPO      estimator=grpo scale=group loss_type=grpo
    Dr. GRPO  scale=none loss_type=dr_grpo max_len=rollout.max_new_tokens
    DAPO      loss_type=token_mean clip_high=0.28 beta=0 + overlong_penalty
              + dropping zero_variance_groups (dynamic sampling)
    GSPO      ratio_level=sequence loss_type=grpo, clip ranges ~3e-4 / 4e-4
    RLOO      estimator=rloo scale=none (as verl)

The presets in configs/ (grpo, dapo, dr_grpo, gspo, rloo) name these; the loop-level
parts (dynamic sampling, overlong shaping, truncation masking, KL folded into the
reward) are applied in rlvr.train.step.collect_batch; rlvr.train.update.update_settings builds the
LossSettings of a run from its config.
"""

from rlvr.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    ADVANTAGE_SCALES,
    advantage_scale,
    decoupled_advantages,
    group_advantages,
    grpo_baseline,
    rloo_baseline,
    zero_variance_groups,
)
from rlvr.algos.distill import distill_advantages, reverse_kl
from rlvr.algos.correction import ROLLOUT_IS, logprob_mismatch, rollout_is_weights
from rlvr.algos.kl import KL_ESTIMATORS, LOG_RATIO_CLAMP, kl_estimate, kl_reward_penalty
from rlvr.algos.logprobs import token_logprobs
from rlvr.algos.losses import LOG_RATIOS, LOSS_AGGREGATIONS, Aggregation, LossSettings, masked_mean, policy_loss
from rlvr.algos.registry import (AdvantageEstimator, AdvantageScale, KLEstimator, LossType, RatioLevel, RolloutIS, choose,
                                 lookup)
from rlvr.algos.shaping import overlong_penalty

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ADVANTAGE_SCALES",
    "KL_ESTIMATORS",
    "LOG_RATIOS",
    "LOG_RATIO_CLAMP",
    "LOSS_AGGREGATIONS",
    "AdvantageEstimator",
    "Aggregation",
    "AdvantageScale",
    "KLEstimator",
    "LossSettings",
    "LossType",
    "ROLLOUT_IS",
    "RatioLevel",
    "RolloutIS",
    "advantage_scale",
    "choose",
    "decoupled_advantages",
    "distill_advantages",
    "group_advantages",
    "grpo_baseline",
    "kl_estimate",
    "kl_reward_penalty",
    "logprob_mismatch",
    "lookup",
    "masked_mean",
    "overlong_penalty",
    "policy_loss",
    "reverse_kl",
    "rloo_baseline",
    "rollout_is_weights",
    "token_logprobs",
    "zero_variance_groups",
]
