"""Per-step rollout statistics (lengths, truncation, zero-variance groups) and reward shaping."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlvr.algos.advantages import zero_variance_groups
from rlvr.envs import episode_returns
from rlvr.envs.faults import FAULT_KINDS
from rlvr.records import Completion


def p90(values: Sequence[float]) -> float:
    return float(torch.quantile(torch.tensor(values, dtype=torch.float64), 0.9)) if values else 0.0


def rollout_metrics(completions: Sequence[Completion], rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """Lengths count the tokens the policy sampled (a trajectory's appended ones aside); multi-turn
    episodes add agent_metrics."""
    lengths = [sum(c.mask) for c in completions]
    zero_std = zero_variance_groups(rewards, group_size).float()  # (M,)
    len_p90 = p90(lengths)
    return {
        "rollout/len_mean": sum(lengths) / len(lengths),
        "rollout/len_max": float(max(lengths)),
        "rollout/len_p90": len_p90,
        "rollout/recommended_max_tokens": float(int(len_p90 * 1.2 + 0.999)),
        "rollout/truncated_frac": sum(c.finish_reason == "length" for c in completions) / len(completions),
        "rollout/zero_std_frac": float(zero_std.mean()),
        "rollout/tokens": float(sum(lengths)),
        **agent_metrics(completions),
        **env_error_metrics(completions),
    }


def env_error_metrics(completions: Sequence[Completion]) -> dict[str, float]:
    """Episodes whose environment failed (rlvr.envs.faults), of all, and by kind; nothing for
    episodes without an environment of their own (single_turn)."""
    kinds = [c.env_info.get("env_error") for c in completions]
    if not any(kinds) and not agent_metrics(completions):
        return {}
    n = len(completions)
    return {
        "rollout/env_error_frac": sum(k is not None for k in kinds) / n,
        **{f"rollout/env_error/{kind}_frac": kinds.count(kind) / n for kind in FAULT_KINDS if kind in kinds},
    }


def agent_metrics(completions: Sequence[Completion]) -> dict[str, float]:
    """Turns, tool use and how episodes ended, per trajectory (nothing for single-turn rollouts):
    `rollout/turns_mean`, `rollout/tool_calls_mean`, `rollout/tool_failure_frac` and
    `rollout/tool_timeout_frac` (of the calls), `rollout/traj_tokens_mean` (sampled + appended),
    `rollout/unoffered_calls_mean` (calls an agent's request did not offer the tool of, rlvr.agents.session),
    `rollout/reply_drift_mean` (an agent's requests that sent a reply back otherwise than the endpoint
    wrote it, the rest unchanged: each starts a segment, rlvr.agents.session), `rollout/finish/<reason>_frac`."""
    if all(c.finish_reason in ("stop", "length") and len(c.turns) <= 1 and not c.env_components for c in completions):
        return {}  # single-turn rollouts
    n = len(completions)
    calls = [call for c in completions for t in c.turns for call in t.info.get("tool_calls", [])]
    out = {
        "rollout/turns_mean": sum(sum(t.role == "assistant" for t in c.turns) for c in completions) / n,
        "rollout/tool_calls_mean": len(calls) / n,
        "rollout/tool_failure_frac": sum(not call["ok"] for call in calls) / max(1, len(calls)),
        "rollout/tool_timeout_frac": sum(bool(call["timeout"]) for call in calls) / max(1, len(calls)),
        "rollout/traj_tokens_mean": sum(len(c.token_ids) for c in completions) / n,
        "rollout/unoffered_calls_mean": sum(
            len(t.info.get("unoffered_calls", ())) for c in completions for t in c.turns
        )
        / n,
        "rollout/reply_drift_mean": sum(bool(t.info.get("drift")) for c in completions for t in c.turns) / n,
    }
    for reason in ("stop", "length", "max_turns", "env_done"):
        out[f"rollout/finish/{reason}_frac"] = sum(c.finish_reason == reason for c in completions) / n
    returns = episode_returns(completions)
    if returns:
        out["rollout/episode_return_mean"] = sum(returns) / len(returns)
    return out


def shaping_metrics(
    completions: Sequence[Completion],
    overlong: torch.Tensor,
    kl_penalty: torch.Tensor,
    loss_mask: torch.Tensor,
    valid: torch.Tensor,
) -> dict[str, float]:
    """What length handling and KL-in-reward did to the batch the update sees.

    overlong (N,) <= 0 added to the reward; kl_penalty (N,) subtracted from it;
    loss_mask (N,) 0 for samples out of the loss; valid (N,) bool.
    """
    truncated = torch.tensor([c.finish_reason == "length" for c in completions], dtype=torch.bool)  # (N,)
    return {
        "reward/overlong_penalty_mean": float(overlong.mean()),
        "reward/overlong_frac": float((overlong < 0).float().mean()),
        "reward/kl_penalty_mean": float(kl_penalty.mean()),
        # valid samples taken out of the loss can only be truncated ones (algo.mask_truncated)
        "rollout/masked_truncated_frac": float((truncated & valid & (loss_mask == 0)).float().mean()),
        "rollout/loss_samples": float((loss_mask != 0).sum()),
    }
