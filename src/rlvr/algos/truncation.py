"""Truncated sampling (top-k, top-p, min-p) and its replay in the trainer.

    rule = Truncation(top_k=20, top_p=0.9, min_p=0.05)
    vals, ids, n = rule.kept_prefix(z)               # each row keeps its n largest of z = logits / T
    records = prefix_records(ids, n, vocab)          # (R,) int64: what the engine keeps per token
    out = dropped(z, records, targets, rule, stats)  # the trainer: (R, V) True outside the same set

Every truncation keeps an upper set of the tempered logits (the largest ones), so a kept set is
known by its size and checked by a hash of its ids. An engine that samples from a truncated
distribution records both per sampled token in one int64 (8 bytes): the size in the low 20 bits,
a 43-bit hash in the rest (0: untruncated, or a token an environment appended; `RECOMPUTE`: the
engine kept no set, as vLLM, whose log-probs are already renormalised, and the trainer applies the
rule to its own logits). The trainer takes the `size` largest of its own logits, always with the
sampled token, and renormalises over them: the log-prob of the distribution the token was drawn
from (sampling replay: vLLM's mask replay, prime-rl's and SkyRL's of 2026, after DeepSeek-V3.2's
"keep sampling mask"). Where the trainer's logits order the boundary differently, the tokens
swapped have logits that differ by less than the two sides' gap, so the normaliser moves by less
than that gap times their probability; the hash counts such sets (`set_mismatch`), and the parity
check (rlvr.algos.parity) names a truncation cause when they matter.

The order of the rules is transformers' (top-k, then top-p over what top-k kept, then min-p),
which rlvr's loop and hf engines share; vLLM applies min-p first (`order="vllm"`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

SIZE_BITS = 20
"""Kept-set sizes up to 2**20 - 1: vocabularies up to a million tokens."""
HASH_BITS = 43
RECOMPUTE = -1
"""A record that says: truncated, set not kept; the trainer applies the rule to its own logits."""
NEG = torch.finfo(torch.float32).min
"""What a dropped token's logit becomes: p is exactly 0, and p * z is 0 (not 0 * -inf = NaN)."""


@dataclass(frozen=True)
class Truncation:
    """rollout.top_k, rollout.top_p, rollout.min_p (0, 1.0, 0.0: off), applied to logits / temperature."""

    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    order: Literal["hf", "vllm"] = "hf"

    @property
    def active(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    def threshold(self, z: Tensor) -> Tensor:
        """(R, V) fp32 tempered logits -> (R,) the smallest logit kept: the kept set is z >= it."""
        vals, _, n = self.kept_prefix(z)
        return vals.gather(-1, (n - 1)[:, None]).squeeze(-1)

    def kept_prefix(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(R, V) fp32 tempered logits -> (values (R, K) descending, their ids (R, K), n (R,)): each
        row keeps its n largest logits. The K candidates are found without sorting the vocabulary:
        top_k's k largest (torch.topk), else every logit above a bound that the kept set cannot
        reach below (min_p's own threshold; top_p's: the tokens under (1 - top_p) / V hold less than
        1 - top_p of the mass together, so the nucleus is among the others), sorted; the rules
        then count on (R, K)."""
        vocab = z.shape[-1]
        lse = None  # the whole vocabulary's normaliser, when top_p needs it
        if 0 < self.top_k < vocab:
            vals, ids = z.topk(self.top_k, dim=-1)  # (R, k) descending: every kept set lies within
        else:
            bound = z.new_full(z.shape[:1], -math.inf)  # (R,)
            if self.min_p > 0.0:  # p >= min_p * p_max, whatever the normaliser
                bound = torch.maximum(bound, z.max(dim=-1).values + math.log(self.min_p))
            if self.top_p < 1.0 and (self.order == "hf" or self.min_p == 0.0):  # top_p over the whole vocabulary
                lse = torch.logsumexp(z, dim=-1)  # (R,)
                bound = torch.maximum(bound, lse + math.log((1.0 - self.top_p) / vocab))
            vals, ids = _above(z, bound)
        return vals, ids, self._count(vals, vocab, lse)

    def _count(self, vals: Tensor, vocab: int, lse: Tensor | None) -> Tensor:
        """(R,) how many of its candidates `vals` (R, K, descending, -inf past a row's own) each row
        keeps; lse: the whole vocabulary's normaliser (top_p when nothing was cut before it)."""
        rows, k = vals.shape
        pos = torch.arange(k, device=vals.device)  # (K,)
        n = torch.isfinite(vals).sum(-1)  # (R,) what survives so far
        stages = ("min_p", "top_k", "top_p") if self.order == "vllm" else ("top_k", "top_p", "min_p")
        for stage in stages:
            if stage == "top_k" and 0 < self.top_k < vocab:
                n = n.clamp(max=self.top_k)
            elif stage == "min_p" and self.min_p > 0.0:
                n = torch.minimum(n, (vals >= (vals[:, :1] + math.log(self.min_p))).sum(-1))
            elif stage == "top_p" and self.top_p < 1.0:  # the nucleus of what survives
                inside = pos < n[:, None]  # (R, K)
                norm = lse if lse is not None else torch.logsumexp(vals.masked_fill(~inside, -math.inf), dim=-1)
                p = (vals - norm[:, None]).exp()  # (R, K)
                keep = (p.cumsum(-1) - p < self.top_p) & inside  # mass before each below top_p
                n = torch.minimum(n, keep.sum(-1).clamp(min=1))
        return n


def _above(z: Tensor, bound: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's logits >= its bound, sorted descending: values (R, K) padded with -inf and ids
    (R, K), K the largest count. One pass over the vocabulary to select, the sort on (R, K)."""
    mask = z >= bound[:, None]  # (R, V)
    counts = mask.sum(-1)  # (R,)
    k = max(1, int(counts.max()))
    row, col = mask.nonzero(as_tuple=True)  # (N,) each, row-major
    slot = torch.arange(len(row), device=z.device) - (counts.cumsum(0) - counts)[row]  # (N,) place in its row
    vals = z.new_full((len(z), k), -math.inf)
    ids = torch.zeros((len(z), k), dtype=torch.long, device=z.device)
    vals[row, slot], ids[row, slot] = z[row, col], col
    vals, order = vals.sort(dim=-1, descending=True)  # (R, K)
    return vals, ids.gather(-1, order)


_TABLES: dict[tuple[int, str], Tensor] = {}


def hash_table(vocab: int, device: torch.device) -> Tensor:
    """(V,) int64 random 43-bit values, the same in every process (a fixed seed): a set's hash is
    the sum of its ids' values, modulo 2**43."""
    if vocab >= 1 << SIZE_BITS:
        raise ValueError(f"a vocabulary of {vocab} tokens: kept-set records hold sizes below 2**{SIZE_BITS}")
    key = (vocab, str(device))
    if key not in _TABLES:
        g = torch.Generator().manual_seed(0x5EED)
        _TABLES[key] = torch.randint(0, 1 << HASH_BITS, (vocab,), generator=g, dtype=torch.int64).to(device)
    return _TABLES[key]


def set_hash(kept: Tensor) -> Tensor:
    """(R, V) bool -> (R,) int64 hash of each row's kept ids."""
    table = hash_table(kept.shape[-1], kept.device)
    return torch.where(kept, table, 0).sum(-1) & ((1 << HASH_BITS) - 1)


def kept_records(kept: Tensor) -> Tensor:
    """(R, V) bool kept sets -> (R,) int64 records: size | hash << SIZE_BITS."""
    return kept.sum(-1) | (set_hash(kept) << SIZE_BITS)


def prefix_records(ids: Tensor, n: Tensor, vocab: int) -> Tensor:
    """The records of kept sets given as each row's first n of `ids` (R, K) (Truncation.kept_prefix)."""
    table = hash_table(vocab, ids.device)[ids]  # (R, K)
    live = torch.arange(ids.shape[1], device=ids.device) < n[:, None]
    return n | ((torch.where(live, table, 0).sum(-1) & ((1 << HASH_BITS) - 1)) << SIZE_BITS)


@dataclass
class ReplayStats:
    """What the trainer's replay found, summed over the calls it is passed to."""

    tokens: int = 0
    """Sampled tokens scored over a kept set (a record or the rule)."""
    set_mismatch: int = 0
    """Of those with a record, the ones whose rebuilt set hashes otherwise than the engine's."""


def dropped(z: Tensor, records: Tensor, targets: Tensor, rule: Truncation, stats: ReplayStats | None = None) -> Tensor:
    """(C, V) bool: the tokens outside each row's kept set (none where the record is 0). A set is
    exactly `size` tokens (the rule's count for RECOMPUTE), the largest, ties broken as topk breaks
    them (tied logits give the same normaliser whichever wins); the sampled token always among them,
    in place of the smallest when the trainer's logits order it outside."""
    out = torch.zeros_like(z, dtype=torch.bool)  # (C, V)
    sized, ruled = records > 0, records == RECOMPUTE
    live = sized | ruled
    if not bool(live.any()):
        return out
    rows = live.nonzero().squeeze(-1)  # (c,)
    size = torch.zeros(len(rows), dtype=torch.long, device=z.device)  # (c,)
    from_record = sized[rows]
    size[from_record] = records[rows[from_record]] & ((1 << SIZE_BITS) - 1)
    if bool((~from_record).any()):
        size[~from_record] = rule.kept_prefix(z[rows[~from_record]])[2]
    ids = z[rows].topk(int(size.max()), dim=-1).indices  # (c, k) descending
    keep = torch.zeros((len(rows), z.shape[-1]), dtype=torch.bool, device=z.device)
    keep.scatter_(-1, ids, torch.arange(ids.shape[1], device=z.device) < size[:, None])
    target = targets[rows][:, None]  # (c, 1)
    missing = ~keep.gather(-1, target).squeeze(-1)  # (c,) the sampled token ordered outside
    if bool(missing.any()):
        smallest = ids.gather(-1, (size - 1)[:, None])  # (c, 1)
        keep[missing.nonzero().squeeze(-1), smallest[missing].squeeze(-1)] = False
        keep.scatter_(-1, target, True)
    out[rows] = ~keep
    if stats is not None:
        stats.tokens += len(rows)
        if bool(from_record.any()):
            recorded = keep[from_record]
            stats.set_mismatch += int((set_hash(recorded) != records[rows[from_record]] >> SIZE_BITS).sum())
    return out


@dataclass
class Replay:
    """The trainer's side of one scoring call: the rule, the records of the tokens it scores (n,),
    and the stats it adds to (None: none)."""

    rule: Truncation
    records: Tensor
    stats: ReplayStats | None = None
    """None: nothing counted (the hash is not even taken)."""

    def part(self, rows: slice) -> Replay | None:
        """The same for a slice of the tokens; None where none of them was truncated."""
        records = self.records[rows]
        return Replay(self.rule, records, self.stats) if bool((records != 0).any()) else None

    def dropped(self, z: Tensor, targets: Tensor, *, count: bool = True) -> Tensor:
        return dropped(z, self.records, targets, self.rule, self.stats if count else None)
