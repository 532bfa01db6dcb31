"""Clipped policy-gradient loss and the ways its per-token terms are aggregated.

policy_loss builds one per-token loss

    pg_t   = max(-A * r_t, -A * clip(r_t, 1 - clip_low, 1 + clip_high))   (PPO clip; clip-higher when clip_high > clip_low)
    pg_t   = min(pg_t, -A * dual_clip)     where A < 0                    (dual clip: bounds the loss of a negative
                                                                           advantage when r_t is far above 1)
    loss_t = pg_t + beta * KL_t - entropy_coef * H_t

and reduces it with the aggregation named by loss_type (LOSS_AGGREGATIONS). Every
setting is one field of a frozen `LossSettings`, validated once when it is made.
The importance ratio r_t comes from LOG_RATIOS: per token (PPO/GRPO), or per
sequence (GSPO). Everything is fp32; the log-ratio is clamped before exp.

Masks may be float: a token's weight is its mask value; positions with mask 0
are excluded with `where`, so NaN or inf in padding can never leak into the
loss, and a batch with no tokens at all gives a loss of exactly 0 that still
backpropagates (zero gradients), instead of 0/0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.algos.kl import LOG_RATIO_CLAMP, kl_estimate
from rlvr.algos.registry import KLEstimator, LossType, RatioLevel, choose, registered

__all__ = ["LOG_RATIOS", "LOSS_AGGREGATIONS", "Aggregation", "LossSettings", "masked_mean", "policy_loss"]


def _masked(values: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask != 0, values * mask, torch.zeros_like(values))  # (B, T)


def _nonzero(x: Tensor) -> Tensor:
    # A denominator that is never 0; where it was 0 the numerator is 0 too.
    return torch.where(x != 0, x, torch.ones_like(x))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mask-weighted mean of a (B, T) tensor over all its tokens; 0 when the mask is empty."""
    return _masked(values.float(), mask.float()).sum() / _nonzero(mask.float().sum())  # ()


# --- aggregations: (values (B, T), mask (B, T), max_len) -> scalar -----------------------


def aggregate_grpo(values: Tensor, mask: Tensor, max_len: int | None) -> Tensor:
    """Mean over each sequence's tokens, then over the sequences that have any token.

    The original GRPO objective; a long sequence's tokens each weigh less, which
    favours long wrong answers (Dr. GRPO's length bias).
    """
    tokens = mask.sum(dim=1)  # (B,)
    seq_mean = _masked(values, mask).sum(dim=1) / _nonzero(tokens)  # (B,)
    return seq_mean.sum() / (tokens != 0).sum().clamp(min=1)  # ()


def aggregate_token_mean(values: Tensor, mask: Tensor, max_len: int | None) -> Tensor:
    """Sum over all tokens of the batch / number of tokens (DAPO, BNPO): every token weighs the same."""
    return masked_mean(values, mask)  # ()


def aggregate_dr_grpo(values: Tensor, mask: Tensor, max_len: int | None) -> Tensor:
    """Sum over all tokens / (B * max_len) (Dr. GRPO): a constant denominator, so no length bias.

    Pass max_len = the generation budget (rollout.max_new_tokens) so the scale
    does not change with the longest completion of the batch; default T.
    """
    b, t = values.shape
    return _masked(values, mask).sum() / max(b * (max_len or t), 1)  # ()


@dataclass(frozen=True)
class Aggregation:
    reduce: Callable[[Tensor, Tensor, int | None], Tensor]
    """(values (B, T), mask (B, T), max_len) -> the scalar loss."""
    units: Callable[[Tensor], Tensor]
    """mask (B, T) -> what `reduce` divides by (sequences, tokens): a micro-batch's loss weighted by
    units(micro) / units(mini-batch) sums to the loss of the whole mini-batch."""


LOSS_AGGREGATIONS: dict[LossType, Aggregation] = registered(
    LossType,
    {
        LossType.GRPO: Aggregation(aggregate_grpo, lambda mask: (mask.sum(1) > 0).sum()),  # sequences with tokens
        LossType.TOKEN_MEAN: Aggregation(aggregate_token_mean, lambda mask: mask.sum()),  # tokens
        LossType.DR_GRPO: Aggregation(aggregate_dr_grpo, lambda mask: torch.tensor(float(mask.shape[0]))),  # sequences
    },
)


# --- importance log-ratios: (logp, old_logp, mask) -> (B, T), before clamping ------------


def token_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return logp - old_logp  # (B, T)


def sequence_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO: every token carries its sequence's mean log-ratio (log of the geometric-mean ratio).

    Written as GSPO-token does, log s_i + logp_t - sg[logp_t]: the value is the
    sequence ratio and the gradient of token t is s_i * grad logp_t, so with
    loss_type="grpo" the gradient is exactly that of the sequence-level objective.
    """
    seq = _masked(logp - old_logp, mask).sum(dim=1, keepdim=True) / _nonzero(mask.sum(dim=1, keepdim=True))  # (B, 1)
    return seq.detach() + logp - logp.detach()  # (B, T)


LOG_RATIOS: dict[RatioLevel, Callable[[Tensor, Tensor, Tensor], Tensor]] = registered(
    RatioLevel,
    {
        RatioLevel.TOKEN: token_log_ratio,
        RatioLevel.SEQUENCE: sequence_log_ratio,
    },
)


def _check(logp: Tensor, **tensors: Tensor | None) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be (B, T), got shape {tuple(logp.shape)}")
    for name, t in tensors.items():
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(logp.shape)} like logp")


@dataclass(frozen=True)
class LossSettings:
    """Everything that shapes the policy loss, as plain scalars and variant names."""

    loss_type: LossType | str = LossType.GRPO
    """How token losses are aggregated (LOSS_AGGREGATIONS)."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    """The ratio is clipped to [1 - clip_low, 1 + clip_high]; clip_high > clip_low is clip-higher."""
    dual_clip: float | None = None
    """c > 1 bounds the loss of negative-advantage tokens at c * |A| (None = off)."""
    ratio_level: RatioLevel | str = RatioLevel.TOKEN
    """One importance ratio per token, or per sequence (GSPO)."""
    beta: float = 0.0
    """KL-to-reference coefficient of the loss term (needs ref_logp when > 0)."""
    kl_kind: KLEstimator | str = KLEstimator.K3
    max_len: int | None = None
    """dr_grpo's constant length (default T): pass the generation budget."""
    entropy_coef: float = 0.0
    """A positive coefficient rewards entropy (needs the per-token entropy)."""

    def __post_init__(self) -> None:
        # names become their Enum members once, so a bad name fails here, naming its setting
        object.__setattr__(self, "loss_type", choose(LossType, self.loss_type, "algo.loss_type"))
        object.__setattr__(self, "ratio_level", choose(RatioLevel, self.ratio_level, "algo.ratio_level"))
        object.__setattr__(self, "kl_kind", choose(KLEstimator, self.kl_kind, "algo.kl_estimator"))
        if not (0.0 <= self.clip_low < 1.0 and self.clip_high >= 0.0):
            raise ValueError(
                f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={self.clip_low}, clip_high={self.clip_high}"
            )
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (typically 3), got {self.dual_clip}")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if self.max_len is not None and self.max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {self.max_len}")

    @property
    def aggregation(self) -> Aggregation:
        return LOSS_AGGREGATIONS[self.loss_type]


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    settings: LossSettings = LossSettings(),
    *,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Scalar loss and detached fp32 stats for one (mini-)batch.

    logp (B, T): current policy log-probs (with grad); old_logp (B, T): behaviour
    log-probs (logp.detach() when on-policy); advantages (B,) or per token (B, T);
    mask (B, T) 1 on completion tokens (float weights allowed). ref_logp (B, T)
    is needed when settings.beta > 0 (KL as a loss term); entropy (B, T) when
    settings.entropy_coef != 0. is_weights (B, T): rollout-correction weights that
    scale each token's policy-gradient term (rlvr.algos.correction), no gradient.

    stats: pg_loss (aggregated like the loss), kl (token mean; 0 without
    ref_logp), clip_frac = clip_frac_low + clip_frac_high (token fractions
    clipped below/above), dual_clip_frac, ratio_min/mean/max over masked tokens
    (1 when there are none), entropy (token mean, when given).
    """
    s = settings
    aggregate = s.aggregation.reduce
    log_ratio_fn = LOG_RATIOS[s.ratio_level]
    clip_low, clip_high, dual_clip, beta, max_len = s.clip_low, s.clip_high, s.dual_clip, s.beta, s.max_len
    _check(logp, old_logp=old_logp, mask=mask, ref_logp=ref_logp, entropy=entropy, is_weights=is_weights)
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (reference log-probs); set algo.beta=0 to train without a reference")
    if s.entropy_coef != 0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs the per-token entropy (see token_logprobs)")

    logp = logp.float()  # (B, T)
    old_logp = old_logp.detach().float()  # (B, T)
    mask = mask.detach().float()  # (B, T)
    adv = advantages.detach().float()  # (B,) or (B, T)
    if adv.dim() == 1:
        adv = adv[:, None]  # (B, 1)
    if adv.shape[0] != logp.shape[0] or adv.shape[1] not in (1, logp.shape[1]):
        raise ValueError(
            f"advantages have shape {tuple(advantages.shape)}, expected ({logp.shape[0]},) or {tuple(logp.shape)}"
        )

    log_ratio = log_ratio_fn(logp, old_logp, mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))  # (B, T)
    if dual_clip is not None:
        pg = torch.where(adv < 0, torch.minimum(pg, -adv * dual_clip), pg)  # (B, T)
    if is_weights is not None:
        pg = pg * is_weights.detach().float()  # (B, T)

    per_token = pg  # (B, T)
    kl = None
    if ref_logp is not None:
        with torch.set_grad_enabled(torch.is_grad_enabled() and beta > 0):
            kl = kl_estimate(logp, ref_logp, s.kl_kind)  # (B, T)
        if beta > 0:
            per_token = per_token + beta * kl  # (B, T)
    if entropy is not None and s.entropy_coef != 0:
        per_token = per_token - s.entropy_coef * entropy.float()  # (B, T)
    loss = aggregate(per_token, mask, max_len)  # ()

    with torch.no_grad():
        live = mask != 0  # (B, T)
        any_token = live.any()
        clipped_low = ((adv < 0) & (ratio < 1.0 - clip_low)).float()  # (B, T)
        clipped_high = ((adv > 0) & (ratio > 1.0 + clip_high)).float()  # (B, T)
        one = ratio.new_ones(())
        stats = {
            "pg_loss": aggregate(pg.detach(), mask, max_len),
            "kl": masked_mean(kl.detach(), mask) if kl is not None else ratio.new_zeros(()),
            "clip_frac": masked_mean(clipped_low + clipped_high, mask),
            "clip_frac_low": masked_mean(clipped_low, mask),
            "clip_frac_high": masked_mean(clipped_high, mask),
            "dual_clip_frac": (
                masked_mean(((adv < 0) & (ratio > dual_clip)).float(), mask)
                if dual_clip is not None
                else ratio.new_zeros(())
            ),
            "ratio_min": torch.where(any_token, torch.where(live, ratio, torch.inf).min(), one),
            "ratio_mean": torch.where(any_token, masked_mean(ratio, mask), one),
            "ratio_max": torch.where(any_token, torch.where(live, ratio, -torch.inf).max(), one),
        }
        if entropy is not None:
            stats["entropy"] = masked_mean(entropy.detach(), mask)
    return loss, {k: v.detach() for k, v in stats.items()}
