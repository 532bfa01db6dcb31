"""Group-relative advantages: one scalar per completion, from its group's rewards.

Rewards arrive as (N,) laid out group after group: completions 0..G-1 belong
to the first prompt, G..2G-1 to the second, and so on (the trainer sorts by
`Completion.group_id` before calling). Everything is computed in fp32.

advantage_i = (r_i - baseline_i) / denominator

- baseline: the estimator, looked up in ADVANTAGE_ESTIMATORS (GRPO: group
  mean; RLOO: mean of the other G-1 rewards).
- denominator: the scale, group std + eps, batch std + eps, or 1.

A group whose rewards are all equal carries no signal: its advantages are
exactly zero whatever the estimator, scale or eps (never 0/0 = NaN, never a
rounding residue like 1e-9 / 1e-6).

Learned components (reward models, judges) are decoupled (`decoupled_advantages`,
after GDPO, arXiv 2601.05242): each gets an advantage of its own, weighted, beside
the advantage of the rest of the reward. Scaled together, a group whose verifier
reward is constant is left with the learned component's small variation alone, and
dividing by its std gives it the full advantage whatever its weight.

Invalid samples (a reward that could not be computed) take their group's valid
mean before any of this (`fill_invalid`): they shift no baseline, and the loss
masks them. Per-turn credit (`turn_advantages`) splits a trajectory's advantage
over its turns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rlvr.algos.registry import AdvantageEstimator, AdvantageScale, choose, lookup, registered

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ADVANTAGE_SCALES",
    "advantage_scale",
    "decoupled_advantages",
    "fill_invalid",
    "group_advantages",
    "grpo_baseline",
    "rloo_baseline",
    "turn_advantages",
    "zero_variance_groups",
]


def grpo_baseline(grouped: Tensor) -> Tensor:
    """Group mean, (M, G) -> (M, 1)."""
    return grouped.mean(dim=1, keepdim=True)  # (M, 1)


def rloo_baseline(grouped: Tensor) -> Tensor:
    """Leave-one-out: for each completion the mean of the other G-1 rewards, (M, G) -> (M, G).

    r_i - baseline_i = G/(G-1) * (r_i - mean): an unbiased baseline, since it
    does not depend on the completion it is subtracted from.
    """
    g = grouped.shape[1]
    if g < 2:
        raise ValueError("the RLOO baseline needs rollout.group_size >= 2 (it averages the *other* completions)")
    return (grouped.sum(dim=1, keepdim=True) - grouped) / (g - 1)  # (M, G)


ADVANTAGE_ESTIMATORS: dict[AdvantageEstimator, Callable[[Tensor], Tensor]] = registered(
    AdvantageEstimator,
    {
        AdvantageEstimator.GRPO: grpo_baseline,
        AdvantageEstimator.RLOO: rloo_baseline,
    },
)


def _std(x: Tensor, dim: int | None = None) -> Tensor:
    # Bessel-corrected like torch.std in TRL and verl; a single value has std 0, not NaN.
    n = x.shape[dim] if dim is not None else x.numel()
    return x.std(dim=dim, keepdim=dim is not None, correction=1 if n > 1 else 0)


def _group_denominator(grouped: Tensor, eps: float) -> Tensor:
    return _std(grouped, dim=1) + eps  # (M, 1)


def _batch_denominator(grouped: Tensor, eps: float) -> Tensor:
    # One std over every reward of the batch: groups keep their relative scale.
    return (_std(grouped) + eps).reshape(1, 1)  # (1, 1)


def _no_denominator(grouped: Tensor, eps: float) -> Tensor:
    # Dr. GRPO: dividing by the group std up-weights near-uniform groups; don't.
    return grouped.new_ones(1, 1)  # (1, 1)


ADVANTAGE_SCALES: dict[AdvantageScale, Callable[[Tensor, float], Tensor]] = registered(
    AdvantageScale,
    {
        AdvantageScale.GROUP: _group_denominator,
        AdvantageScale.BATCH: _batch_denominator,
        AdvantageScale.NONE: _no_denominator,
    },
)


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"{rewards.numel()} rewards do not split into groups of rollout.group_size={group_size}; "
            "pass whole groups, laid out group after group"
        )
    if not torch.isfinite(rewards).all():
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten().tolist()[:10]
        raise ValueError(f"rewards contain NaN or inf at indices {bad}; mark such samples invalid instead")
    return rewards.detach().float().reshape(-1, group_size)  # (M, G), M = N / G


def zero_variance_groups(rewards: Tensor, group_size: int) -> Tensor:
    """(M,) bool: True for groups whose G rewards are all equal (no learning signal).

    For the `rollout/zero_std_frac` metric and for DAPO's dynamic sampling,
    which drops these groups and samples more prompts.
    """
    grouped = _grouped(rewards, group_size)  # (M, G)
    return grouped.amax(dim=1) == grouped.amin(dim=1)  # (M,)


def advantage_scale(rewards: Tensor, group_size: int, scale: str | AdvantageScale, eps: float) -> Tensor:
    """(N,) the denominator group_advantages divides each completion's centred reward by (its group's
    std + eps, the batch's, or 1), from rewards (N,) laid out group after group."""
    grouped = _grouped(rewards, group_size)  # (M, G)
    denominator = ADVANTAGE_SCALES[choose(AdvantageScale, scale, "algo.scale")](grouped, eps)  # (M, 1) or (1, 1)
    return denominator.expand_as(grouped).reshape(-1)  # (N,)


def group_advantages(
    rewards: Tensor,
    group_size: int,
    *,
    estimator: str | AdvantageEstimator = "grpo",
    scale: str | AdvantageScale = "group",
    eps: float = 1e-6,
    noise_std: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Advantages (N,) fp32 from rewards (N,) laid out group after group.

    estimator: "grpo" (baseline = group mean) or "rloo" (leave-one-out mean).
    scale: "group" (divide by group std + eps), "batch" (divide by the std of
        all N rewards + eps) or "none". RLOO is scaled the same way when asked;
        verl's RLOO does no scaling, which is scale="none".
    eps: added to the std, keeps near-uniform groups from exploding.
    noise_std: Gaussian noise added to the rewards before normalisation (0 =
        off) to break ties between equal rewards in groups that do carry signal.
        Zero-variance groups are found on the *raw* rewards, so the noise never
        turns a group with no signal into random advantages.
    generator: torch RNG for the noise, for reproducible runs.
    """
    baseline_fn = lookup(ADVANTAGE_ESTIMATORS, AdvantageEstimator, estimator, "algo.advantage")
    denominator_fn = ADVANTAGE_SCALES[choose(AdvantageScale, scale, "algo.scale")]
    if eps < 0 or noise_std < 0:
        raise ValueError(f"eps ({eps}) and noise_std ({noise_std}) must be >= 0")
    grouped = _grouped(rewards, group_size)  # (M, G)
    flat = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)  # (M, 1)
    if noise_std > 0:
        noise = torch.randn(grouped.shape, generator=generator, device=grouped.device) * noise_std  # (M, G)
        grouped = grouped + noise  # (M, G)
    centred = grouped - baseline_fn(grouped)  # (M, G)
    advantages = centred / denominator_fn(grouped, eps)  # (M, G)
    advantages = torch.where(flat, torch.zeros_like(advantages), advantages)  # (M, G)
    return advantages.reshape(-1)  # (N,)


def decoupled_advantages(rewards: Tensor, parts: dict[str, tuple[float, Tensor]], group_size: int, **kwargs) -> Tensor:
    """Advantages (N,) of a reward made of `rewards` (N,) and weighted parts, each part's taken on its own.

    parts: {name: (weight, values (N,))}, the reward being rewards + the sum of weight * values.
    The advantage is group_advantages(rewards) + the sum of weight * group_advantages(values), each
    with the same estimator, scale and eps (`kwargs`; noise goes to the first only). With scale
    "none" it equals the advantage of the summed reward (both estimators are linear); with "group"
    a part moves the advantage by its weight in standard units of its own, whatever the rest of the
    reward does in the group.
    """
    advantages = group_advantages(rewards, group_size, **kwargs)  # (N,)
    kwargs.pop("noise_std", None), kwargs.pop("generator", None)
    for weight, values in parts.values():
        advantages = advantages + weight * group_advantages(values, group_size, **kwargs)  # (N,)
    return advantages


def fill_invalid(rewards: Tensor, valid: Tensor, group_size: int) -> Tensor:
    """(N,) rewards where each invalid one (valid False) is its group's mean of the valid ones (0 for a
    group with none), so it shifts no baseline; the loss masks it."""
    r = rewards.view(-1, group_size).clone()  # (M, G)
    v = valid.view(-1, group_size)  # (M, G)
    mean = (r * v).sum(1, keepdim=True) / v.sum(1, keepdim=True).clamp(min=1)  # (M, 1)
    return torch.where(v, r, mean.expand_as(r)).view(-1)  # (N,)


def turn_advantages(advantage: float, turn_rewards: list[float], scale: float | None) -> list[float]:
    """Per-turn credit (env.credit=turn): turn k's advantage is A - (r_0 + ... + r_{k-1}) / scale, the
    advantage of the return from turn k on against the same baseline. advantage: the trajectory's
    group-relative A; turn_rewards: each turn's weighted environment reward; scale: A's denominator
    (advantage_scale), or None where turns take no credit of their own (a group with no signal, or
    env.credit=trajectory): every turn keeps A."""
    if scale is None:
        return [advantage] * len(turn_rewards)
    out, before = [], 0.0
    for r in turn_rewards:
        out.append(advantage - before / scale)
        before += r
    return out
