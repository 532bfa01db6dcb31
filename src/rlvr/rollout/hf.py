"""Rollout with Hugging Face `generate` (`rollout.engine=hf`): G sampled completions per prompt.

Behaviour log-probs are taken from the generation logits divided by the
temperature (truncated: from generate's processed scores, which hold -inf
outside the kept set), the same distribution the trainer scores with, so the
importance ratio starts at 1 on the first update.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from rlvr.algos.truncation import kept_records
from rlvr.rollout.engine import ModelEngine, SamplingParams
from rlvr.rollout.samples import Sample
from rlvr.scoring import left_pad


class HFEngine(ModelEngine):
    """transformers' `generate`, every context repeated G times, `max_rows` rows per call."""

    def sample(self, contexts: Sequence[Sequence[int]], params: SamplingParams, group_size: int) -> list[Sample]:
        rows = [(i, j) for i in range(len(contexts)) for j in range(group_size)]  # group after group
        out: list[Sample] = []
        for start in range(0, len(rows), self.max_rows):
            out.extend(self._generate_chunk(contexts, rows[start : start + self.max_rows], params))
        return out

    def _generate_chunk(self, prompts, rows, params: SamplingParams) -> list[Sample]:
        tok = self.tokenizer
        eos_id = tok.eos_token_id
        input_ids, attention_mask = left_pad([prompts[i] for i, _ in rows], tok.pad_token_id)  # (B, P)
        input_ids, attention_mask = input_ids.to(self.model.device), attention_mask.to(self.model.device)
        truncated = params.truncation.active and not params.greedy
        kwargs = (
            dict(do_sample=False)
            if params.greedy
            else dict(
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                min_p=params.min_p or None,  # None overrides a generation_config's min_p too (no warper)
                output_scores=truncated,
            )
        )
        new_weights = self.episodes.new_weights
        if new_weights is not None:
            kwargs["stopping_criteria"] = _stop_when(new_weights.arrived)
        gen = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=eos_id,
            pad_token_id=tok.pad_token_id,
            output_logits=not truncated,  # truncated: the processed scores are what it drew from
            return_dict_in_generate=True,
            **kwargs,
        )
        new = gen.sequences[:, input_ids.shape[1] :]  # (B, T)
        temp = 1.0 if params.greedy else params.temperature
        # one step at a time: a (B, V) fp32 slice instead of (B, T, V) copies of every logit. Truncated:
        # generate's processed scores (logits / temperature, -inf outside the kept set) are what it drew from
        steps = gen.scores if truncated else [step.float() / temp for step in gen.logits]
        logp = torch.stack(
            [torch.log_softmax(z.float(), dim=-1).gather(-1, new[:, t, None]).squeeze(-1) for t, z in enumerate(steps)],
            dim=1,
        )  # (B, T)
        kept = torch.stack([kept_records(torch.isfinite(z)) for z in steps], dim=1) if truncated else None  # (B, T)
        samples: list[Sample] = []
        cut_short = (
            new_weights is not None
            and new_weights.arrived.is_set()  # stopped for new weights
            and new.shape[1] < params.max_new_tokens
        )
        for row in range(len(rows)):
            ids = new[row].tolist()
            finish = "interrupted" if cut_short else "length"
            if eos_id in ids:
                ids = ids[: ids.index(eos_id) + 1]
                finish = "stop"
            records = None if kept is None else kept[row, : len(ids)].tolist()
            samples.append((ids, logp[row, : len(ids)].tolist(), finish, records))
        return samples


def _stop_when(event: threading.Event):
    """generate's stopping criteria: every row stops once `event` is set (new weights arrived). Imported
    here: transformers' generation module would add 1.0 s to importing rlvr.rollout (measured)."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Arrived(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), event.is_set(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([Arrived()])
