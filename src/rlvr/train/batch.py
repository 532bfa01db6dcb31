"""Pack prompt+completion token lists into right-padded training tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # (B, L) prompt + completion, right-padded
    attention_mask: torch.Tensor  # (B, L)
    targets: torch.Tensor  # (B, T) completion tokens, T = longest completion
    mask: torch.Tensor  # (B, T) 1.0 on real completion tokens
    starts: torch.Tensor  # (B,) index in input_ids of the logit that predicts the first completion token


def pack(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int) -> TokenBatch:
    b = len(prompts)
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    t = max(1, max(len(c) for c in completions))
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((b, width), dtype=torch.long)
    targets = torch.full((b, t), pad_id, dtype=torch.long)
    mask = torch.zeros((b, t), dtype=torch.float32)
    starts = torch.zeros(b, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        seq = list(p) + list(c)
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        if c:
            targets[i, : len(c)] = torch.tensor(list(c))
            mask[i, : len(c)] = 1.0
        starts[i] = len(p) - 1
    return TokenBatch(input_ids, attention_mask, targets, mask, starts)


def forward_logits(model, batch: TokenBatch) -> torch.Tensor:
    """Logits of the positions from the first completion-predicting one on, (B, K, V): the other
    prompt positions never go through the LM head, and no KV cache is built."""
    keep = batch.input_ids.shape[1] - int(batch.starts.min())
    try:
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False,
                     logits_to_keep=keep).logits
    except TypeError:  # an architecture without logits_to_keep: all positions
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits


def completion_logits(logits: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """Logits that predict each completion token: (B, L, V) -> (B, T, V). `logits` may hold only
    the last K positions (forward_logits); they are then indexed from position L - K."""
    t = batch.targets.shape[1]
    offset = batch.input_ids.shape[1] - logits.shape[1]
    idx = batch.starts[:, None] - offset + torch.arange(t)[None, :]  # (B, T)
    idx = idx.clamp(max=logits.shape[1] - 1)
    return logits.gather(1, idx[..., None].expand(-1, -1, logits.shape[-1]))  # (B, T, V)
