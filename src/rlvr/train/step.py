"""Collect one training batch: sample prompts -> generate G each -> reward -> shape -> advantages.

Returns a `StepBatch`: completions, their problems and rewards, and the
tensors the update needs (loss mask, advantages, reference log-probs), with
the verifier's reward and the advantage kept as separate fields.

What the algorithm settings (`AlgoConfig`) change here, in order:

1. dynamic sampling (`filter_zero_std`, DAPO): a group whose rewards are all
   equal has zero advantage everywhere and only dilutes the batch; such groups
   are dropped and more prompts sampled, for at most `max_extra_rounds` extra
   rounds. A batch still short then trains on what it has (the shortfall is
   reported, and an empty batch applies no update).
2. length: `overlong_buffer` adds DAPO's soft overlong penalty to the reward;
   `mask_truncated` takes completions cut at the budget out of the loss.
3. KL in the reward (`kl_in_reward`): beta * summed per-token KL of each
   completion (behaviour vs reference log-probs) is subtracted from its reward
   before advantages, so the loss gets beta = 0.
4. advantages: `group_advantages` with the configured estimator, scale, noise; learned
   components (reward models, judges) each get theirs on their own, weighted
   (`decoupled_advantages`), so that their weight means what it says in every group.

Invalid samples (the reward could not be computed) are counted, logged by the
caller, and masked out of the loss; their reward is replaced by their group's
valid mean so they shift no baseline.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from rlvr.algos import (
    decoupled_advantages,
    distill_advantages,
    fill_invalid,
    kl_reward_penalty,
    overlong_penalty,
    reverse_kl,
    zero_variance_groups,
)
from rlvr.config import AlgoConfig
from rlvr.records import Completion, Problem, RewardResult
from rlvr.rewards import Scorer, env_kwargs, reward_metrics
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.controls import Sleeper, Speculative
from rlvr.train.metrics import rollout_metrics, shaping_metrics
from rlvr.train.parallel import Parallel
from rlvr.train.sync import sync_weights
from rlvr.train.trajectories import TrainView, split_by_turn, training_view


@dataclass(frozen=True)
class SamplingCounts:
    """What a step's sampling did besides the kept batch, over every completion it generated."""

    groups: int = 0
    """Groups generated (kept or dropped by dynamic sampling)."""
    invalid: int = 0
    """Completions whose reward could not be computed."""
    errors: tuple[str, ...] = ()
    """Up to five distinct reasons among them."""
    shortfall_groups: int = 0
    """Groups the batch still lacks after the last round."""
    extra_rounds: int = 0


@dataclass
class StepBatch:
    problems: list[Problem]  # (N,) the problem of each completion
    completions: list[Completion]  # (N,) group after group
    results: list[RewardResult]  # (N,)
    rewards: torch.Tensor  # (N,) the verifier's total reward, unshaped
    valid: torch.Tensor  # (N,) bool: False = reward could not be computed
    shaped_rewards: torch.Tensor  # (N,) what the advantages come from: invalid filled, + overlong, - KL
    loss_mask: torch.Tensor  # (N,) float: 0 = out of the loss (invalid, or truncated with mask_truncated)
    advantages: torch.Tensor  # (N,)
    ref_logp: torch.Tensor | None = (
        None  # (S, T) reference log-probs of the update's sequences, None without a reference model
    )
    metrics: dict[str, float] = field(default_factory=dict)
    sampler_position: int | None = None  # the sampler's position once this batch's prompts were drawn
    counts: SamplingCounts = field(default_factory=SamplingCounts)
    view: TrainView | None = None
    """The sequences the update trains on when trajectories split by turn (rlvr.train.trajectories);
    None: one sequence per completion."""
    token_advantages: torch.Tensor | None = None
    """(S, T) per-token advantages of the update's sequences under on-policy distillation
    (algo.distill.teacher, rlvr.algos.distill); None: one advantage per sequence."""

    def update_inputs(self) -> tuple[list[Completion], torch.Tensor, torch.Tensor]:
        """(sequences, advantages (S,) or per token (S, T), loss mask (S,)) for policy_update and the anchor."""
        seqs, adv, mask = (
            (self.completions, self.advantages, self.loss_mask)
            if self.view is None
            else (self.view.sequences, self.view.advantages, self.view.loss_mask)
        )
        return seqs, adv if self.token_advantages is None else self.token_advantages, mask


@dataclass
class _Samples:
    """Whole groups of scored completions, laid out group after group."""

    problems: list[Problem] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    results: list[RewardResult] = field(default_factory=list)

    def extend(self, other: "_Samples", keep: list[int], g: int) -> None:
        """Append the groups of `other` whose indices are in `keep`."""
        for m in keep:
            rows = slice(m * g, (m + 1) * g)
            self.problems += other.problems[rows]
            self.completions += other.completions[rows]
            self.results += other.results[rows]

    @property
    def rewards(self) -> torch.Tensor:
        return torch.tensor([r.total for r in self.results], dtype=torch.float32)  # (N,)

    @property
    def rule_rewards(self) -> torch.Tensor:
        """(N,) the totals without their learned components (RewardResult.rules_total)."""
        return torch.tensor(
            [r.total if r.rules_total is None else r.rules_total for r in self.results], dtype=torch.float32
        )  # (N,)

    @property
    def valid(self) -> torch.Tensor:
        return torch.tensor([r.valid for r in self.results], dtype=torch.bool)  # (N,)


def learned_parts(
    results: list[RewardResult], valid: torch.Tensor, group_size: int, learned: dict[str, float]
) -> dict[str, tuple[float, torch.Tensor]]:
    """{name: (weight, values (N,))} of the learned components in the results' totals, invalid
    values filled as the totals are (`decoupled_advantages`' parts)."""
    return {
        name: (
            w,
            fill_invalid(
                torch.tensor([r.components.get(name, 0.0) if r.valid else 0.0 for r in results], dtype=torch.float32),
                valid,
                group_size,
            ),
        )
        for name, w in learned.items()
        if w
    }


def length_shaping(completions: list[Completion], algo: AlgoConfig, max_new_tokens: int) -> torch.Tensor:
    """(N,) reward added for length: DAPO's soft overlong penalty, or zeros when it is off."""
    lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)  # (N,)
    if algo.overlong_buffer == 0:
        return torch.zeros_like(lengths)
    return overlong_penalty(lengths, max_new_tokens, algo.overlong_buffer, algo.overlong_penalty)  # (N,)


def task_rewards(s: _Samples, algo: AlgoConfig, max_new_tokens: int, g: int) -> torch.Tensor:
    """(N,) reward before any KL term: verifier total + length shaping, invalid samples filled."""
    return fill_invalid(s.rewards + length_shaping(s.completions, algo, max_new_tokens), s.valid, g)  # (N,)


def loss_mask(s: _Samples, algo: AlgoConfig) -> torch.Tensor:
    """(N,) 1.0 for samples the loss sees: valid, and not truncated when algo.mask_truncated."""
    truncated = torch.tensor([c.finish_reason == "length" for c in s.completions], dtype=torch.bool)  # (N,)
    return (s.valid & ~(truncated & algo.mask_truncated)).float()  # (N,)


def behaviour_logprobs(completions: list[Completion]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stored sampling-time log-probs (N, T), right-padded with 0, and their token mask (N, T): 1 on
    the tokens the policy sampled."""
    t = max(1, max(len(c.token_ids) for c in completions))
    logp, mask = torch.zeros(len(completions), t), torch.zeros(len(completions), t)  # (N, T)
    for i, c in enumerate(completions):
        logp[i, : len(c.logprobs)] = torch.tensor(c.logprobs, dtype=torch.float32)
        mask[i, : len(c.token_ids)] = torch.tensor(c.mask, dtype=torch.float32)
    return logp, mask


def next_round_size(need: int, kept: int, seen: int, batch_size: int) -> int:
    """Prompts to sample for `need` more groups, from the keep rate so far; at most one batch."""
    if kept == 0:
        return batch_size
    return min(batch_size, max(need, math.ceil(need * seen / kept)))


def collect_batch(
    engine: RolloutEngine,
    sampler,
    reward,
    params: SamplingParams,
    algo: AlgoConfig,
    *,
    batch_size: int,
    ref=None,
    par: Parallel | None = None,
    credit: str = "trajectory",
    teacher=None,
) -> StepBatch:
    """One step's batch of `batch_size` groups (fewer when dynamic sampling falls short).

    engine: samples the completions (a `RolloutEngine`, holding the current policy's weights);
    reward: scores them (a `Scorer`: rlvr.rewards.Reward, the rules with learned rewards, or a pool);
    ref: a `ReferenceModel` (anything with `.logprobs(completions) -> (N, T)`), or None when
    algo.beta = 0; its log-probs are taken for the kept completions only and returned for the loss.
    teacher: the algo.distill teacher (a `ReferenceModel` of the teacher's weights), or None; its
    log-probs of the update's sequences give the per-token advantages (rlvr.algos.distill).
    par: a trainer group samples and scores each round's prompts split across its ranks, and every
    rank returns the whole batch (rlvr.train.parallel).
    """
    par = par or Parallel()
    g = params.group_size
    times = {"time/rollout_s": 0.0, "time/reward_s": 0.0, "time/ref_s": 0.0}
    generated, batch = _Samples(), _Samples()
    rounds, n_prompts, need = 0, batch_size, batch_size
    while True:
        fresh = _sample_round(engine, sampler, reward, params, n_prompts, times, par)
        generated.extend(fresh, list(range(n_prompts)), g)
        flat = zero_variance_groups(task_rewards(fresh, algo, params.max_new_tokens, g), g)  # (M,)
        signal = [m for m in range(n_prompts) if not (algo.filter_zero_std and flat[m])][:need]
        batch.extend(fresh, signal, g)
        need -= len(signal)
        if need == 0 or not algo.filter_zero_std or rounds == algo.max_extra_rounds:
            break
        rounds += 1
        n_prompts = next_round_size(need, batch_size - need, len(generated.completions) // g, batch_size)

    n_generated, n_kept = len(generated.completions) // g, len(batch.completions) // g
    metrics = {
        **reward_metrics(generated.problems, generated.results),
        **rollout_metrics(generated.completions, task_rewards(generated, algo, params.max_new_tokens, g), g),
        "rollout/extra_rounds": float(rounds),
        "rollout/groups": float(n_generated),
        "rollout/dropped_groups": float(n_generated - n_kept),
        "rollout/shortfall_groups": float(need),
        **getattr(reward, "metrics", dict)(),  # sandbox throughput and timeout rate under training load
    }
    out = (
        _shape(
            batch,
            ref,
            algo,
            params,
            times,
            credit,
            getattr(reward, "weights", {}),
            getattr(reward, "learned_weights", {}),
        )
        if n_kept
        else _empty()
    )
    if par.sharded and algo.noise_std > 0:  # advantage noise comes from each rank's own stream: take rank 0's
        out.advantages = par.broadcast(out.advantages)
    if teacher is not None and n_kept:  # from the advantages every rank shares
        _distill(out, teacher, algo, times)
    out.metrics = {**metrics, **out.metrics, **times}
    out.metrics["perf/rollout_tok_s"] = metrics["rollout/tokens"] / max(times["time/rollout_s"], 1e-9)
    out.sampler_position = sampler.position
    invalid = [r for r in generated.results if not r.valid]
    out.counts = SamplingCounts(
        groups=n_generated,
        invalid=len(invalid),
        errors=tuple(sorted({r.error for r in invalid if r.error})[:5]),
        shortfall_groups=need,
        extra_rounds=rounds,
    )
    return out


def group_signal(
    engine: RolloutEngine, problems: list[Problem], reward, params: SamplingParams, algo: AlgoConfig
) -> tuple[float, float]:
    """Sample each problem G times and score the completions as a step does: the fraction of groups
    whose rewards differ (the groups an update learns from) and the mean reward."""
    g = params.group_size
    samples = _sample_round(
        engine,
        _Fixed(problems),
        reward,
        params,
        len(problems),
        {"time/rollout_s": 0.0, "time/reward_s": 0.0},
        Parallel(),
    )
    flat = zero_variance_groups(task_rewards(samples, algo, params.max_new_tokens, g), g)  # (M,)
    return 1.0 - float(flat.float().mean()), float(samples.rewards.mean())


@dataclass
class _Fixed:
    """A sampler over a given list of problems."""

    problems: list[Problem]
    position: int = 0

    def take(self, n: int) -> list[Problem]:
        out = self.problems[self.position : self.position + n]
        self.position += n
        return out


def _shape(
    batch: _Samples,
    ref,
    algo: AlgoConfig,
    params: SamplingParams,
    times: dict[str, float],
    credit: str = "trajectory",
    weights: dict[str, float] | None = None,
    learned: dict[str, float] | None = None,
) -> StepBatch:
    """Reference log-probs, reward shaping, loss mask and advantages of the kept groups; trajectories
    that train turn by turn get their sequences (rlvr.train.trajectories) and the reference scores those.
    learned: the learned components' weights, by name (their advantages are taken on their own)."""
    g = params.group_size
    t0 = time.time()
    by_turn = any(split_by_turn(c, credit) for c in batch.completions)
    ref_logp = ref.logprobs(batch.completions) if ref is not None and not by_turn else None  # (N, T)
    times["time/ref_s"] = time.time() - t0
    rewards, valid = batch.rewards, batch.valid  # (N,), (N,)
    overlong = length_shaping(batch.completions, algo, params.max_new_tokens)  # (N,)
    task = fill_invalid(rewards + overlong, valid, g)  # (N,)
    kl_penalty = torch.zeros_like(task)  # (N,)
    if algo.kl_in_reward and ref_logp is not None:
        old_logp, token_mask = behaviour_logprobs(batch.completions)  # (N, T)
        kl_penalty = kl_reward_penalty(
            old_logp, ref_logp[:, : old_logp.shape[1]], token_mask, beta=algo.beta, kind=algo.kl_estimator
        )  # (N,)
    shaped = fill_invalid(task - kl_penalty, valid, g)  # (N,)
    parts = learned_parts(batch.results, valid, g, learned or {})
    rest = fill_invalid(batch.rule_rewards + overlong - kl_penalty, valid, g) if parts else shaped  # (N,)
    advantages = decoupled_advantages(
        rest, parts, g, estimator=algo.advantage, scale=algo.scale, eps=algo.eps, noise_std=algo.noise_std
    )  # (N,)
    mask = loss_mask(batch, algo)  # (N,)
    view = training_view(
        batch.completions,
        advantages,
        mask,
        rest,
        credit=credit,
        weights=weights or {},
        group_size=g,
        scale=algo.scale,
        eps=algo.eps,
    )
    if view is not None and ref is not None:
        t0 = time.time()
        ref_logp = ref.logprobs(view.sequences)  # (S, T)
        times["time/ref_s"] += time.time() - t0
    metrics = {
        **shaping_metrics(batch.completions, overlong, kl_penalty, mask, valid),
        # the proof for dynamic sampling: groups with no reward variance among those the update sees
        "actor/zero_std_groups_in_update": float(zero_variance_groups(task, g).sum()),
    }
    if view is not None:
        metrics["actor/sequences"] = float(len(view.sequences))
    return StepBatch(
        batch.problems,
        batch.completions,
        batch.results,
        rewards,
        valid,
        shaped,
        mask,
        advantages,
        ref_logp,
        metrics,
        view=view,
    )


def _distill(batch: StepBatch, teacher, algo: AlgoConfig, times: dict[str, float]) -> None:
    """The teacher's log-probs of the update's sequences, and the per-token advantages from them."""
    t0 = time.time()
    seqs, adv, _ = batch.update_inputs()
    student, tokens = behaviour_logprobs(seqs)  # (S, T)
    teacher_logp = teacher.logprobs(seqs)[:, : student.shape[1]]  # (S, T)
    times["time/teacher_s"] = time.time() - t0
    d = algo.distill
    batch.token_advantages = distill_advantages(adv, student, teacher_logp, tokens, coef=d.coef, rewards=d.rewards)
    batch.metrics["distill/reverse_kl"] = reverse_kl(student, teacher_logp, tokens)


def _empty() -> StepBatch:
    """No group with signal after every round: a batch the update skips."""
    none = torch.zeros(0)
    return StepBatch([], [], [], none, none.bool(), none, none, none, None, {"actor/zero_std_groups_in_update": 0.0})


def _sample_round(
    engine: RolloutEngine,
    sampler,
    reward,
    params: SamplingParams,
    n_prompts: int,
    times: dict[str, float],
    par: Parallel,
) -> _Samples:
    """Generate G completions for each of `n_prompts` new problems and score them (a trainer
    group: each rank its share of the problems, then every rank gets all of them, in order)."""
    g = params.group_size
    t0 = time.time()
    offset = sampler.position  # group ids stay unique across rounds and steps
    start, problems = par.share(sampler.take(n_prompts))  # every rank draws the same problems
    completions = engine.generate(problems, params, group_offset=offset + start) if problems else []
    times["time/rollout_s"] += time.time() - t0
    t1 = time.time()
    per_sample = [problems[i // g] for i in range(len(completions))]
    results = (
        reward.score(
            per_sample,
            [c.text for c in completions],
            group_ids=[c.group_id for c in completions],
            **env_kwargs(completions),
        )
        if completions
        else []
    )
    times["time/reward_s"] += time.time() - t1
    if not par.sharded:
        return _Samples(per_sample, completions, results)
    rows = par.gather(list(zip(per_sample, completions, results)))  # (problem, completion, result), rank order
    return _Samples([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


class BatchSource(Protocol):
    def collect(self, model, sampler, step: int) -> StepBatch:
        """Step `step`'s batch, sampled with `model`'s current weights (policy version step - 1),
        its prompts drawn from `sampler`."""
        ...


@dataclass
class LocalBatches:
    """Batches sampled and scored in the trainer's process (deploy.backend=embedded)."""

    engine: RolloutEngine
    reward: Scorer
    ref: object | None
    params: SamplingParams
    algo: AlgoConfig
    batch_size: int
    sync_every: int = 1
    speculative: object | None = None
    """The run's `SpeculativeConfig` when the engine decodes speculatively: its fallback rule."""
    log: object | None = None
    low_accept_steps: int = 0
    par: Parallel = field(default_factory=Parallel)
    credit: str = "trajectory"
    """env.credit: 'turn' gives each turn of a trajectory its own advantage."""
    sampler: object | None = None
    """The trainer's sampler of the last call (a new one means a rollback or resume restored it)."""
    teacher: object | None = None
    """The algo.distill teacher (rlvr.inference.reference.load_teacher), or None."""

    def collect(self, model, sampler, step: int) -> StepBatch:
        synced = None
        # a resume or rollback restores the trainer with a new sampler: the engine's weights (of any
        # version number) may be the abandoned ones, so they are loaded at once, whatever sync_every says
        restored = self.sampler is not None and sampler is not self.sampler
        self.sampler = sampler
        if restored or (step - 1) % self.sync_every == 0 or self.engine.version < 0:  # shared tensors: nothing to copy
            synced = sync_weights(self.engine, model, step - 1, step, self.par, force=restored)
        batch = collect_batch(
            self.engine,
            sampler,
            self.reward,
            self.params,
            self.algo,
            batch_size=self.batch_size,
            ref=self.ref,
            par=self.par,
            credit=self.credit,
            teacher=self.teacher,
        )
        if synced is not None:
            synced.add_to(batch.metrics)
        if self.speculative is not None:
            self._watch_speculation(batch, step)
        if isinstance(self.engine, Sleeper) and self.engine.sleep_level:  # vLLM on the trainer's GPU: for the update
            t0 = time.time()
            self.engine.sleep()
            batch.metrics["time/engine_sleep_s"] = time.time() - t0
        return batch

    def _watch_speculation(self, batch: StepBatch, step: int) -> None:
        """Acceptance metrics; plain decoding from the next step on once acceptance stays too low."""
        stats = self.engine.speculative_stats if isinstance(self.engine, Speculative) else {}
        if not stats:
            return
        batch.metrics.update(
            {"rollout/spec_accept_rate": stats["accept_rate"], "rollout/spec_accept_len": stats["accept_len"]}
        )
        self.low_accept_steps = self.low_accept_steps + 1 if stats["accept_rate"] < self.speculative.min_accept else 0
        if self.low_accept_steps >= self.speculative.patience:
            self.engine.without_speculation()
            if self.log is not None:
                self.log.event(
                    "speculative_fallback",
                    step=step,
                    accept_rate=stats["accept_rate"],
                    min_accept=self.speculative.min_accept,
                    steps=self.low_accept_steps,
                )
            self.speculative = None


class _GatheredWeights:
    """What a batch source reads of the policy (`state_dict().items()`): the weights all-gathered from
    the shards one tensor at a time while it iterates, so no rank holds more than one full tensor."""

    def __init__(self, par: Parallel, model) -> None:
        self.model = model
        self.it = par.full_weights(model)  # a collective per tensor: every rank must walk it to the end
        self.seconds = 0.0

    def state_dict(self) -> "_GatheredWeights":
        return self

    def named_parameters(self, **kwargs):
        """The policy's parameter names (module structure only: no gather), for rlvr.rollout.sync.tied_names."""
        return self.model.named_parameters(**kwargs)

    def items(self):
        while True:
            t0 = time.time()
            item = next(self.it, None)
            self.seconds += time.time() - t0
            if item is None:
                return
            yield item

    def drain(self) -> None:
        for _ in self.items():
            pass


@dataclass
class RankZeroBatches:
    """A trainer group's batches from a source outside it (the Ray pools): rank 0 collects them,
    publishing the weights as they are gathered from every rank's shards, one tensor at a time
    (the other ranks take part in each gather), and every rank trains on the batch it broadcasts."""

    inner: BatchSource | None
    """Rank 0's source; None on the other ranks."""
    par: Parallel

    def collect(self, model, sampler, step: int) -> StepBatch:
        weights = _GatheredWeights(self.par, model)
        batch = self.inner.collect(weights, sampler, step) if self.par.main else None
        weights.drain()  # every rank gathers every tensor, in order, whether rank 0 published them or not
        batch = self.par.broadcast(batch)
        batch.metrics["time/weight_gather_s"] = weights.seconds
        return batch
