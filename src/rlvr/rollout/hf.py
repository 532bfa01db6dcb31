"""Rollout with Hugging Face `generate`: G sampled completions per prompt.

Behaviour log-probs are taken from the generation logits divided by the
temperature, the same distribution the trainer scores with, so the
importance ratio starts at 1 on the first update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.records import Completion, Problem


@dataclass
class SamplingParams:
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    greedy: bool = False
    decode: str = "generate"
    """'generate' (transformers) or 'loop' (rlvr.rollout.decode: shared prefill, finished rows dropped)."""


def render_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem) -> list[int]:
    if isinstance(problem.prompt, str):
        return tokenizer(problem.prompt, add_special_tokens=False).input_ids
    # return_dict=False: token ids as a list (newer transformers return a BatchEncoding by default)
    return list(tokenizer.apply_chat_template(problem.prompt, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (B, P)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, P)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
    return ids, mask


@torch.no_grad()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem],
             params: SamplingParams, *, group_offset: int = 0, policy_version: int = 0,
             chunk_size: int = 512) -> list[Completion]:
    """Sample `group_size` completions per problem; completions of problem i get group id offset+i."""
    g = 1 if params.greedy else params.group_size
    prompts = [render_prompt(tokenizer, p) for p in problems]
    # every prompt repeated G times, group after group
    rows = [(i, j) for i in range(len(problems)) for j in range(g)]
    out: list[Completion] = []
    was_training = model.training
    model.eval()
    if params.decode == "loop" and _loop_supported(model):
        out = _decode_loop(model, tokenizer, problems, prompts, params, g, group_offset, policy_version, chunk_size)
        model.train(was_training)
        return out
    for start in range(0, len(rows), chunk_size):
        chunk = rows[start:start + chunk_size]
        out.extend(_generate_chunk(model, tokenizer, problems, prompts, chunk, params, group_offset, policy_version))
    model.train(was_training)
    return out


def _loop_supported(model) -> bool:
    from rlvr.rollout.decode import supports_loop
    return supports_loop(model)


def _decode_loop(model, tokenizer, problems, prompts, params, g, group_offset, policy_version, chunk_size):
    from rlvr.rollout.decode import decode

    out: list[Completion] = []
    per_chunk = max(1, chunk_size // g)  # whole groups per chunk
    for start in range(0, len(problems), per_chunk):
        idx = list(range(start, min(start + per_chunk, len(problems))))
        samples = decode(model, [prompts[i] for i in idx], g, max_new_tokens=params.max_new_tokens,
                         temperature=params.temperature, top_p=params.top_p, greedy=params.greedy,
                         eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
        for k, (ids, logps, finish) in enumerate(samples):
            i = idx[k // g]
            out.append(Completion(problem_id=problems[i].id, group_id=group_offset + i, index=k % g,
                                  text=tokenizer.decode(ids, skip_special_tokens=True), prompt_ids=prompts[i],
                                  token_ids=ids, logprobs=logps, finish_reason=finish, policy_version=policy_version))
    return out


def _generate_chunk(model, tokenizer, problems, prompts, rows, params, group_offset, policy_version):
    eos_id = tokenizer.eos_token_id
    input_ids, attention_mask = left_pad([prompts[i] for i, _ in rows], tokenizer.pad_token_id)  # (B, P)
    kwargs = dict(do_sample=False) if params.greedy else dict(
        do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
    gen = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_new_tokens=params.max_new_tokens,
        eos_token_id=eos_id,
        pad_token_id=tokenizer.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
        **kwargs,
    )
    new = gen.sequences[:, input_ids.shape[1]:]  # (B, T)
    temp = 1.0 if params.greedy else params.temperature
    # one step at a time: a (B, V) fp32 slice instead of (B, T, V) copies of every logit
    logp = torch.stack([torch.log_softmax(step.float() / temp, dim=-1).gather(-1, new[:, t, None]).squeeze(-1)
                        for t, step in enumerate(gen.logits)], dim=1)  # (B, T)
    completions = []
    for row, (i, j) in enumerate(rows):
        ids = new[row].tolist()
        finish = "length"
        if eos_id in ids:
            ids = ids[: ids.index(eos_id) + 1]
            finish = "stop"
        completions.append(Completion(
            problem_id=problems[i].id,
            group_id=group_offset + i,
            index=j,
            text=tokenizer.decode(ids, skip_special_tokens=True),
            prompt_ids=prompts[i],
            token_ids=ids,
            logprobs=logp[row, : len(ids)].tolist(),
            finish_reason=finish,
            policy_version=policy_version,
        ))
    return completions
