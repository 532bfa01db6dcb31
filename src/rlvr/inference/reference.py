"""Frozen reference model: per-token log-probs of completions for the KL term."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlvr.algos import token_logprobs
from rlvr.records import Completion
from rlvr.train.batch import completion_logits, forward_logits, pack


def completion_logprobs(model, completions: Sequence[Completion], pad_id: int, temperature: float,
                        *, micro_batch: int = 64, with_entropy: bool = False):
    """logp (N, T) fp32 of each completion's tokens under `model`, right-padded with 0."""
    t = max(1, max(len(c.token_ids) for c in completions))
    out = torch.zeros(len(completions), t)  # (N, T)
    ent = torch.zeros(len(completions), t) if with_entropy else None  # (N, T)
    for start in range(0, len(completions), micro_batch):
        chunk = completions[start:start + micro_batch]
        batch = pack([c.prompt_ids for c in chunk], [c.token_ids for c in chunk], pad_id)
        logits = forward_logits(model, batch)  # (b, K, V)
        logp, entropy = token_logprobs(completion_logits(logits, batch) / temperature, batch.targets)  # (b, T')
        width = logp.shape[1]
        out[start:start + len(chunk), :width] = logp * batch.mask
        if ent is not None:
            ent[start:start + len(chunk), :width] = entropy * batch.mask
    return (out, ent) if with_entropy else out


class ReferenceModel:
    """A frozen copy of the starting policy. Never built when beta = 0."""

    def __init__(self, model, pad_id: int, temperature: float):
        self.model = model.eval().requires_grad_(False)
        self.pad_id = pad_id
        self.temperature = temperature

    @torch.no_grad()
    def logprobs(self, completions: Sequence[Completion]) -> torch.Tensor:
        return completion_logprobs(self.model, completions, self.pad_id, self.temperature)
