"""Speculative decoding in rlvr's decode loop: prompt-lookup drafts, verified by rejection sampling.

Each step proposes k draft tokens per row by prompt lookup (the tokens that followed the latest
earlier occurrence of the row's last n-gram, n <= lookup_max, in its prompt + completion), runs the
pending token and the k drafts through the model in one forward, and accepts draft i with
probability p_i(d_i): the draft distribution is a point mass, so min(1, p/q) = p(d). At the first
rejection the token is drawn from p_i with d_i removed (the residual max(0, p - q), renormalised),
which makes every emitted token exactly p-distributed (Leviathan et al. 2023, Chen et al. 2023);
greedy decoding accepts a draft iff it is the argmax, so greedy output is unchanged.

The rows of a batch share one KV cache, so all rows advance by the same m + 1 tokens, m the fewest
drafts any row accepted in the step: a row that accepted more takes its next accepted draft as the
step's last token. Cutting a row's chain at a point set by the other rows' independent draws
leaves its emitted prefix correctly distributed. Behaviour log-probs are log softmax(logits /
temperature) of the emitted tokens, as in `decode`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rlvr.rollout.decode import processed_probs, sample_tokens
from rlvr.rollout.stepper import cache_arg_name, cache_of
from rlvr.scoring import left_pad


def lookup_draft(context: Sequence[int], k: int, lookup_max: int) -> list[int] | None:
    """The k tokens that followed the latest earlier occurrence of the context's last n-gram
    (longest n first, n <= lookup_max), padded by repeating the last; None when no n-gram recurs."""
    for n in range(min(lookup_max, len(context) - 1), 0, -1):
        tail = list(context[-n:])
        for start in range(len(context) - n - 1, -1, -1):
            if list(context[start : start + n]) == tail:
                follow = list(context[start + n : start + n + k])
                return (follow + follow[-1:] * k)[:k]
    return None


class _Rows:
    """Per-sample output and the active rows' tensors (dropped together when rows finish)."""

    def __init__(self, prompts, group_size: int, mask: torch.Tensor, max_new_tokens: int, eos_id: int):
        n = len(prompts) * group_size
        self.contexts = [list(prompts[r // group_size]) for r in range(n)]  # prompt + emitted: the lookup's text
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.logps: list[list[float]] = [[] for _ in range(n)]
        self.finish = ["length"] * n
        self.max_new_tokens, self.eos_id = max_new_tokens, eos_id
        self.active = torch.arange(n)  # (R,) the output row of each active row
        self.mask = mask  # (R, L) attention mask of the cache + what is fed next
        self.next_pos = mask.sum(-1)  # (R,) position of the pending token

    def emit(self, a: int, token: int, logp: float) -> None:
        r = int(self.active[a])
        if self.ended(r):  # eos or budget reached earlier in this step
            return
        self.tokens[r].append(token)
        self.logps[r].append(logp)
        self.contexts[r].append(token)
        if token == self.eos_id:
            self.finish[r] = "stop"

    def ended(self, r: int) -> bool:
        return self.finish[r] == "stop" or len(self.tokens[r]) >= self.max_new_tokens

    def keep_unfinished(self, cache, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
        """Drop finished rows (their cache too); returns the given per-row tensors cut alike, or None
        when no row is left."""
        alive = torch.tensor([not self.ended(int(r)) for r in self.active])  # (R,)
        if not bool(alive.any()):
            return None
        if not bool(alive.all()):
            keep = alive.nonzero().squeeze(-1)  # (R',)
            cache.batch_select_indices(keep)
            self.active, self.mask, self.next_pos = self.active[keep], self.mask[keep], self.next_pos[keep]
            tensors = tuple(t[keep] for t in tensors)
        return tensors


def _logp_of(logits: torch.Tensor, tokens: torch.Tensor, temp: float) -> torch.Tensor:
    return torch.log_softmax(logits / temp, -1).gather(-1, tokens[:, None]).squeeze(-1)  # (R,)


@torch.no_grad()
def decode_speculative(
    model,
    prompts: Sequence[Sequence[int]],
    group_size: int,
    *,
    max_new_tokens: int,
    temperature: float,
    greedy: bool,
    eos_id: int,
    pad_id: int,
    draft_tokens: int,
    lookup_max: int = 4,
    propose: Callable[[list[int], int], list[int] | None] | None = None,
) -> tuple[list[tuple[list[int], list[float], str]], dict[str, float]]:
    """`decode`'s output (token ids, behaviour log-probs, finish reason per sample), and the draft
    statistics: accept_rate (accepted / proposed drafts), accept_len (tokens per row per forward).
    propose(context, k): k draft tokens or None (default: prompt lookup, `lookup_draft`)."""
    propose = propose or (lambda context, k: lookup_draft(context, k, lookup_max))
    ids, mask = left_pad(prompts, pad_id)  # (B, P)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache, cache_arg = cache_of(out), cache_arg_name(model)
    cache.batch_repeat_interleave(group_size)
    logits = out.logits[:, -1].float().repeat_interleave(group_size, 0)  # (R, V)
    rows = _Rows(prompts, group_size, mask.repeat_interleave(group_size, 0), max_new_tokens, eos_id)
    temp = 1.0 if greedy else temperature
    proposed = accepted = verified = emitted = 0
    pending = sample_tokens(logits, temperature, greedy)  # (R,) drawn, not yet fed to the model
    pending_lp = _logp_of(logits, pending, temp)  # (R,)
    while True:
        for a in range(len(rows.active)):
            rows.emit(a, int(pending[a]), float(pending_lp[a]))
        kept = rows.keep_unfinished(cache, pending)
        if kept is None:
            break
        (pending,) = kept
        n = len(rows.active)
        # k drafts per row, fewer near the budget: m drafts + the next token must fit
        room = min(max_new_tokens - len(rows.tokens[int(r)]) for r in rows.active)
        k = max(0, min(draft_tokens, room - 1))
        drafts = (
            [propose(rows.contexts[int(r)], k) or [int(pending[a])] * k for a, r in enumerate(rows.active)]
            if k
            else [[] for _ in range(n)]
        )
        d = torch.tensor(drafts, dtype=torch.long).view(n, k)  # (R, k)
        rows.mask = torch.cat([rows.mask, rows.mask.new_ones(n, k + 1)], dim=-1)  # (R, L + k + 1)
        out = model(
            input_ids=torch.cat([pending[:, None], d], dim=1),
            attention_mask=rows.mask,
            position_ids=rows.next_pos[:, None] + torch.arange(k + 1)[None, :],
            use_cache=True,
            **{cache_arg: cache},
        )
        cache = cache_of(out)
        step_logits = out.logits.float()  # (R, k + 1, V): position j predicts the token after input j
        probs = processed_probs(step_logits, temperature)
        probs = probs / probs.sum(-1, keepdim=True)  # (R, k + 1, V) the target distribution
        if greedy:
            ok = d == step_logits[:, :k].argmax(-1)  # (R, k)
        else:
            ok = torch.rand(n, k) < probs[:, :k].gather(-1, d[..., None]).squeeze(-1)  # (R, k): accept w.p. p(d)
        n_ok = ok.long().cumprod(dim=1).sum(dim=1)  # (R,) drafts accepted before the first rejection
        m = int(n_ok.min()) if k else 0
        proposed, accepted, verified, emitted = (
            proposed + n * k,
            accepted + int(n_ok.sum()),
            verified + n,
            emitted + n * (m + 1),
        )
        for j in range(m):  # drafts every row accepted
            lp = _logp_of(step_logits[:, j], d[:, j], temp)  # (R,)
            for a in range(n):
                rows.emit(a, int(d[a, j]), float(lp[a]))
        # position m: the row's next accepted draft, else a draw from the residual (or the bonus token)
        target = probs[:, m]  # (R, V)
        if m < k:
            residual = target.scatter(-1, d[:, m, None], 0.0)  # (R, V): p without the rejected draft
            redraw = (
                residual.argmax(-1)
                if greedy
                else torch.multinomial(residual / residual.sum(-1, keepdim=True).clamp(min=1e-30), 1).squeeze(-1)
            )
            pending = torch.where(n_ok == m, redraw, d[:, m])  # (R,)
        else:
            pending = target.argmax(-1) if greedy else torch.multinomial(target, 1).squeeze(-1)  # (R,)
        pending_lp = _logp_of(step_logits[:, m], pending, temp)  # (R,)
        if k > m:  # the cache holds the pending token and m drafts, not the rejected rest
            cache.crop(-(k - m))
            rows.mask = rows.mask[:, : rows.mask.shape[1] - (k - m)]
        rows.next_pos = rows.next_pos + m + 1
        kept = rows.keep_unfinished(cache, pending, pending_lp)  # a row may have ended on an accepted eos
        if kept is None:
            break
        pending, pending_lp = kept
    stats = {"accept_rate": accepted / max(proposed, 1), "accept_len": emitted / max(verified, 1)}
    return [(rows.tokens[r], rows.logps[r], rows.finish[r]) for r in range(len(rows.tokens))], stats
