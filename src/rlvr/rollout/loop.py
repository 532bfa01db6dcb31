"""The loop engine (`rollout.engine=loop`): rlvr's decode loop over whole groups, optionally speculative."""

from __future__ import annotations

from collections.abc import Sequence

from rlvr.configlib import ConfigError
from rlvr.rollout.decode import decode, supports_loop
from rlvr.rollout.engine import ModelEngine, SamplingParams
from rlvr.rollout.samples import Sample
from rlvr.rollout.lookup import decode_speculative


class LoopEngine(ModelEngine):
    """`decode` over whole groups: `max_rows // G` prompts (their G samples each) per call; with
    draft_tokens > 0, speculative decoding with prompt-lookup drafts (rlvr.rollout.lookup)."""

    def __init__(self, model, tokenizer, *, draft_tokens: int = 0, lookup_max: int = 4, **kwargs) -> None:
        if not supports_loop(model):
            raise ConfigError(
                f"rollout.engine: 'loop' needs a decoder-only model whose KV cache can be "
                f"repeated and row-selected; {type(model).__name__} cannot: use rollout.engine=hf"
            )
        super().__init__(model, tokenizer, **kwargs)
        self.draft_tokens, self.lookup_max = draft_tokens, lookup_max
        self.speculative_stats: dict[str, float] = {}
        """Draft acceptance of the last generate call (empty without speculation)."""

    def without_speculation(self) -> None:
        self.draft_tokens, self.speculative_stats = 0, {}

    def sample(self, contexts: Sequence[Sequence[int]], params: SamplingParams, group_size: int) -> list[Sample]:
        g = group_size
        out: list[Sample] = []
        per_chunk = max(1, self.max_rows // g)  # whole groups per chunk
        for start in range(0, len(contexts), per_chunk):
            idx = list(range(start, min(start + per_chunk, len(contexts))))
            kwargs = dict(
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                greedy=params.greedy,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
            )
            if self.draft_tokens:
                samples, self.speculative_stats = decode_speculative(
                    self.model,
                    [contexts[i] for i in idx],
                    g,
                    draft_tokens=self.draft_tokens,
                    lookup_max=self.lookup_max,
                    **kwargs,
                )
            else:
                new_weights = self.episodes.new_weights  # partial rollouts: stop for them between steps
                samples = decode(
                    self.model,
                    [contexts[i] for i in idx],
                    g,
                    stop=new_weights.arrived if new_weights else None,
                    truncation=params.truncation,
                    **kwargs,
                )
            out.extend(samples)
        return out
