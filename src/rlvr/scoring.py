"""Scoring token sequences with a model: the one forward pass that rollout, inference and training share.

    ids, mask = left_pad(prompts, pad_id)                          # generation input (B, P)
    batch = pack(prompt_ids, completion_ids, pad_id)               # training input, right-padded
    logp, entropy = completion_scores(model, batch, temperature)   # (B, T) fp32, with grad if enabled
    with compute(model, "bfloat16"): ...                           # mixed precision: bf16 compute, fp32 weights
    logp = completion_logprobs(model, completions, pad_id, temp)   # (N, T), no grad, micro-batched

The policy update, the frozen reference model and cold-start SFT all read
completion-token logits the same way: a model forward over prompt +
completion, only the positions that predict completion tokens through the
LM head, the logits divided by the sampling temperature.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlvr.algos import token_logprobs
from rlvr.records import Completion

__all__ = ["TokenBatch", "completion_logits", "completion_logprobs", "completion_scores", "compute", "forward_logits",
           "left_pad", "pack"]

COMPUTE_DTYPES = {"bfloat16": torch.bfloat16}


def compute(model, dtype: str):
    """The forward's compute precision: 'float32' as the weights are; 'bfloat16' runs the matmuls in
    bf16 under autocast while the weights (and the optimizer's state) stay fp32 (mixed precision)."""
    if dtype == "float32":
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=COMPUTE_DTYPES[dtype])


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # (B, L) prompt + completion, right-padded
    attention_mask: torch.Tensor  # (B, L)
    targets: torch.Tensor  # (B, T) completion tokens, T = longest completion
    mask: torch.Tensor  # (B, T) 1.0 on real completion tokens
    starts: torch.Tensor  # (B,) index in input_ids of the logit that predicts the first completion token

    def to(self, device) -> "TokenBatch":
        return TokenBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.targets, self.mask,
                                                    self.starts)))


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists as left-padded ids and attention mask, (B, P) each: the input of generation."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (B, P)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, P)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
    return ids, mask


def pack(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
         masks: Sequence[Sequence[int]] | None = None) -> TokenBatch:
    """Prompt + completion token lists as right-padded training tensors. masks: per completion token,
    1 where it counts (a trajectory's sampled tokens; default every completion token)."""
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
            mask[i, : len(c)] = 1.0 if masks is None else torch.tensor(list(masks[i]), dtype=torch.float32)
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
    idx = batch.starts[:, None] - offset + torch.arange(t, device=batch.starts.device)[None, :]  # (B, T)
    idx = idx.clamp(max=logits.shape[1] - 1)
    return logits.gather(1, idx[..., None].expand(-1, -1, logits.shape[-1]))  # (B, T, V)


def completion_scores(model, batch: TokenBatch, temperature: float, *, dtype: str = "float32"
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """logp and entropy (B, T) fp32 of the completion tokens under softmax(logits / temperature),
    the distribution they were sampled from; carries gradient when autograd is on. dtype: the
    forward's compute precision (`compute`); the log-probs are fp32 either way. The batch moves to
    the model's device (train.device); so are the results."""
    batch = batch.to(next(model.parameters()).device)
    with compute(model, dtype):
        logits = forward_logits(model, batch)  # (B, K, V)
    return token_logprobs(completion_logits(logits, batch) / temperature, batch.targets)  # (B, T) each


@torch.no_grad()
def completion_logprobs(model, completions: Sequence[Completion], pad_id: int, temperature: float,
                        *, micro_batch: int = 64, dtype: str = "float32") -> torch.Tensor:
    """logp (N, T) fp32 of each completion's sampled tokens under `model`, 0 on padding and on the
    tokens an environment appended."""
    t = max(1, max(len(c.token_ids) for c in completions))
    out = torch.zeros(len(completions), t)  # (N, T)
    for start in range(0, len(completions), micro_batch):
        chunk = completions[start:start + micro_batch]
        batch = pack([c.prompt_ids for c in chunk], [c.token_ids for c in chunk], pad_id, [c.mask for c in chunk])
        logp, _ = completion_scores(model, batch, temperature, dtype=dtype)  # (b, T')
        out[start:start + len(chunk), : logp.shape[1]] = logp.cpu() * batch.mask
    return out
