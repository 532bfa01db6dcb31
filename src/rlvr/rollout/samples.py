"""What an engine's `sample` returns, and the protocol of what episodes sample through
(rlvr.rollout.episodes, the agent endpoint)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Sample = tuple[list[int], list[float], str] | tuple[list[int], list[float], str, list[int] | None]
"""(token ids, behaviour log-probs, finish reason 'stop' | 'length' | 'interrupted'[, the kept-set
record of each token: rlvr.algos.truncation, None or absent when untruncated]) of one sampled
continuation; 'interrupted': stopped for new weights (EpisodeSpec.new_weights), to be sampled on."""


def kept_of(sample: Sample) -> list[int]:
    """A Sample's kept-set records, one per token (0 where it has none)."""
    kept = sample[3] if len(sample) > 3 else None
    return list(kept) if kept else [0] * len(sample[0])


class TokenSampler(Protocol):
    tokenizer: Any
    version: int

    def sample(self, contexts: Sequence[Sequence[int]], params, group_size: int) -> list[Sample]:
        """`group_size` continuations of each context, context after context."""
        ...
