"""Collect one training batch: sample prompts -> generate G each -> reward -> advantages.

Returns a `StepBatch`: completions, their problems and rewards, and the
tensors the update needs (rewards, valid mask, advantages), kept as
separate fields. Invalid samples (the reward could not be computed) are
counted, logged by the caller, and masked out of the loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from rlvr.algos import group_advantages
from rlvr.config import AlgoConfig
from rlvr.records import Completion, Problem, RewardResult
from rlvr.rewards import reward_metrics
from rlvr.rollout.hf import SamplingParams, generate
from rlvr.train.metrics import rollout_metrics


@dataclass
class StepBatch:
    problems: list[Problem]  # (N,) the problem of each completion
    completions: list[Completion]  # (N,) group after group
    results: list[RewardResult]  # (N,)
    rewards: torch.Tensor  # (N,) total reward
    valid: torch.Tensor  # (N,) bool: False = reward could not be computed, excluded from the loss
    advantages: torch.Tensor  # (N,)
    metrics: dict[str, float] = field(default_factory=dict)


def fill_invalid(rewards: torch.Tensor, valid: torch.Tensor, group_size: int) -> torch.Tensor:
    """Invalid rewards take their group's valid mean, so they shift no baseline; the loss masks them."""
    r = rewards.view(-1, group_size).clone()  # (M, G)
    v = valid.view(-1, group_size)  # (M, G)
    mean = (r * v).sum(1, keepdim=True) / v.sum(1, keepdim=True).clamp(min=1)  # (M, 1)
    return torch.where(v, r, mean.expand_as(r)).view(-1)  # (N,)


def collect_batch(model, tokenizer, sampler, reward, params: SamplingParams, algo: AlgoConfig, *,
                  batch_size: int, step: int) -> StepBatch:
    g = params.group_size
    t0 = time.time()
    problems = sampler.take(batch_size)
    completions = generate(model, tokenizer, problems, params, group_offset=(step - 1) * batch_size,
                           policy_version=step - 1)
    t_rollout = time.time() - t0

    t1 = time.time()
    per_sample = [problems[i // g] for i in range(len(completions))]
    results = reward.score(per_sample, [c.text for c in completions], group_ids=[c.group_id for c in completions])
    rewards = torch.tensor([r.total for r in results], dtype=torch.float32)  # (N,)
    valid = torch.tensor([r.valid for r in results], dtype=torch.bool)  # (N,)
    t_reward = time.time() - t1

    advantages = group_advantages(fill_invalid(rewards, valid, g), g, estimator=algo.advantage, scale=algo.scale,
                                  eps=algo.eps)  # (N,)
    metrics = {**reward_metrics(per_sample, results), **rollout_metrics(completions, rewards, g),
               "time/rollout_s": t_rollout, "time/reward_s": t_reward}
    metrics["perf/rollout_tok_s"] = metrics["rollout/tokens"] / max(t_rollout, 1e-9)
    return StepBatch(per_sample, completions, results, rewards, valid, advantages, metrics)
