"""Per-token log-probs and entropy from logits, in fp32, without a full fp32 (B, T, V) copy.

With a 150k vocabulary, one fp32 copy of the logits of 64 completions x 1k
tokens is ~40 GB, and softmax, log-softmax and their product would triple it.
So the work goes in chunks of rows: each chunk is upcast, reduced to two
numbers per token (logp, entropy) and dropped. Under autograd each chunk is
checkpointed: backward recomputes it instead of keeping its fp32 temporaries,
so peak extra memory is a few (chunk, V) fp32 tensors whatever B and T are.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = ["chunk_logprobs", "token_logprobs"]


def chunk_logprobs(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(C, V) any dtype, (C,) long -> logp (C,), entropy (C,), fp32."""
    x = logits.float()  # (C, V)
    # -inf logits (masked vocabulary, tokens outside a kept set) become the most negative finite
    # float: p is still exactly 0, but p * log p is 0 instead of 0 * -inf = NaN.
    x = x.clamp(min=torch.finfo(torch.float32).min)  # (C, V)
    log_norm = torch.logsumexp(x, dim=-1, keepdim=True)  # (C, 1)
    log_p = x - log_norm  # (C, V)
    # sum of non-negative terms, no cancellation; log p floored at -1e4 (below any real one, -104 in
    # fp32) so that a masked token's gradient g * log p * p is 0, not an overflow times 0 = NaN
    entropy = -(log_p.exp() * log_p.clamp(min=-1e4)).sum(dim=-1)  # (C,)
    logp = log_p.gather(-1, targets[:, None]).squeeze(-1)  # (C,)
    return logp, entropy


def token_logprobs(logits: Tensor, targets: Tensor, *, chunk_size: int = 1024) -> tuple[Tensor, Tensor]:
    """logp and entropy of each target token, both (B, T) fp32.

    logits (B, T, V) in any dtype (bf16 is upcast per chunk); targets (B, T)
    long, logits[:, t] predicting targets[:, t]. Targets outside [0, V) (e.g.
    -100 padding) get logp 0: the mask is what excludes padding from the loss.
    chunk_size: rows (tokens) upcast at once; bounds the fp32 working memory
    to ~3 x chunk_size x V floats. Both outputs carry gradient when logits do.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"expected logits (B, T, V) and targets (B, T), got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    b, t, v = logits.shape
    flat_logits = logits.reshape(b * t, v)  # (B*T, V), a view for contiguous logits
    flat_targets = targets.reshape(b * t)  # (B*T,)
    valid = (flat_targets >= 0) & (flat_targets < v)  # (B*T,)
    flat_targets = torch.where(valid, flat_targets, torch.zeros_like(flat_targets))  # (B*T,)
    keep_graph = torch.is_grad_enabled() and logits.requires_grad
    logps, entropies = [], []
    for start in range(0, b * t, chunk_size):
        rows = slice(start, start + chunk_size)
        if keep_graph:
            logp, entropy = checkpoint(chunk_logprobs, flat_logits[rows], flat_targets[rows], use_reentrant=False)
        else:
            logp, entropy = chunk_logprobs(flat_logits[rows], flat_targets[rows])
        logps.append(logp)  # (C,)
        entropies.append(entropy)  # (C,)
    if not logps:  # B * T == 0
        empty = logits.new_zeros(b, t, dtype=torch.float32)
        return empty, empty.clone()
    logp = torch.cat(logps).reshape(b, t)  # (B, T)
    entropy = torch.cat(entropies).reshape(b, t)  # (B, T)
    logp = torch.where(valid.reshape(b, t), logp, torch.zeros_like(logp))  # (B, T)
    return logp, entropy
