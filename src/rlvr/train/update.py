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

from rlvr.algos import LossType, choose, policy_loss, token_logprobs
from rlvr.records import Completion
from rlvr.train.batch import completion_logits, forward_logits, pack

# What a loss type averages over, so micro-batch losses add up to the mini-batch loss.
_LOSS_UNIT: dict[LossType, Callable[[torch.Tensor], torch.Tensor]] = {
    LossType.GRPO: lambda mask: (mask.sum(1) > 0).sum(),  # sequences with tokens
    LossType.TOKEN_MEAN: lambda mask: mask.sum(),  # tokens
    LossType.DR_GRPO: lambda mask: torch.tensor(float(mask.shape[0])),  # sequences
}


@dataclass
class UpdateSettings:
    ppo_epochs: int
    mini_batches: int
    micro_batch_size: int
    max_grad_norm: float
    temperature: float
    loss_type: str
    clip_low: float
    clip_high: float
    dual_clip: float | None
    ratio_level: str
    beta: float
    kl_kind: str
    max_len: int
    entropy_coef: float


def _padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)  # (N, T)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def policy_update(model, optimizer, completions: Sequence[Completion], advantages: torch.Tensor,
                  loss_mask: torch.Tensor, ref_logp: torch.Tensor | None, pad_id: int, s: UpdateSettings,
                  *, generator: torch.Generator, fault: Callable[[torch.Tensor], torch.Tensor] | None = None
                  ) -> dict[str, float]:
    """Apply the updates; returns averaged actor/* stats. loss_mask (N,) is 0 for excluded samples."""
    n = len(completions)
    if n == 0:  # dynamic sampling found no group with signal: nothing to learn from, nothing applied
        return {"actor/skipped_updates": 0.0}
    t = max(1, max(len(c.token_ids) for c in completions))
    old_logp = _padded([c.logprobs for c in completions], t)  # (N, T)
    unit_fn = _LOSS_UNIT[choose(LossType, s.loss_type, "algo.loss_type")]
    lengths = torch.tensor([len(c.prompt_ids) + len(c.token_ids) for c in completions])
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    extremes = {"ratio_min": math.inf, "ratio_max": -math.inf}  # over all micro-batches, not averaged
    skipped = 0
    carries = _carries_gradient(advantages, loss_mask, s, fault)  # (N,) bool
    model.train()
    for _ in range(s.ppo_epochs):
        order = torch.randperm(n, generator=generator)
        for mini in order.chunk(s.mini_batches):
            # micro-batches of similar length: sort the mini-batch by length, then cut
            mini = mini[torch.argsort(lengths[mini], stable=True)]
            micro_size = s.micro_batch_size or len(mini)
            seq_mask_all = _token_mask(completions, mini, t) * loss_mask[mini, None]  # (M, T)
            total_units = unit_fn(seq_mask_all).clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            mini_loss = 0.0
            active = mini[carries[mini]]  # still sorted by length; the normaliser above counts all
            sums["zero_grad_seqs"] += float(len(mini) - len(active))
            counts["zero_grad_seqs"] += 1
            if len(active) == 0:  # no signal at all: the shortest micro-batch still runs, for the
                active = mini[:micro_size]  # statistics; its gradient is exactly zero, as the full one is
            for micro in active.split(micro_size):
                chunk = [completions[i] for i in micro.tolist()]
                batch = pack([c.prompt_ids for c in chunk], [c.token_ids for c in chunk], pad_id)
                width = batch.targets.shape[1]
                logits = forward_logits(model, batch)  # (b, K, V)
                logp, entropy = token_logprobs(completion_logits(logits, batch) / s.temperature, batch.targets)  # (b, W)
                mask = batch.mask * loss_mask[micro, None]  # (b, W)
                loss, stats = policy_loss(
                    logp, old_logp[micro, :width], advantages[micro], mask,
                    loss_type=s.loss_type, clip_low=s.clip_low, clip_high=s.clip_high, dual_clip=s.dual_clip,
                    ratio_level=s.ratio_level, beta=s.beta, kl_kind=s.kl_kind, max_len=s.max_len,
                    ref_logp=None if ref_logp is None else ref_logp[micro, :width],
                    entropy=entropy, entropy_coef=s.entropy_coef)
                if fault is not None:
                    loss = fault(loss)
                weight = unit_fn(mask) / total_units
                (loss * weight).backward()
                for key, value in stats.items():
                    sums[key] += float(value)
                    counts[key] += 1
                if mask.any():  # a micro-batch with no token reports ratio 1, which is no observation
                    extremes["ratio_min"] = min(extremes["ratio_min"], float(stats["ratio_min"]))
                    extremes["ratio_max"] = max(extremes["ratio_max"], float(stats["ratio_max"]))
                mini_loss += float(loss.detach()) * float(weight)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            sums["loss"] += mini_loss
            counts["loss"] += 1
            if not (math.isfinite(float(grad_norm)) and math.isfinite(mini_loss)):
                # A non-finite step is never applied: drop its gradients and count it.
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            optimizer.step()
            sums["grad_norm"] += float(grad_norm)
            counts["grad_norm"] += 1
    out = {f"actor/{k}": sums[k] / max(1, counts[k]) for k in sums}
    out.update({f"actor/{k}": v for k, v in extremes.items() if math.isfinite(v)})
    out["actor/skipped_updates"] = float(skipped)
    return out


def _carries_gradient(advantages: torch.Tensor, loss_mask: torch.Tensor, s: UpdateSettings, fault) -> torch.Tensor:
    """(N,) True for sequences whose loss has a gradient. Masked-out ones never do; with no KL and
    no entropy term the loss of a sequence is -A * (clipped ratio) terms, so A == 0 gives exactly 0."""
    if fault is not None:  # fault injection exercises every micro-batch
        return torch.ones_like(loss_mask, dtype=torch.bool)
    carries = loss_mask > 0  # (N,)
    if s.beta == 0 and s.entropy_coef == 0:
        carries &= advantages != 0
    return carries


def _token_mask(completions: Sequence[Completion], idx: torch.Tensor, t: int) -> torch.Tensor:
    mask = torch.zeros(len(idx), t)  # (M, T)
    for row, i in enumerate(idx.tolist()):
        mask[row, : len(completions[i].token_ids)] = 1.0
    return mask
