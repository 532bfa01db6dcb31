"""Per-token KL estimators between the policy and the frozen reference.

Tokens are sampled from the policy p; with log_ratio = log q(y) - log p(y)
(q = reference) the three estimators of KL(p || q) (Schulman, "Approximating
KL divergence") are:

    k1 = -log_ratio                       unbiased, high variance, can be < 0
    k2 = 0.5 * log_ratio^2                biased, >= 0
    k3 = exp(log_ratio) - 1 - log_ratio   unbiased, >= 0 (GRPO paper, verl "low_var_kl")

Computed in fp32 with the log-ratio clamped to +-LOG_RATIO_CLAMP before exp:
exp(20) ~ 5e8 is finite in fp32, whereas a raw bf16/fp16 difference of two
log-probs of a rare token can overflow k3 to inf and the run to NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rlvr.algos.registry import KLEstimator, lookup, registered

__all__ = ["KL_ESTIMATORS", "LOG_RATIO_CLAMP", "kl_estimate", "kl_reward_penalty"]

LOG_RATIO_CLAMP = 20.0
"""Bound on |log ratio| before any exp, here and in the policy loss."""


def _k1(log_ratio: Tensor) -> Tensor:
    return -log_ratio  # (B, T)


def _k2(log_ratio: Tensor) -> Tensor:
    return 0.5 * log_ratio.square()  # (B, T)


def _k3(log_ratio: Tensor) -> Tensor:
    return torch.expm1(log_ratio) - log_ratio  # (B, T); expm1 keeps precision for small ratios


KL_ESTIMATORS: dict[KLEstimator, Callable[[Tensor], Tensor]] = registered(
    KLEstimator,
    {
        KLEstimator.K1: _k1,
        KLEstimator.K2: _k2,
        KLEstimator.K3: _k3,
    },
)


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str | KLEstimator = "k3") -> Tensor:
    """Per-token KL(policy || reference) estimate, (B, T) fp32, differentiable in logp."""
    estimator = lookup(KL_ESTIMATORS, KLEstimator, kind, "algo.kl_estimator")
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} must have the same shape")
    log_ratio = (ref_logp.float() - logp.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    return estimator(log_ratio)  # (B, T)


def kl_reward_penalty(
    logp: Tensor, ref_logp: Tensor, mask: Tensor, *, beta: float, kind: str | KLEstimator = "k1"
) -> Tensor:
    """KL folded into the reward: beta * sum of per-token KL over each completion, (B,) fp32.

    Subtract it from the rewards *before* `group_advantages` and call
    `policy_loss` with beta=0. It is a reward, so no gradient flows through it.
    k1 is the usual choice here: its sum over a sequence is the sequence's
    log-ratio, an unbiased estimate of the sequence KL.
    """
    kl = kl_estimate(logp.detach(), ref_logp.detach(), kind)  # (B, T)
    mask = mask.float()  # (B, T)
    kl = torch.where(mask != 0, kl * mask, torch.zeros_like(kl))  # (B, T); padding never leaks in
    return beta * kl.sum(dim=1)  # (B,)
