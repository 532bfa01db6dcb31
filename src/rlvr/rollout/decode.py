"""rlvr's decode loop for rollouts (`rollout.engine=loop`): shared prefill, finished rows dropped.

transformers' `generate` prefills each of the G copies of a prompt on its
own and keeps every row in the batch until the longest one stops. RL
rollouts waste most of that: here each distinct prompt is prefilled once
and its KV cache repeated G times, and a row that emits eos leaves the
batch (its cache row at the next compaction), so compute follows the tokens actually
generated. The sampling distribution is the same (softmax of logits /
temperature, optionally truncated: rlvr.algos.truncation); behaviour log-probs are read off each
step's logits, one (rows, V) slice at a time, never (rows, T, V).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import torch

from rlvr.algos.truncation import Truncation, prefix_records
from rlvr.rollout import native
from rlvr.rollout.stepper import make_stepper

NO_TRUNCATION = Truncation()


def supports_loop(model) -> bool:
    """Whether the model's KV cache can be repeated and row-selected (decoder-only HF models with
    a standard cache); others need `rollout.engine=hf`."""
    from transformers import Cache

    return bool(getattr(model, "can_generate", lambda: False)()) and hasattr(Cache, "batch_select_indices")


def processed_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The untruncated sampling distribution (..., V): softmax(logits / temperature), in fp32."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample_with_logprobs(
    logits: torch.Tensor, temperature: float, rule: Truncation, greedy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One token per row, its log-prob under the distribution it was drawn from (softmax(logits /
    temperature) renormalised over the kept set of `rule`; 1 when greedy), and the kept sets'
    records (rlvr.algos.truncation.prefix_records; None untruncated): (R, V) -> (R,), (R,), (R,) | None.
    Sampling by inverse CDF: one uniform per row, where multinomial draws an exponential per
    vocabulary entry (6% of the loop's time on SmolLM2 at 16 rows, profiled)."""
    truncated = rule.active and not greedy
    if not greedy and logits.dtype == torch.float32 and logits.device.type == "cpu":
        lib = native.library()
        if lib is not None and truncated:  # the same draw, on the candidates (rlvr.rollout.native.sample_truncated)
            return native.sample_truncated(lib, logits, temperature, rule, torch.rand(len(logits)))
        if lib is not None:  # the same draw in one pass over exp (rlvr.rollout.native.sample)
            return (*native.sample(lib, logits, temperature, torch.rand(len(logits))), None)
    z = logits.float() / (1.0 if greedy else temperature)  # (R, V)
    if truncated:  # drawn among each row's kept set: the n largest of its K candidates
        vals, ids, n = rule.kept_prefix(z)  # (R, K), (R, K), (R,)
        outside = torch.arange(vals.shape[1], device=vals.device) >= n[:, None]  # (R, K)
        tok, log_p = _draw(torch.log_softmax(vals.masked_fill(outside, -math.inf), dim=-1))
        return ids.gather(-1, tok[:, None]).squeeze(-1), log_p, prefix_records(ids, n, z.shape[-1])
    log_p = torch.log_softmax(z, dim=-1)  # (R, V)
    if greedy:
        tok = logits.argmax(-1)  # (R,)
        return tok, log_p.gather(-1, tok[:, None]).squeeze(-1), None
    return (*_draw(log_p), None)


def _draw(log_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One index per row of log-probs (R, N) by inverse CDF, and its log-prob."""
    cdf = log_p.exp().cumsum(-1)  # (R, N)
    u = torch.rand(len(cdf), 1, device=cdf.device) * cdf[:, -1:]  # (R, 1)
    tok = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)  # (R,): never p = 0
    return tok, log_p.gather(-1, tok[:, None]).squeeze(-1)


def sample_tokens(logits: torch.Tensor, temperature: float, greedy: bool) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), (R, V) -> (R,)."""
    return sample_with_logprobs(logits, temperature, NO_TRUNCATION, greedy)[0]


@torch.no_grad()
def decode(
    model,
    prompts: Sequence[Sequence[int]],
    group_size: int,
    *,
    max_new_tokens: int,
    temperature: float,
    truncation: Truncation,
    greedy: bool,
    eos_id: int,
    pad_id: int,
    stop: threading.Event | None = None,
) -> list[tuple[list[int], list[float], str, list[int] | None]]:
    """(token ids, behaviour log-probs, finish reason, kept-set records or None) for `group_size`
    samples of each prompt, prompt after prompt (rlvr.rollout.samples.Sample). Token ids end with eos when it was produced ('stop'), else 'length';
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
    kept: list[list[int]] = [[] for _ in range(n)]
    finish = ["length"] * n
    for step in range(max_new_tokens):
        tok, lp, records = sample_with_logprobs(logits, temperature, truncation, greedy)  # (R,) each
        for r, t, p in zip(rows.tolist(), tok.tolist(), lp.tolist()):
            tokens[r].append(t)
            logps[r].append(p)
        if records is not None:
            for r, k in zip(rows.tolist(), records.tolist()):
                kept[r].append(k)
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
    return [(tokens[r], logps[r], finish[r], kept[r] or None) for r in range(n)]
