"""rlvr's decode loop for rollouts (`rollout.engine=loop`): shared prefill, finished rows dropped.

transformers' `generate` prefills each of the G copies of a prompt on its
own and keeps every row in the batch until the longest one stops. RL
rollouts waste most of that: here each distinct prompt is prefilled once
and its KV cache repeated G times, and a row that emits eos leaves the
batch (its cache row at the next compaction), so compute follows the tokens actually
generated. The sampling distribution is the same (softmax of logits /
temperature, optional nucleus); behaviour log-probs are read off each
step's logits, one (rows, V) slice at a time, never (rows, T, V).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from rlvr.rollout import native
from rlvr.rollout.stepper import make_stepper


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


def sample_with_logprobs(
    logits: torch.Tensor, temperature: float, top_p: float, greedy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its log-prob under softmax(logits / temperature) (1 when greedy),
    (R, V) -> (R,), (R,). Sampling by inverse CDF: one uniform per row, where multinomial draws an
    exponential per vocabulary entry (6% of the loop's time on SmolLM2 at 16 rows, profiled)."""
    if not greedy and top_p >= 1.0 and logits.dtype == torch.float32 and logits.device.type == "cpu":
        lib = native.library()
        if lib is not None:  # the same draw in one pass over exp (rlvr.rollout.native.sample)
            return native.sample(lib, logits, temperature, torch.rand(len(logits)))
    log_p = torch.log_softmax(logits / (1.0 if greedy else temperature), dim=-1)  # (R, V)
    if greedy:
        tok = logits.argmax(-1)  # (R,)
    else:
        probs = log_p.exp() if top_p >= 1.0 else processed_probs(logits, temperature, top_p)  # (R, V)
        cdf = probs.cumsum(-1)  # (R, V)
        u = torch.rand(len(cdf), 1, device=cdf.device) * cdf[:, -1:]  # (R, 1)
        tok = (
            torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
        )  # (R,): cdf > u, never a zero-probability token
    return tok, log_p.gather(-1, tok[:, None]).squeeze(-1)


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool) -> torch.Tensor:
    """One token per row, (R, V) -> (R,)."""
    return sample_with_logprobs(logits, temperature, top_p, greedy)[0]


@torch.no_grad()
def decode(
    model,
    prompts: Sequence[Sequence[int]],
    group_size: int,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    greedy: bool,
    eos_id: int,
    pad_id: int,
    stop: threading.Event | None = None,
) -> list[tuple[list[int], list[float], str]]:
    """(token ids, behaviour log-probs, finish reason) for `group_size` samples of each prompt,
    prompt after prompt. Token ids end with eos when it was produced ('stop'), else 'length';
    once `stop` is set (new weights: rlvr.rollout.controls.NewWeights), the rows still decoding end
    after the step in hand, 'interrupted'."""
    device = next(model.parameters()).device
    stepper = make_stepper(model, max_new_tokens, rows=len(prompts) * group_size)
    logits = stepper.prefill(prompts, pad_id, device)  # (B, V)
    stepper.repeat(group_size)  # one prefill per prompt, G rows of cache
    logits = logits.repeat_interleave(group_size, 0)  # (R, V)
    n = len(prompts) * group_size
    rows = torch.arange(n, device=device)  # (R,) which output row each active row is
    tokens = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    finish = ["length"] * n
    for step in range(max_new_tokens):
        tok, lp = sample_with_logprobs(logits, temperature, top_p, greedy)  # (R,) each
        for r, t, p in zip(rows.tolist(), tok.tolist(), lp.tolist()):
            tokens[r].append(t)
            logps[r].append(p)
        done = tok == eos_id  # (R,)
        for r in rows[done].tolist():
            finish[r] = "stop"
        if stop is not None and stop.is_set() and step < max_new_tokens - 1:
            for r in rows[~done].tolist():
                finish[r] = "interrupted"
            break
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if bool(done.any()):  # finished rows leave the batch, and their cache with them
            keep = (~done).nonzero().squeeze(-1)  # (R',)
            stepper.select(keep)
            rows, tok = rows[keep], tok[keep]
        logits = stepper.step(tok)  # (R, V)
    return [(tokens[r], logps[r], finish[r]) for r in range(n)]
