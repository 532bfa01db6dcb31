"""Rollout correction: the engine that sampled is not exactly the trainer that scores.

vLLM (other kernels, other precision) and the trainer give the same tokens
slightly different log-probs. With the trainer's recomputed log-probs
`old_logp` as the PPO anchor, the samples are still drawn from the engine's
distribution `behaviour_logp`; truncated importance sampling (TIS; verl's
rollout correction, TRL's vLLM IS correction) reweights each token's loss by

    token:     w_t = min(exp(old_t - behaviour_t), cap)
    sequence:  w_t = min(exp(sum_t' (old_t' - behaviour_t')), cap)   for every token of the sequence

detached, so it scales the gradient without being differentiated.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from rlvr.algos.kl import LOG_RATIO_CLAMP
from rlvr.algos.registry import RolloutIS, lookup, registered

__all__ = ["ROLLOUT_IS", "logprob_mismatch", "rollout_is_weights"]


def _token_weights(log_ratio: Tensor, mask: Tensor) -> Tensor:
    return log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()  # (B, T)


def _sequence_weights(log_ratio: Tensor, mask: Tensor) -> Tensor:
    seq = (log_ratio * mask).sum(dim=1, keepdim=True).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, 1)
    return seq.exp().expand_as(log_ratio)  # (B, T)


ROLLOUT_IS: dict[RolloutIS, Callable[[Tensor, Tensor], Tensor] | None] = registered(
    RolloutIS,
    {
        RolloutIS.NONE: None,
        RolloutIS.TOKEN: _token_weights,
        RolloutIS.SEQUENCE: _sequence_weights,
    },
)


def rollout_is_weights(
    old_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, *, level: str | RolloutIS, cap: float
) -> tuple[Tensor | None, dict[str, float]]:
    """Truncated IS weights (B, T) fp32, 1 on padding (None for level 'none'), and their stats:
    is_weight_mean (before truncation, over tokens), is_truncated_frac (tokens whose weight hit cap)."""
    fn = lookup(ROLLOUT_IS, RolloutIS, level, "algo.rollout_is")
    if fn is None:
        return None, {}
    if cap <= 0:
        raise ValueError(f"algo.rollout_is_cap must be > 0, got {cap}")
    mask = mask.float()
    live = mask != 0  # (B, T)
    log_ratio = torch.where(live, old_logp.float() - behaviour_logp.float(), torch.zeros_like(mask))  # (B, T)
    raw = fn(log_ratio, mask)  # (B, T)
    weights = torch.where(live, raw.clamp(max=cap), torch.ones_like(raw))  # (B, T)
    n = mask.sum().clamp(min=1)
    stats = {
        "is_weight_mean": float((raw * mask).sum() / n),
        "is_truncated_frac": float(((raw > cap) & live).float().sum() / n),
    }
    return weights, stats


def logprob_mismatch(old_logp: Tensor, behaviour_logp: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's on the sampled tokens: mean, 99th
    percentile and max |difference| and KL(engine || trainer) (k3 on the engine's samples), over
    masked tokens."""
    mask = mask.float()
    live = mask != 0
    if not bool(live.any()):
        return {"logprob_diff_mean": 0.0, "logprob_diff_p99": 0.0, "logprob_diff_max": 0.0, "engine_kl": 0.0}
    diff = (old_logp.float() - behaviour_logp.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    k3 = torch.expm1(diff) - diff  # (B, T): log q/p with q the trainer, p the engine that sampled
    gaps = diff.abs()[live]  # (n,)
    n = mask.sum()
    return {
        "logprob_diff_mean": float((diff.abs() * mask).sum() / n),
        "logprob_diff_p99": float(gaps.kthvalue(max(1, math.ceil(0.99 * len(gaps)))).values),
        "logprob_diff_max": float(gaps.max()),
        "engine_kl": float((k3 * mask).sum() / n),
    }
