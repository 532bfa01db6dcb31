"""One policy update on a rollout batch: mu epochs x mini-batches x micro-batches.

Old (behaviour) log-probs were stored at sampling time, so every epoch
after the first is off-policy and the clipped ratio does its job. A
mini-batch is one optimizer step; micro-batches accumulate gradients so
peak memory follows the micro-batch, and they are cut from sequences
sorted by length so little compute goes to padding. A sequence that
cannot move the weights (loss mask 0; or advantage exactly 0 with no KL
or entropy term) is left out of the forward/backward: the gradient is
identical, the compute goes to sequences that carry signal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rlvr.algos import LossSettings, logprob_mismatch, policy_loss, rollout_is_weights
from rlvr.config import AlgoConfig, RolloutConfig, TrainConfig
from rlvr.records import Completion
from rlvr.algos.truncation import ReplayStats, Truncation
from rlvr.scoring import completion_logprobs, completion_scores, pack_completions
from rlvr.train.parallel import Parallel


@dataclass(frozen=True)
class UpdateSettings:
    ppo_epochs: int
    mini_batches: int
    micro_batch_size: int
    """Sequences per forward/backward; 0 = the whole mini-batch."""
    max_grad_norm: float
    temperature: float
    """The sampling temperature: log-probs are scored under softmax(logits / temperature)."""
    loss: LossSettings
    dtype: str = "float32"
    """Compute precision of the forward passes (model.dtype): 'bfloat16' is mixed precision."""
    micro_batch_tokens: int = 0
    """Token budget per forward/backward, sequences packed (replaces micro_batch_size); 0 = off."""
    truncation: Truncation | None = None
    """Sampling replay (rollout.sampling_replay with a truncation active): tokens with a kept-set
    record are scored over that set, renormalised (rlvr.algos.truncation); None: the whole vocabulary."""


def update_settings(a: AlgoConfig, t: TrainConfig, r: RolloutConfig, dtype: str) -> UpdateSettings:
    """A run's update settings, from sections algo, train and rollout and model.dtype: the one place
    config keys become loss settings."""
    loss = LossSettings(
        loss_type=a.loss_type,
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        dual_clip=a.dual_clip,
        ratio_level=a.ratio_level,
        beta=0.0 if a.kl_in_reward else a.beta,  # with kl_in_reward the KL is in the advantages
        kl_kind=a.kl_estimator,
        max_len=r.max_new_tokens,
        entropy_coef=a.entropy_coef,
    )
    return UpdateSettings(
        ppo_epochs=t.ppo_epochs,
        mini_batches=t.mini_batches,
        micro_batch_size=t.micro_batch_size,
        max_grad_norm=t.max_grad_norm,
        temperature=r.temperature,
        loss=loss,
        dtype=dtype,
        micro_batch_tokens=t.micro_batch_tokens,
        truncation=replay_rule(r),
    )


def replay_rule(r: RolloutConfig) -> Truncation | None:
    """The truncation the trainer replays (rollout.sampling_replay), in the order the engine applies
    it; None when off or when nothing is truncated."""
    rule = Truncation(r.top_k, r.top_p, r.min_p, order="vllm" if r.engine == "vllm" else "hf")
    return rule if r.sampling_replay and rule.active else None


def build_optimizer(train, model) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters, from a `TrainConfig`."""
    return torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay, betas=(0.9, 0.99))


@dataclass
class Anchor:
    """The trainer's own log-probs of a batch (the PPO anchor) and the correction for the engine's."""

    old_logp: torch.Tensor  # (N, T) under the weights that sampled the batch, scored by the trainer
    is_weights: torch.Tensor | None  # (N, T) truncated IS weights trainer/engine; None without algo.rollout_is
    metrics: dict[str, float]


def recompute_anchor(
    model,
    completions: Sequence[Completion],
    loss_mask: torch.Tensor,
    pad_id: int,
    temperature: float,
    *,
    rollout_is: str,
    cap: float,
    dtype: str = "float32",
    truncation: Truncation | None = None,
    replay_stats: ReplayStats | None = None,
) -> Anchor:
    """Score the batch with the trainer's weights before any update (over each token's kept set with
    `truncation`: sampling replay); compare with the engine's behaviour log-probs
    (rollout/logprob_diff_mean|p99|max, rollout/engine_kl)."""
    t = max(1, max(len(c.token_ids) for c in completions))
    behaviour = _padded([c.logprobs for c in completions], t)  # (N, T)
    mask = _token_mask(completions, torch.arange(len(completions)), t) * loss_mask[:, None]  # (N, T)
    was_training = model.training
    model.eval()
    try:
        old = completion_logprobs(
            model, completions, pad_id, temperature, dtype=dtype, truncation=truncation, replay_stats=replay_stats
        )  # (N, T)
    finally:
        model.train(was_training)
    weights, is_stats = rollout_is_weights(old, behaviour, mask, level=rollout_is, cap=cap)
    metrics = {f"rollout/{k}": v for k, v in logprob_mismatch(old, behaviour, mask).items()}
    metrics.update({f"actor/{k}": v for k, v in is_stats.items()})
    return Anchor(old, weights, metrics)


def _padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)  # (N, T)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def policy_update(
    model,
    optimizer,
    completions: Sequence[Completion],
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    ref_logp: torch.Tensor | None,
    pad_id: int,
    s: UpdateSettings,
    *,
    generator: torch.Generator,
    fault: Callable[[torch.Tensor], torch.Tensor] | None = None,
    skip_zero_gradient: bool = True,
    anchor: Anchor | None = None,
    par: Parallel | None = None,
    replay_stats: ReplayStats | None = None,
    probe: torch.Tensor | None = None,
) -> dict[str, float]:
    """Apply the updates; returns averaged actor/* stats. advantages: (N,), or per token (N, T) (on-policy
    distillation). loss_mask (N,) is 0 for excluded samples.

    anchor: the trainer's recomputed log-probs as the ratio's denominator, and rollout-correction
    weights (default: the engine's behaviour log-probs, no correction). fault: a transform of each
    micro-batch loss (fault injection). skip_zero_gradient=False runs the sequences that cannot
    move the weights too (the reference the skip is tested against). par: the trainer group
    (rlvr.train.parallel); every rank passes the same batch and runs its share of each
    mini-batch's sequences, and the summed gradients make the single-process step. replay_stats:
    what sampling replay (s.truncation) found. probe (N, T), NaN: filled with the log-probs of the
    first mini-batch's sequences, scored before its optimizer step (rlvr.train.parity)."""
    par = par or Parallel()
    n = len(completions)
    if n == 0:  # dynamic sampling found no group with signal: nothing to learn from, nothing applied
        return {"actor/skipped_updates": 0.0}
    t = max(1, max(len(c.token_ids) for c in completions))
    device = next(model.parameters()).device  # the loss is computed where the log-probs are (train.device)
    old_logp = (_padded([c.logprobs for c in completions], t) if anchor is None else anchor.old_logp).to(
        device
    )  # (N, T)
    is_weights = None if anchor is None or anchor.is_weights is None else anchor.is_weights.to(device)  # (N, T)
    advantages, loss_mask = advantages.to(device), loss_mask.to(device)  # (N,)
    ref_logp = None if ref_logp is None else ref_logp.to(device)  # (N, T)
    unit_fn = s.loss.aggregation.units
    lengths = torch.tensor([len(c.prompt_ids) + len(c.token_ids) for c in completions])
    sums: dict[str, float] = defaultdict(float)  # per micro-batch statistics of this rank
    counts: dict[str, int] = defaultdict(int)
    steps: dict[str, list[float]] = defaultdict(list)  # per mini-batch, the same on every rank
    extremes = {"ratio_min": math.inf, "ratio_max": -math.inf}  # over all micro-batches, not averaged
    skipped = 0
    carries = (
        _carries_gradient(advantages, loss_mask, s.loss).cpu()
        if skip_zero_gradient
        else torch.ones(n, dtype=torch.bool)
    )  # (N,) on the CPU, as the indices are
    model.train()
    first = True  # the first mini-batch: scored with the weights that sampled the batch
    for _ in range(s.ppo_epochs):
        order = torch.randperm(n, generator=generator)
        for mini in order.chunk(s.mini_batches):
            # micro-batches of similar length: sort the mini-batch by length, then cut
            mini = mini[torch.argsort(lengths[mini], stable=True)]
            micro_size = s.micro_batch_size or math.ceil(len(mini) / par.world)
            seq_mask_all = _token_mask(completions, mini, t).to(device) * loss_mask[mini, None]  # (M, T)
            total_units = unit_fn(seq_mask_all).clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            mini_loss = 0.0
            active = mini[carries[mini]]  # still sorted by length; the normaliser above counts all
            steps["zero_grad_seqs"].append(float(len(mini) - len(active)))
            if len(active) == 0:  # no signal at all: the shortest micro-batch still runs, for the
                active = mini[: micro_size * par.world]  # statistics; its gradient is exactly zero, as the full one is
            for micro, real in _micro_batches(active, lengths, micro_size, s.micro_batch_tokens, par):
                chunk = [completions[i] for i in micro.tolist()]
                batch = pack_completions(chunk, pad_id, packed=s.micro_batch_tokens > 0)
                width = batch.targets.shape[1]
                logp, entropy = completion_scores(
                    model,
                    batch,
                    s.temperature,
                    dtype=s.dtype,
                    truncation=s.truncation,
                    replay_stats=replay_stats if first and real else None,
                )  # (b, W)
                if first and probe is not None and real:
                    probe[micro, :width] = logp.detach().cpu()
                mask = batch.mask * loss_mask[micro, None] * float(real)  # (b, W); a rank's padding step counts nothing
                adv = advantages[micro] if advantages.dim() == 1 else advantages[micro, :width]  # (b,) or (b, W)
                loss, stats = policy_loss(
                    logp,
                    old_logp[micro, :width],
                    adv,
                    mask,
                    s.loss,
                    ref_logp=None if ref_logp is None else ref_logp[micro, :width],
                    entropy=entropy,
                    is_weights=None if is_weights is None else is_weights[micro, :width],
                )
                if fault is not None:
                    loss = fault(loss)
                weight = unit_fn(mask) / total_units
                (loss * weight).backward()
                if not real:
                    continue
                for key, value in stats.items():
                    sums[key] += float(value)
                    counts[key] += 1
                if mask.any():  # a micro-batch with no token reports ratio 1, which is no observation
                    extremes["ratio_min"] = min(extremes["ratio_min"], float(stats["ratio_min"]))
                    extremes["ratio_max"] = max(extremes["ratio_max"], float(stats["ratio_max"]))
                mini_loss += float(loss.detach()) * float(weight)
            first = False
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
            mini_loss = par.sum(mini_loss)
            steps["loss"].append(mini_loss)
            if not (math.isfinite(grad_norm) and math.isfinite(mini_loss)):
                # A non-finite step is never applied: drop its gradients and count it.
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            optimizer.step()
            steps["grad_norm"].append(grad_norm)
    out = {f"actor/{k}": sum(v) / len(v) for k, v in steps.items() if v}
    out.update(_merged_stats(par.gather([(dict(sums), dict(counts), extremes)])))
    out["actor/skipped_updates"] = float(skipped)
    return out


def _micro_batches(active: torch.Tensor, lengths: torch.Tensor, micro_size: int, tokens: int, par: Parallel):
    """(indices, real) of this rank's micro-batches of a mini-batch's sequences `active` (sorted by
    length): rank r takes every world-th sequence from r, so shares are balanced in length, and cuts
    them `micro_size` sequences at a time, or by a budget of `tokens` tokens when it is > 0. Every
    rank runs as many forward/backward passes as the rank with the most (FSDP's collectives pair
    them up); a rank that has run out repeats its first sequence with real=False (weight 0)."""
    shares = [_cut(active[rank :: par.world], lengths, micro_size, tokens) for rank in range(par.world)]
    chunks = shares[par.rank]
    for chunk in chunks:
        yield chunk, True
    for _ in range(max(len(share) for share in shares) - len(chunks)):
        yield active[:1], False


def _cut(mine: torch.Tensor, lengths: torch.Tensor, micro_size: int, tokens: int) -> list[torch.Tensor]:
    """Sequences (sorted by length) as micro-batches of `micro_size`, or of at most `tokens` tokens
    (longest first; a longer sequence alone)."""
    if not len(mine):
        return []
    if tokens <= 0:
        return list(mine.split(micro_size))
    chunks, current, used = [], [], 0
    for i in reversed(mine.tolist()):
        n = int(lengths[i])
        if current and used + n > tokens:
            chunks.append(torch.tensor(current))
            current, used = [], 0
        current.append(i)
        used += n
    return chunks + [torch.tensor(current)]


def _merged_stats(parts) -> dict[str, float]:
    """Micro-batch statistics of every rank: means over all micro-batches, extremes over all."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    extremes = {"ratio_min": math.inf, "ratio_max": -math.inf}
    for rank_sums, rank_counts, rank_extremes in parts:
        for key, value in rank_sums.items():
            sums[key] += value
            counts[key] += rank_counts[key]
        extremes["ratio_min"] = min(extremes["ratio_min"], rank_extremes["ratio_min"])
        extremes["ratio_max"] = max(extremes["ratio_max"], rank_extremes["ratio_max"])
    out = {f"actor/{k}": sums[k] / max(1, counts[k]) for k in sums}
    out.update({f"actor/{k}": v for k, v in extremes.items() if math.isfinite(v)})
    return out


def _carries_gradient(advantages: torch.Tensor, loss_mask: torch.Tensor, loss: LossSettings) -> torch.Tensor:
    """(N,) True for sequences whose loss has a gradient. Masked-out ones never do; with no KL and
    no entropy term the loss of a sequence is -A * (clipped ratio) terms, so A == 0 gives exactly 0."""
    carries = loss_mask > 0  # (N,)
    if loss.beta == 0 and loss.entropy_coef == 0:
        carries &= (advantages != 0).reshape(len(advantages), -1).any(dim=1)  # per sequence or per token
    return carries


def _token_mask(completions: Sequence[Completion], idx: torch.Tensor, t: int) -> torch.Tensor:
    """(M, T) 1 on the tokens each completion's policy sampled (a trajectory's appended ones are 0)."""
    mask = torch.zeros(len(idx), t)  # (M, T)
    for row, i in enumerate(idx.tolist()):
        c = completions[i]
        mask[row, : len(c.token_ids)] = 1.0 if c.loss_mask is None else torch.tensor(c.loss_mask, dtype=torch.float32)
    return mask
