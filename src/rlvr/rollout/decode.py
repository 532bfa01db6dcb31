"""rlvr's decode loop for rollouts (`rollout.engine=loop`): shared prefill, finished rows dropped.

transformers' `generate` prefills each of the G copies of a prompt on its
own and keeps every row in the batch until the longest one stops. RL
rollouts waste most of that: here each distinct prompt is prefilled once
and its KV cache repeated G times, and a row that emits eos leaves the
batch (its cache rows are dropped), so compute follows the tokens actually
generated. The sampling distribution is the same (softmax of logits /
temperature, optional nucleus); behaviour log-probs are read off each
step's logits, one (rows, V) slice at a time, never (rows, T, V).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from rlvr.scoring import left_pad


def supports_loop(model) -> bool:
    """Whether the model's KV cache can be repeated and row-selected (decoder-only HF models with
    a standard cache); others need `rollout.engine=hf`."""
    from transformers import Cache

    return bool(getattr(model, "can_generate", lambda: False)()) and hasattr(Cache, "batch_select_indices")


def processed_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The sampling distribution (..., V): softmax(logits / temperature), cut to the nucleus (not
    renormalised: multinomial does not need it)."""
    probs = torch.softmax(logits / temperature, dim=-1)  # (..., V)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)  # (..., V)
        outside = sorted_p.cumsum(-1) - sorted_p > top_p  # tokens past the nucleus; the first always stays
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return probs


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool) -> torch.Tensor:
    """One token per row, (R, V) -> (R,)."""
    if greedy:
        return logits.argmax(-1)
    return torch.multinomial(processed_probs(logits, temperature, top_p), 1).squeeze(-1)  # (R,)


def cache_arg_name(model) -> str:
    """The forward argument that takes the KV cache: 'cache' in newer transformers, else 'past_key_values'."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def cache_of(out):
    return out["cache"] if "cache" in out else out.past_key_values


@torch.no_grad()
def decode(model, prompts: Sequence[Sequence[int]], group_size: int, *, max_new_tokens: int, temperature: float,
           top_p: float, greedy: bool, eos_id: int, pad_id: int) -> list[tuple[list[int], list[float], str]]:
    """(token ids, behaviour log-probs, finish reason) for `group_size` samples of each prompt,
    prompt after prompt. Token ids end with eos when it was produced ('stop'), else 'length'."""
    ids, mask = left_pad(prompts, pad_id)  # (B, P)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P): left padding does not shift positions
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache, cache_arg = cache_of(out), cache_arg_name(model)
    cache.batch_repeat_interleave(group_size)  # one prefill per prompt, G rows of cache
    logits = out.logits[:, -1].float().repeat_interleave(group_size, 0)  # (R, V)
    mask = mask.repeat_interleave(group_size, 0)  # (R, P)
    next_pos = mask.sum(-1)  # (R,) position of each row's next token
    n = len(prompts) * group_size
    rows = torch.arange(n, device=device)  # (R,) which output row each active row is
    tokens = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    finish = ["length"] * n
    temp = 1.0 if greedy else temperature
    for step in range(max_new_tokens):
        tok = sample_tokens(logits, temperature, top_p, greedy)  # (R,)
        lp = torch.log_softmax(logits / temp, dim=-1).gather(-1, tok[:, None]).squeeze(-1)  # (R,)
        for r, t, p in zip(rows.tolist(), tok.tolist(), lp.tolist()):
            tokens[r].append(t)
            logps[r].append(p)
        done = tok == eos_id  # (R,)
        for r in rows[done].tolist():
            finish[r] = "stop"
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if bool(done.any()):  # finished rows leave the batch, and their cache with them
            keep = (~done).nonzero().squeeze(-1)  # (R',)
            cache.batch_select_indices(keep)
            rows, tok, mask, next_pos = rows[keep], tok[keep], mask[keep], next_pos[keep]
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=-1)  # (R, P + step + 1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                    use_cache=True, **{cache_arg: cache})
        cache = cache_of(out)
        logits = out.logits[:, -1].float()  # (R, V)
        next_pos = next_pos + 1
    return [(tokens[r], logps[r], finish[r]) for r in range(n)]
