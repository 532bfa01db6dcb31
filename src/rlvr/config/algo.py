"""Section algo: advantages, the loss, the KL term and distillation (rlvr.algos)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.algos.registry import AdvantageEstimator, AdvantageScale, KLEstimator, LossType, RatioLevel, RolloutIS
from rlvr.configlib import require


@dataclass
class DistillConfig:
    """On-policy distillation (rlvr.algos.distill): the student samples, a teacher scores its tokens."""

    teacher: str = ""
    """The teacher: a model directory, a hub id in the local cache, or a packaged model ('smollm2'); it
    must share the policy's tokenizer. '' = off."""
    coef: float = 1.0
    """Weight of each token's reverse-KL advantage, log p_teacher - log p_student of the sampled token."""
    rewards: bool = True
    """Keep the verifier's advantages beside the teacher's (False: distillation alone; rewards are still
    scored and logged)."""

    def __post_init__(self) -> None:
        require(self.coef > 0, "coef", f"must be > 0, got {self.coef}")


@dataclass
class AlgoConfig:
    advantage: AdvantageEstimator = AdvantageEstimator.GRPO
    scale: AdvantageScale = AdvantageScale.GROUP
    """Divide advantages by the group std ('group'), the batch std, or not at all (Dr. GRPO)."""
    eps: float = 1e-6
    loss_type: LossType = LossType.TOKEN_MEAN
    """How token losses are aggregated: 'token_mean' (every token of the batch weighs the same; DAPO,
    verl's default), 'grpo' (mean per sequence, then over sequences), 'dr_grpo' (sum / (N x max length))."""
    clip_low: float = 0.2
    clip_high: float = 0.28
    """Upper clip of the ratio: 0.28 > clip_low is DAPO's clip-higher (keeps exploration alive)."""
    beta: float = 0.0
    """KL coefficient to the reference model; 0 loads no reference model at all."""
    kl_estimator: KLEstimator = KLEstimator.K3
    dual_clip: float | None = None
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens (None = off)."""
    ratio_level: RatioLevel = RatioLevel.TOKEN
    """Importance ratio per token (PPO/GRPO) or per sequence (GSPO)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0 = off; entropy is reported either way)."""
    kl_in_reward: bool = False
    """Fold beta * sum of per-token KL into each completion's reward before advantages (RLOO/PPO-RLHF
    style) instead of adding it to the loss; algo.kl_estimator picks the estimator (k1 is usual here)."""
    filter_zero_std: bool = True
    """Dynamic sampling (DAPO): drop groups whose rewards are all equal and sample more prompts
    until rollout.batch_size groups with signal are collected (at most algo.max_extra_rounds more).
    On by default: every update sees a full batch of groups with signal (the default run holds on
    every seed with it, docs/benchmarks.md); false trains on every group sampled, as GRPO's paper."""
    max_extra_rounds: int = 3
    """Extra sampling rounds per step for algo.filter_zero_std; a batch still short after them
    trains on the groups it has and logs the shortfall."""
    mask_truncated: bool = False
    """Exclude completions cut at rollout.max_new_tokens (finish reason 'length') from the loss."""
    overlong_buffer: int = 0
    """DAPO soft overlong punishment: the penalty ramps up over the last N tokens before
    rollout.max_new_tokens (0 = off)."""
    overlong_penalty: float = 1.0
    """Reward subtracted at (and beyond) rollout.max_new_tokens when algo.overlong_buffer > 0."""
    noise_std: float = 0.0
    """Gaussian noise added to rewards before normalisation to break ties (0 = off); groups
    with no reward variance stay at zero advantage."""
    recompute_logprobs: Literal["auto", "always", "never"] = "auto"
    """Score each batch with the trainer's weights before the update and use those log-probs as the PPO
    anchor, reporting rollout/logprob_diff_mean|p99|max and rollout/engine_kl against the engine's.
    'auto': when the engine holds its own weights (rollout.engine=vllm) or algo.rollout_is is on."""
    rollout_is: RolloutIS = RolloutIS.NONE
    """Truncated importance-sampling correction for the engine/trainer mismatch (rlvr.algos.correction):
    per token, or one weight per sequence."""
    rollout_is_cap: float = 2.0
    """Truncation of the rollout-correction weights."""
    parity_threshold: float = 1e-3
    """The parity check (rlvr.train.parity): when the largest |log-prob gap| between the engine and the
    trainer on the step's on-policy tokens exceeds it, its cause is named (weights, template,
    truncation, precision or kernel: rlvr.algos.parity) in rollout/parity_cause and an alert."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """algo.distill.teacher: a per-token reverse-KL advantage toward a teacher model on the policy's own samples."""

    def __post_init__(self) -> None:
        require(self.max_extra_rounds >= 0, "max_extra_rounds", f"must be >= 0, got {self.max_extra_rounds}")
        require(self.overlong_buffer >= 0, "overlong_buffer", f"must be >= 0 tokens, got {self.overlong_buffer}")
        require(self.overlong_penalty >= 0, "overlong_penalty", f"must be >= 0, got {self.overlong_penalty}")
        require(self.noise_std >= 0, "noise_std", f"must be >= 0, got {self.noise_std}")
        require(self.beta >= 0, "beta", f"must be >= 0, got {self.beta}")
        require(self.rollout_is_cap > 0, "rollout_is_cap", f"must be > 0, got {self.rollout_is_cap}")
        require(self.parity_threshold > 0, "parity_threshold", f"must be > 0, got {self.parity_threshold}")
        require(
            self.rollout_is == "none" or self.recompute_logprobs != "never",
            "rollout_is",
            "the correction needs the trainer's log-probs: algo.recompute_logprobs must not be 'never'",
        )

    def recomputes(self, engine: str) -> bool:
        """Whether the update anchors on the trainer's own log-probs of each batch (algo.recompute_logprobs)
        when `engine` (rollout.engine) samples."""
        return self.recompute_logprobs == "always" or (
            self.recompute_logprobs == "auto" and (engine == "vllm" or self.rollout_is != "none")
        )
